#!/usr/bin/env python3
"""Reference renderings of chat templates, for tests/template.

For every template in --templates (*.jinja) and every request in --cases (*.json: {"messages",
"tools", "documents", "add_generation_prompt", "continue_final_message", other keys = template
kwargs such as enable_thinking}), writes

    OUT/<template stem>/<case stem>.txt         the rendered prompt, byte for byte
    OUT/<template stem>/<case stem>.error.json  {"error": str(exc), "type": exception class}

and OUT/MANIFEST.json naming the renderer and versions used.

Renderers:
  transformers  tokenizer.apply_chat_template(..., tokenize=False, chat_template=SOURCE) on the
                tokenizer in --tokenizer-dir (the authority; needs `pip install transformers`).
  jinja2        the same environment transformers builds (ImmutableSandboxedEnvironment with
                trim_blocks, lstrip_blocks, loopcontrols, its tojson / raise_exception /
                strftime_now and {% generation %}), the same render call and the same
                continue_final_message handling; special tokens from --tokenizer-dir's
                tokenizer_config.json when given. Used when transformers is not installed.

Usage:
  python3 tools/ref/render_templates.py --tokenizer-dir DIR \
      --templates tests/template/templates --cases tests/template/cases --out tests/template/ref

With --engine-cases FILE (JSON lines {"template", "vars", "expected" | "error"}), checks each
line against jinja2 instead and, with --write, rewrites the expectations from jinja2.
"""

import argparse
import hashlib
import json
import os
import sys
from datetime import datetime


def load_special_tokens(tokenizer_dir):
    """The special_tokens_map transformers passes to templates (only tokens that are set)."""
    if not tokenizer_dir:
        return {}
    path = os.path.join(tokenizer_dir, "tokenizer_config.json")
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    tokens = {}
    for name in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
        value = config.get(name)
        if isinstance(value, dict):
            value = value.get("content")
        if value:
            tokens[name] = value
    extra = config.get("additional_special_tokens")
    if extra:
        tokens["additional_special_tokens"] = [t.get("content") if isinstance(t, dict) else t for t in extra]
    return tokens


def make_jinja2_environment():
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationTag(Extension):
        # transformers' AssistantTracker: {% generation %}...{% endgeneration %} renders its body.
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


class Jinja2Renderer:
    name = "jinja2"

    def __init__(self, tokenizer_dir):
        import jinja2

        self.version = f"jinja2 {jinja2.__version__} (transformers emulation)"
        self.env = make_jinja2_environment()
        self.special_tokens = load_special_tokens(tokenizer_dir)

    def render(self, source, request):
        import copy

        messages = request["messages"]
        tools = request.get("tools")
        documents = request.get("documents")
        add_generation_prompt = bool(request.get("add_generation_prompt", False))
        continue_final_message = bool(request.get("continue_final_message", False))
        kwargs = {k: v for k, v in request.items()
                  if k not in ("messages", "tools", "documents", "add_generation_prompt", "continue_final_message")}
        if continue_final_message and add_generation_prompt:
            raise ValueError("continue_final_message and add_generation_prompt are not compatible.")
        if not messages:
            raise IndexError("list index out of range")  # transformers indexes conversation[0]
        template = self.env.from_string(source)
        chat = copy.deepcopy(messages)
        rendered = template.render(messages=chat, tools=tools, documents=documents,
                                   add_generation_prompt=add_generation_prompt, **{**self.special_tokens, **kwargs})
        if continue_final_message:
            final_message = chat[-1]["content"]
            if isinstance(final_message, (list, tuple)):
                for block in reversed(final_message):
                    if "text" in block:
                        final_message = block["text"]
                        break
                else:
                    raise ValueError("continue_final_message is set but we could not find any text to continue in the final message!")
            if final_message.strip() not in rendered:
                raise ValueError("continue_final_message is set but the final message does not appear in the chat after "
                                 "applying the chat template!")
            loc = rendered.rindex(final_message.strip())
            if rendered[loc: loc + len(final_message.lstrip())] == final_message:
                rendered = rendered[: loc + len(final_message.lstrip())]
            else:
                rendered = rendered[: loc + len(final_message.strip())]
        return rendered


class TransformersRenderer:
    name = "transformers"

    def __init__(self, tokenizer_dir):
        import transformers
        from transformers import AutoTokenizer

        if not tokenizer_dir:
            sys.exit("--tokenizer-dir is required with transformers")
        self.version = f"transformers {transformers.__version__}"
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)

    def render(self, source, request):
        kwargs = {k: v for k, v in request.items()
                  if k not in ("messages", "tools", "documents", "add_generation_prompt", "continue_final_message")}
        return self.tokenizer.apply_chat_template(
            request["messages"],
            tools=request.get("tools"),
            documents=request.get("documents"),
            add_generation_prompt=bool(request.get("add_generation_prompt", False)),
            continue_final_message=bool(request.get("continue_final_message", False)),
            tokenize=False,
            chat_template=source,
            **kwargs,
        )


def pick_renderer(kind, tokenizer_dir):
    if kind in ("auto", "transformers"):
        try:
            return TransformersRenderer(tokenizer_dir)
        except ImportError:
            if kind == "transformers":
                raise
            print("transformers is not installed: emulating it with jinja2", file=sys.stderr)
    return Jinja2Renderer(tokenizer_dir)


def render_all(args):
    renderer = pick_renderer(args.renderer, args.tokenizer_dir)
    templates = sorted(f for f in os.listdir(args.templates) if f.endswith(".jinja"))
    cases = sorted(f for f in os.listdir(args.cases) if f.endswith(".json"))
    manifest = {"renderer": renderer.version, "templates": {}, "cases": len(cases)}
    for template_file in templates:
        stem = template_file[: -len(".jinja")]
        with open(os.path.join(args.templates, template_file), encoding="utf-8", newline="") as f:
            source = f.read()
        manifest["templates"][stem] = hashlib.sha256(source.encode("utf-8")).hexdigest()
        out_dir = os.path.join(args.out, stem)
        os.makedirs(out_dir, exist_ok=True)
        for old in os.listdir(out_dir):
            os.remove(os.path.join(out_dir, old))
        ok = failed = 0
        for case_file in cases:
            case = case_file[: -len(".json")]
            with open(os.path.join(args.cases, case_file), encoding="utf-8") as f:
                request = json.load(f)
            try:
                text = renderer.render(source, request)
            except Exception as e:  # recorded: the engine must fail on the same cases
                with open(os.path.join(out_dir, case + ".error.json"), "w", encoding="utf-8") as f:
                    json.dump({"error": str(e), "type": type(e).__name__}, f, ensure_ascii=False, indent=2)
                    f.write("\n")
                failed += 1
                continue
            with open(os.path.join(out_dir, case + ".txt"), "w", encoding="utf-8", newline="") as f:
                f.write(text)
            ok += 1
        print(f"{stem}: {ok} rendered, {failed} raised", file=sys.stderr)
    with open(os.path.join(args.out, "MANIFEST.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")


def check_engine_cases(args):
    env = make_jinja2_environment()
    lines = []
    with open(args.engine_cases, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                lines.append(json.loads(line))
    bad = 0
    for case in lines:
        try:
            got = {"expected": env.from_string(case["template"]).render(**case.get("vars", {}))}
        except Exception as e:
            got = {"error": str(e), "type": type(e).__name__}
        want = {k: case[k] for k in ("expected", "error", "type") if k in case}
        if got != want:
            bad += 1
            if not args.write:
                print(f"MISMATCH {case['template']!r}\n  file:   {want!r}\n  jinja2: {got!r}")
        for k in ("expected", "error", "type"):
            case.pop(k, None)
        case.update(got)
    if args.write:
        with open(args.engine_cases, "w", encoding="utf-8") as f:
            for case in lines:
                f.write(json.dumps(case, ensure_ascii=False) + "\n")
    print(f"{len(lines) - bad}/{len(lines)} engine cases agree with jinja2", file=sys.stderr)
    return 1 if bad and not args.write else 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokenizer-dir", help="directory with tokenizer.json and tokenizer_config.json")
    p.add_argument("--templates", default="tests/template/templates")
    p.add_argument("--cases", default="tests/template/cases")
    p.add_argument("--out", default="tests/template/ref")
    p.add_argument("--renderer", choices=["auto", "transformers", "jinja2"], default="auto")
    p.add_argument("--engine-cases", help="check a JSON-lines file of engine snippets against jinja2")
    p.add_argument("--write", action="store_true", help="with --engine-cases: rewrite expectations from jinja2")
    args = p.parse_args()
    if args.engine_cases:
        return check_engine_cases(args)
    render_all(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
