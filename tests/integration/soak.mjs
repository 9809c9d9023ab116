// The soak (issue #31): a gateway on a fixed port with one supervised `strata serve` lane, mixed
// traffic from a few concurrent clients (OpenAI chat whole and streamed, Anthropic messages whole
// and streamed, the Responses API whole and streamed, some of them aborted by their client), and
// kill -9 at random moments of the lane's engine, of the lane (serve) and of the gateway itself;
// after a gateway kill it is started again on the same port, config and store file, as an
// operator's supervisor (systemd) would. Used by tests/integration/soak.test.mjs (~60 s) and
// bench/soak.mjs (`--seconds 600`; figures in docs/BENCHMARKS.md).
//
// Every request is classified: answered (a whole answer with output, or a stream that reached its
// end event); told it failed (an error status in the API's shape, or an error event ending the
// stream); cut by a gateway kill (a connection error or a stream ended without its end event, for
// a request that was in flight on a gateway that was killed, or was refused while none listened);
// aborted by its own client; hung (no end within the per-request deadline); lost (anything else:
// e.g. a stream that ended without an end or error on a live gateway). After the soak the RSS and
// non-socket descriptors of the gateway, lane and engine are compared with their figures after
// warm-up, every process killed or replaced must be gone, and one more request must be answered.
import { execFileSync } from 'node:child_process';
import { appendFileSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// RSS (KiB) and descriptors that are not sockets (pipes, files: the clients' connection pools
// move the socket count, nothing should move these). null when the process is gone.
export function processFigures(pid) {
  try {
    const rss = Number(readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]);
    const fds = readdirSync(`/proc/${pid}/fd`).filter((f) => {
      try { return !readlinkSync(`/proc/${pid}/fd/${f}`).startsWith('socket:'); } catch { return false; }
    }).length;
    return { rss, fds };
  } catch {
    return null;
  }
}

// A process's start time (clock ticks since boot, /proc/PID/stat field 22): with pid_max 32768
// and other suites running, pids are reused within minutes, so a pid alone does not name one.
const startTime = (pid) => { try { return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')[19]; } catch { return null; } };
const alive = (pid, started) => { try { const st = readFileSync(`/proc/${pid}/stat`, 'utf8'); return !st.includes(') Z ') && startTime(pid) === started; } catch { return false; } };
function childOf(pid, word) {
  try {
    const out = execFileSync('ps', ['-o', 'pid=,args=', '--ppid', String(pid)]).toString();
    const line = out.split('\n').find((l) => l.includes(` ${word} `));
    return line ? Number(line.trim().split(/\s+/)[0]) : null;
  } catch {
    return null;  // ps exits 1 when there is no child
  }
}

async function freePort() {
  const s = net.createServer();
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  const port = s.address().port;
  await new Promise((r) => s.close(r));
  return port;
}

// Options: harness (tests/integration/harness.mjs), seconds, warmup (s), clients, deadlineMs,
// killEvery ([min, max] s between kills), kill (the roles killed, each with its default share:
// engine 40 %, lane 35 %, gateway 25 %; e.g. ['engine', 'lane'] keeps one gateway alive to watch
// its memory), log (a line sink; the processes' RSS is logged every 30 s).
const KILL_SHARES = { engine: 0.4, lane: 0.35, gateway: 0.25 };
export async function soak({ harness, seconds = 60, warmup = 10, clients = 4, deadlineMs = 120000, killEvery = [4, 12], kill = Object.keys(KILL_SHARES), log = () => {} }) {
  for (const role of kill) if (!(role in KILL_SHARES)) throw new Error(`soak: unknown role to kill: ${role}`);
  const tag = `soak-${process.pid}`;
  const modelId = tag;
  const port = await freePort();
  const store = join(harness.workDir, `${tag}.sqlite`);
  rmSync(store, { force: true });
  const cfg = join(harness.workDir, `${tag}.toml`);
  writeFileSync(cfg, `[server]
listen = "127.0.0.1:${port}"
[limits]
lane_wait_s = 30
[long_context]
store = "${store}"
[[lanes]]
name = "tiny"
command = ["${harness.strataBin}", "serve", "-m", "${harness.model('qwen3')}", "--name", "${modelId}", "--ctx", "4096", "--parallel", "4"]
models = ["${modelId}"]
`);
  const base = `http://127.0.0.1:${port}`;
  // The gateways' messages (each one's, at its kill and at the end): for a look after a failure.
  const gatewayLog = join(harness.workDir, `${tag}-gateway.log`);
  rmSync(gatewayLog, { force: true });
  const keepLog = (g) => appendFileSync(gatewayLog, `--- gateway ${g.child.pid}\n${g.log()}`);
  let gw = await harness.startGateway(['--config', cfg], { logName: tag });
  let gatewayUp = true;
  let gatewayEpoch = 0;  // increases at every gateway kill: a request sees whether one happened during it
  const seen = { gateway: new Map([[gw.child.pid, startTime(gw.child.pid)]]), lane: new Map(), engine: new Map() };
  const pids = () => {
    const g = gw.child.pid, l = childOf(g, 'serve'), e = l ? childOf(l, 'engine') : null;
    if (l && !seen.lane.has(l)) seen.lane.set(l, startTime(l));
    if (e && !seen.engine.has(e)) seen.engine.set(e, startTime(e));
    return { gateway: g, lane: l, engine: e };
  };
  const healthy = async () => {
    try {
      const h = await (await fetch(`${base}/health`, { signal: AbortSignal.timeout(5000) })).json();
      const p = pids();
      return h.lanes?.[0]?.healthy === true && p.lane > 0 && p.engine > 0;
    } catch { return false; }
  };
  await harness.waitFor('a healthy lane', healthy, 120000);

  const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'x', maxRetries: 0, timeout: deadlineMs });
  const anthropic = new Anthropic({ baseURL: base, apiKey: 'x', maxRetries: 0, timeout: deadlineMs });
  const NO_EOS = { 151645: -100 };
  const outcomes = { answered: 0, failed: 0, cut_by_gateway_kill: 0, aborted: 0, hung: 0, lost: 0 };
  const byKind = {};
  const lost = [], hung = [];
  const failures = {};  // first words of the error messages, counted

  // One request of kind `kind`; `abortAfter`: the client aborts it after that many stream events
  // (or, whole, after that many ms).
  async function request(kind, i, abortAfter, ac, gaveUp) {
    const prompt = `Soak request ${i}: say something about ${(i * 7919) % 1000}.`;
    const stream = kind.endsWith('stream');
    const opts = { signal: ac.signal };
    let ended = false, events = 0;
    // A stream its client gives up on is left by `break` (the SDKs then abort the request): an
    // abort signal fired inside the loop can leave @anthropic-ai/sdk 1.14's iterator waiting
    // forever on a read of the cancelled body (seen: node exits with the await unsettled).
    const quit = () => { events += 1; if (abortAfter !== undefined && stream && events >= abortAfter) { gaveUp.value = true; return true; } return false; };
    if (abortAfter !== undefined && !stream) setTimeout(() => ac.abort(), abortAfter);
    if (kind.startsWith('chat')) {
      const body = { model: modelId, messages: [{ role: 'user', content: prompt }], max_tokens: 48, logit_bias: NO_EOS, stream };
      if (!stream) return (await openai.chat.completions.create(body, opts)).usage.completion_tokens > 0;
      for await (const c of await openai.chat.completions.create(body, opts)) { if (quit()) break; if (c.choices?.[0]?.finish_reason) ended = true; }
      return ended;
    }
    if (kind.startsWith('messages')) {
      const body = { model: modelId, max_tokens: 48, messages: [{ role: 'user', content: prompt }], stream };
      if (!stream) return (await anthropic.messages.create(body, opts)).usage.output_tokens > 0;
      for await (const e of await anthropic.messages.create(body, opts)) { if (quit()) break; if (e.type === 'message_stop') ended = true; }
      return ended;
    }
    const body = { model: modelId, input: prompt, max_output_tokens: 48, stream };
    if (!stream) { const r = await openai.responses.create(body, opts); return r.status === 'completed' || r.status === 'incomplete'; }
    for await (const e of await openai.responses.create(body, opts)) {
      if (quit()) break;
      if (e.type === 'error' || e.type === 'response.failed') throw Object.assign(new Error(`responses ${e.type}: ${JSON.stringify(e).slice(0, 200)}`), { toldFailed: true });
      if (e.type === 'response.completed' || e.type === 'response.incomplete') ended = true;
    }
    return ended;
  }

  const KINDS = ['chat whole', 'chat stream', 'messages whole', 'messages stream', 'responses whole', 'responses stream'];
  let next = 0;
  let counting = false;
  const record = (kind, outcome) => {
    if (!counting) return;
    outcomes[outcome] += 1;
    (byKind[kind] ??= {})[outcome] = (byKind[kind][outcome] ?? 0) + 1;
  };
  async function one() {
    const i = next++;
    const kind = KINDS[Math.floor(Math.random() * KINDS.length)];
    const abortAfter = Math.random() < 0.1 ? (kind.endsWith('stream') ? 1 + Math.floor(Math.random() * 6) : 50 + Math.random() * 400) : undefined;
    const epoch = gatewayEpoch, upAtStart = gatewayUp;
    const what = `${kind} #${i} (started ${new Date().toISOString()}${abortAfter !== undefined ? `, abort after ${abortAfter.toFixed(0)}` : ''})`;
    const ac = new AbortController(), gaveUp = { value: false };
    let timer;
    const deadline = new Promise((r) => { timer = setTimeout(() => r('hung'), deadlineMs + 5000); });
    const attempt = (async () => {
      try {
        const done = await request(kind, i, abortAfter, ac, gaveUp);
        if (ac.signal.aborted || gaveUp.value) return 'aborted';
        return done ? 'answered' : (gatewayEpoch !== epoch ? 'cut_by_gateway_kill' : 'lost:stream ended without its end event or an error');
      } catch (e) {
        if (ac.signal.aborted) return 'aborted';
        if (e instanceof OpenAI.APIUserAbortError || e instanceof Anthropic.APIUserAbortError || e.name === 'AbortError') return 'aborted';
        if (e instanceof OpenAI.APIConnectionTimeoutError || e instanceof Anthropic.APIConnectionTimeoutError) return 'hung';
        if (e instanceof OpenAI.APIConnectionError || e instanceof Anthropic.APIConnectionError || /terminated|ECONNRESET|socket hang up|other side closed/i.test(String(e?.cause ?? e))) {
          return gatewayEpoch !== epoch || !upAtStart || !gatewayUp ? 'cut_by_gateway_kill' : `lost:connection error on a live gateway: ${e} ${e.cause ?? ''}`;
        }
        if (e instanceof OpenAI.APIError || e instanceof Anthropic.APIError || e.toldFailed) {
          // An error status must be in the API's shape with a message (the SDKs read it); a
          // stream's error event has no status.
          if (e.status !== undefined && (e.status < 500 && e.status !== 429 && e.status !== 408)) return `lost:unexpected ${e.status}: ${e.message}`;
          const key = `${e.status ?? 'event'} ${String(e.message).replace(/\d+/g, 'N').slice(0, 70)}`;
          if (counting) failures[key] = (failures[key] ?? 0) + 1;
          return 'failed';
        }
        return `lost:${e?.stack ?? e}`;
      }
    })();
    const result = await Promise.race([attempt, deadline]);
    clearTimeout(timer);
    if (result === 'hung') ac.abort();
    if (result === 'hung') { if (counting) hung.push(what); record(kind, 'hung'); return; }
    if (result.startsWith('lost:')) { if (counting) lost.push(`${what}: ${result.slice(5)}`); record(kind, 'lost'); return; }
    record(kind, result);
    if (result === 'cut_by_gateway_kill') await sleep(200);  // a refused connect: do not spin
  }
  const worker = async (until) => { while (Date.now() < until) await one(); };

  // Warm-up: the same traffic, not counted, then the figures the soak must come back to.
  await Promise.all(Array.from({ length: clients }, () => worker(Date.now() + warmup * 1000)));
  const p0 = pids();
  const cache0 = await harness.metric(base, 'strata_gateway_session_cache_bytes');
  const before = { gateway: processFigures(p0.gateway), lane: processFigures(p0.lane), engine: processFigures(p0.engine) };
  log(`warm-up done: gateway ${p0.gateway} ${JSON.stringify(before.gateway)}, lane ${p0.lane} ${JSON.stringify(before.lane)}, engine ${p0.engine} ${JSON.stringify(before.engine)}`);

  // Per process: its figures first seen after its own warm-up (10 s alive) and last seen, to
  // report the growth of the longest-lived one of each role.
  const lifetimes = {};
  // Returns what it read, by role (for the log every 30 s).
  const sample = () => {
    const p = pids();
    const read = {};
    for (const [role, pid] of Object.entries(p)) {
      if (!pid) continue;
      const f = processFigures(pid);
      if (!f) continue;
      read[role] = { pid, rss: f.rss };
      const l = (lifetimes[`${role} ${pid}`] ??= { role, pid, born: Date.now(), first: null, last: null, lastAt: 0 });
      if (!l.first && Date.now() - l.born >= 10000) l.first = { ...f, at: Date.now() };
      if (l.first) { l.last = f; l.lastAt = Date.now(); }
    }
    return read;
  };
  sample();
  for (const l of Object.values(lifetimes)) { l.born -= 10000; }  // the warmed-up ones count from now
  sample();

  counting = true;
  const until = Date.now() + seconds * 1000;
  const kills = { engine: 0, lane: 0, gateway: 0, missed: 0 };
  const killer = async () => {
    for (;;) {
      await sleep((killEvery[0] + Math.random() * (killEvery[1] - killEvery[0])) * 1000);
      if (Date.now() > until - 5000) return;
      if (kill.length === 0) continue;
      let r = Math.random() * kill.reduce((a, k) => a + KILL_SHARES[k], 0);
      const role = kill.find((k) => (r -= KILL_SHARES[k]) < 0) ?? kill[kill.length - 1];
      const pid = pids()[role];
      if (!pid) { kills.missed += 1; continue; }  // between processes: that one is being replaced
      try { process.kill(pid, 'SIGKILL'); } catch { kills.missed += 1; continue; }
      kills[role] += 1;
      log(`${new Date().toISOString()} (${((Date.now() - until) / 1000 + seconds).toFixed(1)} s): kill -9 ${role} ${pid}`);
      if (role === 'gateway') {
        gatewayUp = false;
        gatewayEpoch += 1;
        await new Promise((r) => (gw.child.exitCode !== null || gw.child.signalCode !== null ? r() : gw.child.once('exit', r)));
        // The supervisor's restart (systemd's RestartSec is 100 ms).
        await sleep(100);
        keepLog(gw);
        gw = await harness.startGateway(['--config', cfg], { logName: tag });
        seen.gateway.set(gw.child.pid, startTime(gw.child.pid));
        gatewayUp = true;
      }
    }
  };
  const sampler = async () => {
    for (let n = 0; Date.now() < until; ++n) {
      const read = sample();
      if (n % 15 === 0) log(`${((Date.now() - until) / 1000 + seconds).toFixed(0)} s: RSS MiB ${Object.entries(read).map(([role, f]) => `${role} ${f.pid} ${(f.rss / 1024).toFixed(1)}`).join(', ')}`);
      await sleep(2000);
    }
  };
  const t0 = Date.now();
  await Promise.all([...Array.from({ length: clients }, () => worker(until)), killer(), sampler()]);
  const elapsed = (Date.now() - t0) / 1000;
  counting = false;

  // Quiet: a healthy lane again, one more request answered, then the figures after.
  await harness.waitFor('a healthy lane after the soak', healthy, 120000);
  const final = await openai.chat.completions.create({ model: modelId, messages: [{ role: 'user', content: 'after the soak' }], max_tokens: 4, logit_bias: NO_EOS });
  const finalOk = final.usage.completion_tokens === 4;
  await sleep(1000);
  sample();
  const p1 = pids();
  const after = { gateway: processFigures(p1.gateway), lane: processFigures(p1.lane), engine: processFigures(p1.engine) };
  // Every process replaced is gone (a killed gateway's lane dies with it, a killed lane's engine too).
  await sleep(3000);
  const current = new Set(Object.values(pids()));
  const leftBehind = [];
  for (const [role, map] of Object.entries(seen)) for (const [pid, started] of map) if (started && !current.has(pid) && alive(pid, started)) leftBehind.push(`${role} ${pid}`);
  const restarts = await harness.metric(base, 'strata_gateway_lane_restarts_total');
  const cache1 = await harness.metric(base, 'strata_gateway_session_cache_bytes');
  await gw.stop();
  keepLog(gw);
  rmSync(store, { force: true });
  for (const suffix of ['-wal', '-shm', '-journal']) rmSync(store + suffix, { force: true });
  rmSync(cfg, { force: true });

  const longest = {};
  for (const l of Object.values(lifetimes)) {
    if (!l.first || !l.last) continue;
    const life = (l.lastAt - l.first.at) / 1000;
    if (!longest[l.role] || life > longest[l.role].life) longest[l.role] = { pid: l.pid, life, first: l.first, last: l.last };
  }
  return { sessionCacheBytes: [cache0, cache1], gatewayLog, seconds: elapsed, clients, deadlineMs, outcomes, byKind, lost, hung, failures, kills, before, after, pids: { before: p0, after: p1 }, longest, leftBehind, finalOk, restartsOfLastGateway: restarts };
}

// The margins "flat" is held to: RSS within 20% or 32 MiB of the figure after warm-up (whichever
// is larger: allocator arenas and caches settle), non-socket descriptors within 2 (a store
// journal or a lane's pipe can be open at the moment of a look).
export const MARGIN = { rssFraction: 0.2, rssKiB: 32 * 1024, fds: 2 };
export function growthProblems(r) {
  const problems = [];
  const check = (what, a, b) => {
    if (!a || !b) { problems.push(`${what}: no figures (${JSON.stringify(a)} -> ${JSON.stringify(b)})`); return; }
    if (b.rss - a.rss > Math.max(MARGIN.rssKiB, a.rss * MARGIN.rssFraction)) problems.push(`${what}: RSS ${a.rss} -> ${b.rss} KiB`);
    if (b.fds - a.fds > MARGIN.fds) problems.push(`${what}: non-socket fds ${a.fds} -> ${b.fds}`);
  };
  for (const role of ['gateway', 'lane', 'engine']) check(`${role} (after warm-up -> after the soak)`, r.before[role], r.after[role]);
  // The longest-lived gateway and lane from 10 s after their start; a young engine's own growth
  // is printed, not held to the margin: its KV pages and prefix cache fill in its first seconds
  // (bounded by --kv-mib; seen +32 MiB in 10 s), and the engine at the end is checked above.
  for (const [role, l] of Object.entries(r.longest)) {
    if (role !== 'engine') check(`longest-lived ${role} ${l.pid} (${l.life.toFixed(0)} s)`, l.first, l.last);
  }
  return problems;
}

const mib = (kib) => (kib / 1024).toFixed(1);
export function summary(r) {
  const lines = [];
  lines.push(`soak: ${r.seconds.toFixed(0)} s of mixed traffic, ${r.clients} clients, per-request deadline ${r.deadlineMs / 1000} s`);
  const total = Object.values(r.outcomes).reduce((a, b) => a + b, 0);
  lines.push(`requests: ${total}: ${Object.entries(r.outcomes).map(([k, v]) => `${v} ${k.replace(/_/g, ' ')}`).join(', ')}`);
  for (const [kind, o] of Object.entries(r.byKind)) lines.push(`  ${kind.padEnd(16)} ${Object.entries(o).map(([k, v]) => `${k.replace(/_/g, ' ')} ${v}`).join(', ')}`);
  lines.push(`kills (kill -9): engine ${r.kills.engine}, lane ${r.kills.lane}, gateway ${r.kills.gateway} (${r.kills.missed} missed: the process was being replaced)`);
  if (Object.keys(r.failures).length) {
    lines.push('told they failed, by message:');
    for (const [m, n] of Object.entries(r.failures).sort((a, b) => b[1] - a[1])) lines.push(`  ${String(n).padStart(4)}  ${m}`);
  }
  lines.push(`RSS MiB / non-socket fds, after warm-up -> after the soak (margin: +${MARGIN.rssFraction * 100}% or +${MARGIN.rssKiB / 1024} MiB, +${MARGIN.fds} fds):`);
  for (const role of ['gateway', 'lane', 'engine']) {
    const a = r.before[role], b = r.after[role];
    lines.push(`  ${role.padEnd(8)} pid ${r.pids.before[role]} -> ${r.pids.after[role]}: ${a ? mib(a.rss) : '?'} -> ${b ? mib(b.rss) : '?'} MiB, ${a?.fds ?? '?'} -> ${b?.fds ?? '?'} fds`);
  }
  lines.push(`gateway session cache (strata_gateway_session_cache_bytes): ${r.sessionCacheBytes[0]} after warm-up -> ${r.sessionCacheBytes[1]} after the soak (the last gateway's)`);
  lines.push('longest-lived process of each role (from 10 s after its start to its last look):');
  for (const [role, l] of Object.entries(r.longest)) lines.push(`  ${role.padEnd(8)} pid ${l.pid}, ${l.life.toFixed(0)} s: ${mib(l.first.rss)} -> ${mib(l.last.rss)} MiB, ${l.first.fds} -> ${l.last.fds} fds`);
  lines.push(`processes left behind by kills: ${r.leftBehind.length ? r.leftBehind.join(', ') : 'none'}; request after the soak: ${r.finalOk ? 'answered' : 'NOT answered'}`);
  for (const l of r.lost) lines.push(`LOST: ${l}`);
  for (const h of r.hung) lines.push(`HUNG: ${h}`);
  lines.push(`the gateways' messages: ${r.gatewayLog}`);
  return lines.join('\n');
}
