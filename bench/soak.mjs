// The soak at full length (tests/integration/soak.mjs; tests/integration/soak.test.mjs runs ~60 s):
//   STRATA_BIN=build/strata node bench/soak.mjs [--seconds 600] [--clients 4] [--warmup 20] [--kill engine,lane,gateway]
// A gateway with a supervised `strata serve` lane, mixed traffic (OpenAI chat, Anthropic
// messages, Responses; whole and streamed; some aborted), kill -9 of the engine, the lane and the
// gateway at random moments (the gateway restarted on its port and store as systemd would).
// Prints the summary; exits 1 on a lost or hung request, a process left behind, or RSS / fd
// growth beyond the margins (tests/integration/soak.mjs MARGIN). Figures: docs/BENCHMARKS.md.
import * as harness from '../tests/integration/harness.mjs';
import { soak, summary, growthProblems } from '../tests/integration/soak.mjs';

const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const seconds = arg('seconds', 600), clients = arg('clients', 4), warmup = arg('warmup', 20);
const killArg = process.argv.indexOf('--kill');
if (killArg > 0 && process.argv[killArg + 1] === undefined) {
  console.error('soak: --kill needs a list of roles: engine,lane,gateway (any of them; "" for none)');
  process.exit(2);
}
const kill = killArg > 0 ? process.argv[killArg + 1].split(',').filter((k) => k !== '') : undefined;
for (const role of kill ?? []) {
  if (!['engine', 'lane', 'gateway'].includes(role)) {
    console.error(`soak: --kill: unknown role '${role}' (engine, lane or gateway)`);
    process.exit(2);
  }
}
const started = new Date();
let r;
try {
  r = await soak({ harness, seconds, clients, warmup, kill, log: (s) => console.error(s) });
} finally {
  await harness.stopAll();
}
console.log(`${started.toISOString()} - ${new Date().toISOString()}, load average ${(await import('node:os')).loadavg().map((x) => x.toFixed(1)).join(' ')}`);
console.log(summary(r));
const problems = growthProblems(r);
for (const p of problems) console.log(`GROWTH: ${p}`);
const bad = r.lost.length + r.hung.length + r.leftBehind.length + problems.length + (r.finalOk ? 0 : 1);
console.log(bad === 0 ? 'soak: PASS' : 'soak: FAIL');
process.exit(bad === 0 ? 0 : 1);
