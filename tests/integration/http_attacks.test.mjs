// The HTTP layer under hostile clients, against `strata serve` and against `strata gateway` (in
// front of a serve lane): 1,000 slowloris connections (a request head trickled a field a second)
// and 1,000 idle keep-alive connections held open at once, while a normal request from another
// address is still answered within a second; the slowloris heads then end in 408 at the head
// deadline and the idle connections are closed at the keep-alive deadline; connections from one
// address beyond the cap get a 503; 50 parallel million-line header floods (each ~6 MB that never
// ends its head) are refused with 431 and leave the process's RSS within 100 MiB of where it was,
// and back near it afterwards. The attack connections come from other loopback addresses
// (127.0.0.2-127.0.0.41) so that the per-address cap is not what stops them: the test needs each
// connection held. Figures are printed (docs/BENCHMARKS.md quotes them).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stopAll, startServer, startGateway, workDir } from './harness.mjs';

after(stopAll);

const SLOWLORIS = 1000, IDLE = 1000, FLOODS = 50, FLOOD_LINES = 1_000_000;
const HEADER_TIMEOUT_S = 10, KEEPALIVE_TIMEOUT_S = 10;
const PER_ADDRESS = 50;  // attack connections from one source address

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const rssMiB = (pid) => Number(readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]) / 1024;

// A raw connection that records what it received and whether it was closed.
function connect(port, localAddress) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port, localAddress });
    const c = { socket: s, data: '', closed: false, error: null };
    s.setEncoding('latin1');
    s.on('data', (d) => { c.data += d; });
    s.on('error', (e) => { c.error = e; });
    s.on('close', () => { c.closed = true; });
    s.on('connect', () => resolve(c));
    s.on('error', () => resolve(c));
  });
}

// `n` connections, PER_ADDRESS from each loopback address starting at 127.0.0.<first>, opened in
// batches (the listen backlog is 1,024).
async function openMany(port, n, first) {
  const out = [];
  for (let i = 0; i < n; i += 100) {
    const batch = [];
    for (let j = i; j < Math.min(n, i + 100); ++j) batch.push(connect(port, `127.0.0.${first + Math.floor(j / PER_ADDRESS)}`));
    out.push(...await Promise.all(batch));
  }
  return out;
}

async function waitUntil(what, fn, ms) {
  const deadline = Date.now() + ms;
  while (!fn()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

// One request on a fresh connection (no keep-alive connection from before is reused: that would
// measure a connection the server already holds), within `ms` or an error.
function request(port, { method = 'GET', path = '/health', headers = {}, body } = {}, ms = 1000) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, headers, agent: false, timeout: ms }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, text }));
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${ms} ms`)));
    req.on('error', reject);
    req.end(body);
  });
}

// Times one request; it must be answered (200) within a second.
async function timed(what, fn) {
  const t0 = performance.now();
  const r = await fn(1000);
  const ms = performance.now() - t0;
  assert.equal(r.status, 200, `${what}: status ${r.status}`);
  return Math.round(ms * 10) / 10;
}

// The attack, the checks and the figures, against the process `pid` listening on `port`.
async function attack({ name, port, pid, normal }) {
  const figures = { name, rss_before_attack_mib: Math.round(rssMiB(pid) * 10) / 10 };
  // Requests before the attack, so that what is timed below is the server, not node's first use
  // of its HTTP client.
  assert.equal((await request(port, {}, 60000)).status, 200);
  assert.equal((await normal(60000)).status, 200);
  // Slowloris: a head that never ends, one more field every second.
  const slow = await openMany(port, SLOWLORIS, 2);
  for (const c of slow) c.socket.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n');
  const trickle = setInterval(() => { for (const c of slow) if (!c.closed) c.socket.write('X-Trickle: 1\r\n'); }, 1000);
  // Idle keep-alives: one request answered, then silence.
  const idle = await openMany(port, IDLE, 2 + SLOWLORIS / PER_ADDRESS);
  for (const c of idle) c.socket.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
  await waitUntil('the idle connections\' first answers', () => idle.every((c) => c.data.includes('\r\n\r\n') || c.closed), 30000);
  assert.ok(idle.every((c) => c.data.startsWith('HTTP/1.1 200')), 'every keep-alive connection was answered');
  try {
    // Everything is held open now: the process keeps all 2,000 and still answers at once.
    assert.equal(slow.filter((c) => c.closed).length, 0, 'no slowloris connection was refused or dropped yet');
    assert.equal(idle.filter((c) => c.closed).length, 0, 'no idle connection was dropped yet');
    figures.health_ms = await timed(`${name} /health`, (ms) => request(port, {}, ms));
    figures.chat_ms = await timed(`${name} chat`, normal);
    figures.rss_under_attack_mib = Math.round(rssMiB(pid) * 10) / 10;
  } finally {
    clearInterval(trickle);
  }
  // The deadlines: 408 for the heads, the idle connections closed without a word.
  await waitUntil('slowloris heads to time out', () => slow.every((c) => c.closed), (HEADER_TIMEOUT_S + 15) * 1000);
  assert.ok(slow.every((c) => c.data.startsWith('HTTP/1.1 408')), `a slowloris head answered ${slow.find((c) => !c.data.startsWith('HTTP/1.1 408'))?.data.slice(0, 40)}`);
  await waitUntil('idle connections to be closed', () => idle.every((c) => c.closed), (KEEPALIVE_TIMEOUT_S + 15) * 1000);
  for (const c of [...slow, ...idle]) c.socket.destroy();

  // Header floods: 50 at once, each a million header lines, from unauthenticated clients.
  await sleep(500);
  const before = rssMiB(pid);
  let peak = before;
  const sampler = setInterval(() => { peak = Math.max(peak, rssMiB(pid)); }, 20);
  const line = 'a: b\r\n'.repeat(10000);  // 60 KB a write
  const floods = await openMany(port, FLOODS, 60);
  await Promise.all(floods.map(async (c) => {
    c.socket.write('GET /health HTTP/1.1\r\nHost: x\r\n');
    for (let i = 0; i < FLOOD_LINES / 10000 && !c.closed && !c.error; ++i) {
      if (!c.socket.write(line)) await new Promise((r) => { c.socket.once('drain', r); c.socket.once('close', r); });
    }
    await waitUntil('a flood connection to be closed', () => c.closed, 30000);
  }));
  clearInterval(sampler);
  await sleep(1000);
  const afterRss = rssMiB(pid);
  assert.ok(floods.every((c) => c.data.startsWith('HTTP/1.1 431')), `a flood was answered ${floods.find((c) => !c.data.startsWith('HTTP/1.1 431'))?.data.slice(0, 40)}`);
  figures.flood_rss_before_mib = Math.round(before * 10) / 10;
  figures.flood_rss_peak_mib = Math.round(peak * 10) / 10;
  figures.flood_rss_after_mib = Math.round(afterRss * 10) / 10;
  assert.ok(peak - before < 100, `${name}: RSS grew ${peak - before} MiB under the floods`);
  assert.ok(afterRss - before < 20, `${name}: RSS stayed ${afterRss - before} MiB above where it was`);

  // Still answering normally.
  figures.health_after_ms = await timed(`${name} /health after`, (ms) => request(port, {}, ms));
  console.log(`http-attacks figures: ${JSON.stringify(figures)}`);
  return figures;
}

async function perAddressCap(port, cap) {
  const held = [];
  for (let i = 0; i < cap; ++i) held.push(await connect(port, '127.0.0.250'));
  await sleep(300);
  assert.equal(held.filter((c) => c.closed).length, 0, 'connections up to the cap are held');
  const over = await connect(port, '127.0.0.250');
  await waitUntil('the connection over the cap to be closed', () => over.closed, 10000);
  assert.ok(over.data.startsWith('HTTP/1.1 503'), `over the cap: ${over.data.slice(0, 40)}`);
  for (const c of held) c.socket.destroy();
}

test('strata serve: slowloris, idle keep-alives and header floods leave it answering, bounded and released', async () => {
  const s = await startServer({ logName: 'http-attacks-serve',
    args: ['--header-timeout', String(HEADER_TIMEOUT_S), '--keepalive-timeout', String(KEEPALIVE_TIMEOUT_S), '--max-connections-per-peer', '64'] });
  const chat = (ms) => request(s.port, { method: 'POST', path: '/v1/chat/completions', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'strata-tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }) }, ms);
  await attack({ name: 'serve', port: s.port, pid: s.child.pid, normal: chat });
  await perAddressCap(s.port, 64);
  assert.equal(s.child.exitCode, null);
  await s.stop();
});

test('strata gateway: the same against the process that faces the network, with keys required', async () => {
  const lane = await startServer({ logName: 'http-attacks-lane' });
  const config = join(workDir, `http-attacks-gateway-${process.pid}.toml`);
  writeFileSync(config, `[server]\nlisten = "127.0.0.1:0"\n\n[limits]\nheader_timeout_s = ${HEADER_TIMEOUT_S}\nkeepalive_timeout_s = ${KEEPALIVE_TIMEOUT_S}\n` +
    `max_connections_per_peer = 64\n\n[long_context]\nstore = ""\n\n[[lanes]]\nname = "tiny"\nupstream = "${lane.base}"\nmodels = ["*"]\n\n` +
    `[[keys]]\nname = "k"\nsha256 = "${(await import('node:crypto')).createHash('sha256').update('sk-attack').digest('hex')}"\n`);
  const gw = await startGateway(['--config', config], { logName: 'http-attacks-gateway' });
  const chat = (ms) => request(gw.port, { method: 'POST', path: '/v1/chat/completions', headers: { 'content-type': 'application/json', authorization: 'Bearer sk-attack' },
    body: JSON.stringify({ model: 'strata-tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }) }, ms);
  await attack({ name: 'gateway', port: gw.port, pid: gw.child.pid, normal: chat });
  await perAddressCap(gw.port, 64);
  assert.equal(gw.child.exitCode, null);
  await gw.stop();
  await lane.stop();
});
