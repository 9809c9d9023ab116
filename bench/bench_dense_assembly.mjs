// Dense retrieval's cost in the gateway: a conversation of --tokens tokens of installed text (the
// BABILong suite's haystack) assembled for a lane of --window tokens, with an embed lane
// ([long_context] embed_lane) serving --embed-model (default: the tests' tiny model):
//   STRATA_BIN=build/strata node bench/bench_dense_assembly.mjs [--tokens 1000000] [--window 16384]
//     [--embed-model FILE] [--budget-ms 600000] [--threads N]
// Prints, for the first request (every chunk new), the same request again, and the next turn
// (an answer and a new question appended), the assembly's time, the part spent embedding, the
// chunks embedded and left for later, and the retrieval mode; then the same three without the
// embed lane (BM25 alone) for comparison. Figures: docs/BENCHMARKS.md.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as harness from '../tests/integration/harness.mjs';
import { assemble, haystack, realText } from '../tests/integration/babilong.mjs';

const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const tokens = Number(arg('tokens', 1_000_000)), window = Number(arg('window', 16384));
const budget = Number(arg('budget-ms', 600000)), threads = Number(arg('threads', 2));
const embedModel = arg('embed-model', harness.model('qwen3'));
const corpus = realText();
if (corpus.docs.length === 0) {
  console.error('bench_dense_assembly: no installed text found');
  process.exit(1);
}
const paste = haystack(corpus, Math.round(tokens * 3.6), 99);
const serve = (name, model, ctx) => `["${harness.strataBin}", "serve", "-m", "${model}", "--name", "${name}", "--ctx", "${ctx}", "-t", "${threads}"]`;

async function run(dense) {
  const cfg = join(harness.workDir, `gateway-dense-bench-${dense}-${process.pid}.toml`);
  writeFileSync(cfg, `[server]\nlisten = "127.0.0.1:0"\ndebug_endpoints = true\n[long_context]\nstore = ""\n` +
    (dense ? `embed_lane = "embed"\nembed_budget_ms = ${budget}\nembed_timeout_ms = 600000\n` : '') +
    `[[lanes]]\nname = "tiny"\ncommand = ${serve('strata-tiny', harness.model('qwen3'), window)}\nmodels = ["strata-tiny"]\n` +
    (dense ? `[[lanes]]\nname = "embed"\ncommand = ${serve('embedder', embedModel, 8192)}\nmodels = ["embedder"]\n` : ''));
  const gw = await harness.startGateway(['--config', cfg], { logName: `gateway-dense-bench-${dense}` });
  await harness.waitFor('the lanes', async () => (await (await fetch(`${gw.base}/health`)).json()).lanes.every((l) => l.healthy), 300000);
  const messages = [{ role: 'user', content: `${paste}\n\nWhich licence does the zlib compression library use, and who wrote it?` }];
  const rows = [];
  const measure = async (what) => {
    const t0 = performance.now();
    const a = await assemble(gw.base, 'strata-tiny', messages);
    const s = a.stats;
    rows.push({ what, wall: performance.now() - t0, ...s });
  };
  await measure('first request (all chunks new)');
  await measure('the same request again');
  messages.push({ role: 'assistant', content: 'It uses the zlib licence; Jean-loup Gailly and Mark Adler wrote it.' },
    { role: 'user', content: 'And which licence covers the GNU C library?' });
  await measure('next turn');
  await gw.stop();
  return rows;
}

const fmt = (x) => (typeof x === 'number' ? x.toFixed(1) : String(x));
console.log(`Dense retrieval in the gateway: ~${tokens.toLocaleString('en')} tokens of installed text, lane window ${window}, embed model ${embedModel}, ${threads} lane threads\n`);
console.log('| retrieval | request | wall ms | ms_total | ms_embed | chunks_total | chunks_embedded | chunks_unembedded | mode |');
console.log('|---|---|---|---|---|---|---|---|---|');
for (const dense of [true, false])
  for (const r of await run(dense))
    console.log(`| ${dense ? 'embed lane' : 'BM25 alone'} | ${r.what} | ${fmt(r.wall)} | ${fmt(r.ms_total)} | ${fmt(r.ms_embed ?? 0)} | ${r.chunks_total} | ${r.chunks_embedded ?? 0} | ${r.chunks_unembedded ?? 0} | ${r.retrieval} |`);
await harness.stopAll();
