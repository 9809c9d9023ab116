// The HTTP layer's attack figures against any `strata` binary, old or new (docs/BENCHMARKS.md "HTTP layer
// under attack"): node bench/http_attack_probe.mjs STRATA MODEL slowloris|idle [N] | flood. It starts
// `STRATA serve -m MODEL --port 0`, opens N (1,000) trickling heads or idle keep-alive connections
// from 127.0.0.2-21 and times a /health on a fresh connection (10 s at most); or runs 50 parallel
// million-line header floods and prints the serve process's RSS before, at its peak and after.
import http from 'node:http';
import net from 'node:net';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
const [bin, model, mode, n] = process.argv.slice(2);
const N = Number(n ?? 1000);
const child = spawn(bin, ['serve', '-m', model, '--port', '0', '--name', 'strata-tiny'], { stdio: ['ignore', 'ignore', 'pipe'] });
let err = '';
child.stderr.on('data', (d) => { err += d; });
const port = await new Promise((r) => { const t = setInterval(() => { const m = err.match(/listening on http:\/\/[^:]+:(\d+)/); if (m) { clearInterval(t); r(Number(m[1])); } }, 20); });
const rss = () => Number(readFileSync(`/proc/${child.pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]) / 1024;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
await (await fetch(`http://127.0.0.1:${port}/health`)).text();
const conn = (la) => new Promise((res) => { const s = net.connect({ host: '127.0.0.1', port, localAddress: la }); s.on('connect', () => res(s)); s.on('error', () => res(s)); });
async function timed(what) {
  const t0 = performance.now();
  try { const r = await new Promise((res, rej) => { const q = http.request({ host: '127.0.0.1', port, path: '/health', agent: false, timeout: 10000 }, (x) => { x.resume(); x.on('end', () => res(x)); }); q.on('timeout', () => q.destroy(new Error('timeout'))); q.on('error', rej); q.end(); }); console.log(what, r.statusCode, Math.round(performance.now() - t0), 'ms'); }
  catch (e) { console.log(what, 'no answer within', Math.round(performance.now() - t0), 'ms:', e.name); }
}
const socks = [];
if (mode === 'slowloris' || mode === 'idle') {
  for (let i = 0; i < N; i += 100) socks.push(...await Promise.all(Array.from({ length: 100 }, (_, j) => conn(`127.0.0.${2 + Math.floor((i + j) / 50)}`))));
  for (const s of socks) s.write(mode === 'slowloris' ? 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n' : 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
  const t = setInterval(() => { if (mode === 'slowloris') for (const s of socks) s.write('X-T: 1\r\n'); }, 1000);
  await sleep(2000);
  await timed(`${mode} x1000: /health`);
  let closed = 0; for (const s of socks) if (s.destroyed || s.readyState !== 'open') ++closed;
  console.log('attack sockets closed by then:', closed);
  clearInterval(t);
} else {
  const before = rss(); let peak = before;
  const iv = setInterval(() => { peak = Math.max(peak, rss()); }, 20);
  const line = 'a: b\r\n'.repeat(10000);
  await Promise.all(Array.from({ length: 50 }, async () => {
    const s = await conn('127.0.0.60'); let closed = false; s.on('close', () => { closed = true; }); s.on('error', () => {});
    s.write('GET /health HTTP/1.1\r\nHost: x\r\n');
    for (let i = 0; i < 100 && !closed; ++i) if (!s.write(line)) await new Promise((r) => { s.once('drain', r); s.once('close', r); });
    s.end();
  }));
  await sleep(3000); clearInterval(iv);
  console.log(`floods x50: RSS before ${before.toFixed(1)} MiB, peak ${peak.toFixed(1)}, after ${rss().toFixed(1)}`);
}
for (const s of socks) s.destroy();
child.kill('SIGKILL');
process.exit(0);
