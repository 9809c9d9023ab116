#!/usr/bin/env node
// Renders the chat-template cases with @huggingface/jinja (the JavaScript Jinja of
// transformers.js), laid out like tools/ref/render_templates.py writes them, so the two can be
// compared. Python's jinja2 under transformers is the authority; this is a second opinion.
//
//   npm install --prefix .cache/node @huggingface/jinja
//   node tools/ref/render_templates.mjs [--templates DIR] [--cases DIR] [--out DIR]
//        [--tokenizer-dir DIR] [--jinja PATH/TO/@huggingface/jinja/dist/index.js]
//
// Default --out is .cache/ref-js; compare with `diff -r .cache/ref-js tests/template/ref`.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

function parseArgs(argv) {
    const args = {
        templates: "tests/template/templates",
        cases: "tests/template/cases",
        out: ".cache/ref-js",
        tokenizerDir: null,
        jinja: ".cache/node/node_modules/@huggingface/jinja/dist/index.js",
    };
    for (let i = 2; i < argv.length; i += 2) {
        const key = argv[i].replace(/^--/, "").replace(/-([a-z])/g, (_, c) => c.toUpperCase());
        if (!(key in args)) throw new Error(`unknown option ${argv[i]}`);
        args[key] = argv[i + 1];
    }
    return args;
}

// The special tokens transformers passes (those set in tokenizer_config.json).
function specialTokens(dir) {
    if (!dir) return {};
    const file = path.join(dir, "tokenizer_config.json");
    if (!fs.existsSync(file)) return {};
    const config = JSON.parse(fs.readFileSync(file, "utf8"));
    const out = {};
    for (const name of ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]) {
        let v = config[name];
        if (v && typeof v === "object") v = v.content;
        if (v) out[name] = v;
    }
    return out;
}

const RESERVED = new Set(["messages", "tools", "documents", "add_generation_prompt", "continue_final_message"]);

// transformers' continue_final_message: cut after the last occurrence of the stripped text.
function continueFinal(rendered, messages) {
    let final = messages[messages.length - 1].content;
    if (Array.isArray(final)) {
        const block = [...final].reverse().find((b) => b && "text" in b);
        if (!block) throw new Error("continue_final_message is set but we could not find any text to continue in the final message!");
        final = block.text;
    }
    const stripped = final.trim();
    if (!rendered.includes(stripped)) throw new Error("continue_final_message is set but the final message does not appear in the chat after applying the chat template!");
    const loc = rendered.lastIndexOf(stripped);
    const lstripped = final.trimStart();
    if (rendered.slice(loc, loc + lstripped.length) === final) return rendered.slice(0, loc + lstripped.length);
    return rendered.slice(0, loc + stripped.length);
}

async function main() {
    const args = parseArgs(process.argv);
    const { Template } = await import(pathToFileURL(path.resolve(args.jinja)).href);
    const tokens = specialTokens(args.tokenizerDir);
    const templates = fs.readdirSync(args.templates).filter((f) => f.endsWith(".jinja")).sort();
    const cases = fs.readdirSync(args.cases).filter((f) => f.endsWith(".json")).sort();
    for (const tfile of templates) {
        const stem = tfile.slice(0, -".jinja".length);
        const source = fs.readFileSync(path.join(args.templates, tfile), "utf8");
        const outDir = path.join(args.out, stem);
        fs.mkdirSync(outDir, { recursive: true });
        for (const f of fs.readdirSync(outDir)) fs.unlinkSync(path.join(outDir, f));
        let ok = 0, failed = 0;
        for (const cfile of cases) {
            const name = cfile.slice(0, -".json".length);
            const request = JSON.parse(fs.readFileSync(path.join(args.cases, cfile), "utf8"));
            const vars = { ...tokens };
            for (const [k, v] of Object.entries(request)) if (!RESERVED.has(k)) vars[k] = v;
            vars.messages = request.messages;
            vars.tools = request.tools ?? null;
            vars.documents = request.documents ?? null;
            vars.add_generation_prompt = Boolean(request.add_generation_prompt);
            try {
                let text = new Template(source).render(vars);
                if (request.continue_final_message) text = continueFinal(text, request.messages);
                fs.writeFileSync(path.join(outDir, `${name}.txt`), text);
                ok++;
            } catch (e) {
                fs.writeFileSync(path.join(outDir, `${name}.error.json`), JSON.stringify({ error: String(e.message ?? e), type: e.constructor?.name ?? "Error" }, null, 2) + "\n");
                failed++;
            }
        }
        console.error(`${stem}: ${ok} rendered, ${failed} raised`);
    }
}

main().catch((e) => {
    console.error(e);
    process.exit(1);
});
