// The BABILong-style suite at full size (tests/integration/babilong.mjs):
//   STRATA_BIN=build/strata node bench/bench_babilong.mjs [--tokens 1000000] [--window 16384] [--stories 8]
// Starts a gateway (debug endpoints on) in front of a tiny lane whose window is --window, asks it
// to assemble every sample through POST /v1/gateway/assemble, and prints per task and format (and
// per needle kind) how many samples kept every supporting statement. Figures: docs/BENCHMARKS.md.
import * as harness from '../tests/integration/harness.mjs';
import { realText, runSuite, startAssembleGateway, table } from '../tests/integration/babilong.mjs';

const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const tokens = arg('tokens', 1_000_000), window = arg('window', 16384), stories = arg('stories', 8);
const corpus = realText();
if (corpus.missing.length > 0) console.error(`bench_babilong: no installed text of kind(s): ${corpus.missing.join(', ')}`);
if (corpus.docs.length === 0) process.exit(1);
// About 3.6 bytes a token for this mix with the Qwen3 tokenizer (the table prints the counts).
const bytes = Math.round(tokens * 3.6);
const gw = await startAssembleGateway(harness, window, 'bench');
const t0 = Date.now();
const rows = await runSuite({ base: gw.base, model: 'strata-tiny', corpus, bytes, stories, log: (s) => console.error(s) });
console.log(`BABILong-style suite: ~${tokens.toLocaleString('en')} tokens of installed text, lane window ${window}, ${stories} stories per task (${((Date.now() - t0) / 1000).toFixed(0)} s)\n`);
console.log(table(rows));
await harness.stopAll();
