// strata serve under stress: 32 parallel streams each get exactly their own answer; kill -9 of
// the engine mid-stream ends that stream with an error event while queued work survives the
// restart; a whole answer whose engine was killed is run again; a stopped engine blocks no
// request thread (/metrics answers, big submits wait); slow stream readers do not hold admission
// slots; a client that disconnects cancels its work; a full queue answers 429 / 529 with
// Retry-After; a suite of bad HTTP input gets clean 4xx answers and leaves the server healthy;
// keys given as --api-key, --upstream-key or STRATA_API_KEY are gone from serve's and the
// gateway's own /proc/PID/cmdline and /proc/PID/environ.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { mkdtempSync, writeFileSync, readFileSync, rmSync, readdirSync, readlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import net from 'node:net';
import { join } from 'node:path';
import { stopAll, startServer, startGateway, waitFor, metric } from './harness.mjs';

const servers = [];
after(stopAll);
async function server(opts) {
  const s = await startServer(opts);
  servers.push(s);
  return s;
}
const NO_EOS = { 151645: -100 };
const post = (base, path, body, headers = {}) =>
  fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body) });

test('32 parallel streams each receive exactly their own answer', async () => {
  const s = await server({ args: ['--parallel', '16'], logName: 'parallel' });
  const client = new OpenAI({ baseURL: `${s.base}/v1`, apiKey: 'x', maxRetries: 0 });
  const req = (i) => ({ model: 'strata-tiny', messages: [{ role: 'user', content: `Request number ${i}: tell me about ${i * 7919 % 1000}.` }], max_tokens: 24, temperature: 0.9, seed: 1000 + i, logit_bias: NO_EOS });
  // Alone first (one at a time), then all at once, streamed.
  const alone = [];
  for (let i = 0; i < 32; ++i) alone.push((await client.chat.completions.create(req(i))).choices[0].message.content);
  const together = await Promise.all(Array.from({ length: 32 }, async (_, i) => {
    let text = '';
    for await (const c of await client.chat.completions.create({ ...req(i), stream: true })) text += c.choices[0]?.delta?.content ?? '';
    return text;
  }));
  assert.deepEqual(together, alone);
  assert.equal(new Set(alone).size, 32);
});

test('kill -9 of the engine: the stream in flight gets an error, queued work runs after the restart', async () => {
  const s = await server({ args: ['--parallel', '1'], logName: 'kill' });
  const client = new OpenAI({ baseURL: `${s.base}/v1`, apiKey: 'x', maxRetries: 0 });
  const enginePid = s.enginePid();
  assert.ok(enginePid > 0);
  const long = await client.chat.completions.create({ model: 'strata-tiny', messages: [{ role: 'user', content: 'Go on forever.' }], max_tokens: 60000, stream: true, logit_bias: NO_EOS });
  // A second request waits for the only slot meanwhile.
  let chunks = 0;
  let queued;
  const outcome = (async () => {
    try {
      for await (const c of long) {
        chunks += 1;
        if (chunks === 5) {
          queued = client.chat.completions.create({ model: 'strata-tiny', messages: [{ role: 'user', content: 'Short one.' }], max_tokens: 6, logit_bias: NO_EOS });
          await waitFor('the second request to queue', async () => (await metric(s.base, 'strata_requests_waiting')) === 1);
          process.kill(enginePid, 'SIGKILL');
        }
      }
      return 'ended without error';
    } catch (e) {
      return e;
    }
  })();
  const err = await outcome;
  assert.ok(err instanceof OpenAI.APIError, `stream must end with an error, got: ${err}`);
  assert.match(err.message, /engine/);
  const after = await queued;
  assert.equal(after.usage.completion_tokens, 6);
  const health = await (await fetch(`${s.base}/health`)).json();
  assert.equal(health.status, 'ok');
  assert.equal(health.engine_restarts, 1);
  assert.notEqual(s.enginePid(), enginePid);
  assert.equal(await metric(s.base, 'strata_engine_restarts_total'), 1);
  // And the next request just works.
  const next = await client.chat.completions.create({ model: 'strata-tiny', messages: [{ role: 'user', content: 'Hello again' }], max_tokens: 4, logit_bias: NO_EOS });
  assert.equal(next.usage.completion_tokens, 4);
});

test('a stopped engine (SIGSTOP: a hang): /health turns 503, the stream ends with an error, the engine is replaced', async () => {
  const s = await server({ args: ['--parallel', '2'], logName: 'sigstop' });
  const client = new OpenAI({ baseURL: `${s.base}/v1`, apiKey: 'x', maxRetries: 0 });
  const enginePid = s.enginePid();
  const long = await client.chat.completions.create({ model: 'strata-tiny', messages: [{ role: 'user', content: 'Go on forever.' }], max_tokens: 60000, stream: true, logit_bias: NO_EOS });
  let chunks = 0;
  let stoppedAt = 0;
  const outcome = (async () => {
    try {
      for await (const c of long) {
        chunks += 1;
        if (chunks === 5) {
          process.kill(enginePid, 'SIGSTOP');
          stoppedAt = Date.now();
        }
      }
      return 'ended without error';
    } catch (e) {
      return e;
    }
  })();
  await waitFor('the engine to be stopped', async () => stoppedAt > 0, 10000);
  // Within 10 s the server says it is not serving (before the heartbeat replaces the engine).
  await waitFor('/health to say 503', async () => (await fetch(`${s.base}/health`)).status === 503, 10000);
  const downAfter = Date.now() - stoppedAt;
  const err = await outcome;
  assert.ok(err instanceof OpenAI.APIError, `stream must end with an error, got: ${err}`);
  assert.match(err.message, /answered nothing/);
  const errorAfter = Date.now() - stoppedAt;
  assert.ok(errorAfter < 10000, `the stream ended ${errorAfter} ms after the stop (at most 10 s)`);
  const pidNow = () => { try { return s.enginePid(); } catch { return null; } };  // ps fails while there is none
  await waitFor('a new engine', async () => pidNow() > 0 && pidNow() !== enginePid && (await fetch(`${s.base}/health`)).status === 200, 20000);
  const replacedAfter = Date.now() - stoppedAt;
  const next = await client.chat.completions.create({ model: 'strata-tiny', messages: [{ role: 'user', content: 'Hello again' }], max_tokens: 4, logit_bias: NO_EOS });
  assert.equal(next.usage.completion_tokens, 4);
  const servedAfter = Date.now() - stoppedAt;
  assert.equal(await metric(s.base, 'strata_engine_restarts_total'), 1);
  console.log(`stopped engine (ms after the SIGSTOP): /health 503 by ${downAfter}, error event ${errorAfter}, replacement healthy by ${replacedAfter}, next request served ${servedAfter}`);
  try { process.kill(enginePid, 'SIGKILL'); } catch { /* already gone */ }
});

test('a stopped engine blocks no request thread: /metrics answers within its bound while ~100 KB of submits and a cancel wait', async () => {
  const s = await server({ args: ['--parallel', '8'], logName: 'stopped-writes' });
  const enginePid = s.enginePid();
  // ~1,800 prompt tokens: ~13 KB a submit; n = 8 makes one request ~100 KB of submits (the
  // engine's pipe takes 64 KiB) while its prefill stays short.
  const long = 'lorem ipsum dolor sit amet, consectetur adipiscing elit. '.repeat(180);
  const running = async () => (await (await fetch(`${s.base}/health`)).json()).running;  // /health asks the engine nothing
  process.kill(enginePid, 'SIGSTOP');
  const stoppedAt = Date.now();
  const submits = [0, 1, 2].map((i) => post(s.base, '/v1/chat/completions', { model: 'm', n: 8, max_tokens: 3, messages: [{ role: 'user', content: `${i} ${long}` }], logit_bias: NO_EOS }));
  submits.push(post(s.base, '/v1/messages', { model: 'm', max_tokens: 3, messages: [{ role: 'user', content: `3 ${long}` }] }));
  const ac = new AbortController();
  const left = fetch(`${s.base}/v1/chat/completions`, { method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: `gone ${long}` }], max_tokens: 3 }) }).catch((e) => e);
  await waitFor('five requests submitted to the stopped engine', async () => (await running()) === 5, 8000);
  ac.abort();  // its cancel queues behind the submits
  assert.equal((await left).name, 'AbortError');
  const t0 = Date.now();
  const m = await fetch(`${s.base}/metrics`);
  const took = Date.now() - t0;
  assert.equal(m.status, 200);
  assert.match(await m.text(), /strata_requests_running [45]\n/);
  assert.ok(took < 5000, `/metrics took ${took} ms (it waits for the engine at most 2 s)`);
  assert.ok(Date.now() - stoppedAt < 5500, 'still before the heartbeat replaces the engine (6 s)');
  process.kill(enginePid, 'SIGCONT');
  for (const [i, r] of (await Promise.all(submits)).entries()) {
    const body = await r.json();
    assert.equal(r.status, 200, `request ${i}: ${JSON.stringify(body)}`);
    if (i < 3) assert.equal(body.usage.completion_tokens, 24);
    else assert.ok(body.usage.output_tokens > 0);
  }
  await waitFor('the cancelled request to end', async () => (await running()) === 0, 10000);
  assert.equal(await metric(s.base, 'strata_engine_restarts_total'), 0);
});

test('a whole answer whose engine is killed while it generates is run again: 4 kills, 4 answers', async () => {
  const s = await server({ kind: 'qwen35', logName: 'kill-whole' });  // no eos: it generates until max_tokens
  for (let i = 0; i < 4; ++i) {
    const anthropic = i % 2 === 1;
    const before = await metric(s.base, 'strata_generation_tokens_total');
    const pending = anthropic
      ? post(s.base, '/v1/messages', { model: 'm', max_tokens: 400, messages: [{ role: 'user', content: `kill ${i}` }] })
      : post(s.base, '/v1/chat/completions', { model: 'm', max_tokens: 400, messages: [{ role: 'user', content: `kill ${i}` }] });
    await waitFor('tokens of the request', async () => (await metric(s.base, 'strata_generation_tokens_total')) > before, 20000);
    process.kill(s.enginePid(), 'SIGKILL');
    const r = await pending;
    const body = await r.json();
    assert.equal(r.status, 200, `kill ${i}: ${JSON.stringify(body)}`);
    assert.equal(anthropic ? body.usage.output_tokens : body.usage.completion_tokens, 400);
    assert.equal(anthropic ? body.stop_reason : body.choices[0].finish_reason, anthropic ? 'max_tokens' : 'length');
    assert.equal(await metric(s.base, 'strata_engine_restarts_total'), i + 1);
  }
  assert.equal((s.log().match(/running it again \(1 of 2\)/g) ?? []).length, 4);
});

// A client that reads nothing: the raw socket is paused before the first byte, so the server's
// writes stop once the socket buffers are full. The long model name (echoed in every chunk)
// makes the stream far larger than those buffers while the tail the server keeps stays small.
function pausedStream(port, maxTokens) {
  const sock = net.connect(port, '127.0.0.1');
  const body = JSON.stringify({ model: 'm'.repeat(4000), messages: [{ role: 'user', content: 'go on' }], max_tokens: maxTokens, stream: true,
    stream_options: { include_usage: true }, logit_bias: NO_EOS });
  sock.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
  sock.pause();
  return {
    async readAll() {
      let got = '';
      sock.on('data', (d) => { got += d.toString(); });
      const ended = new Promise((r) => sock.on('end', r));
      sock.resume();
      await ended;
      return got;
    },
  };
}

test('admission is released when generation ends: two stalled stream readers do not hold --parallel 2', async () => {
  const s = await server({ args: ['--parallel', '2'], logName: 'slow-readers' });
  const readers = [pausedStream(s.port, 1000), pausedStream(s.port, 1000)];  // ~4 MB of SSE each
  await waitFor('both generations to end in the engine', async () => (s.log().match(/length: \d+ prompt tokens \(\d+ cached\), 1000 generated/g) ?? []).length === 2, 120000);
  await waitFor('their slots to be free', async () => (await (await fetch(`${s.base}/health`)).json()).running === 0, 5000);
  const third = await post(s.base, '/v1/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'third' }], max_tokens: 4, logit_bias: NO_EOS });
  assert.equal(third.status, 200);
  assert.equal((await third.json()).usage.completion_tokens, 4);
  for (const r of readers) {
    const text = await r.readAll();
    assert.ok(text.length > 2_000_000, `the stream is larger than the socket buffers (${text.length} bytes)`);
    assert.match(text, /"completion_tokens":1000/);
    assert.ok(text.includes('data: [DONE]'));
  }
});

// Descriptors of a process that are not sockets (pipes, files): the client's connection pool
// moves the socket count, nothing should move these.
function fileFds(pid) {
  return readdirSync(`/proc/${pid}/fd`).filter((f) => { try { return !readlinkSync(`/proc/${pid}/fd/${f}`).startsWith('socket:'); } catch { return false; } }).length;
}

test('soak (reduced): mixed traffic with kill -9 of the engine at random moments: none lost, none hung, descriptors flat', async (t) => {
  const seconds = Number(process.env.STRATA_SOAK_SECONDS ?? 60);
  const s = await server({ args: ['--parallel', '8'], logName: 'soak' });
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const counts = { ok: 0, failed: 0, lost: [], hung: 0 };
  // One request of a random kind; its outcome: answered, told it failed (an error status in the
  // API's shape, or an error event ending its stream), or lost (anything else).
  async function one(i) {
    const anthropic = Math.random() < 0.5, stream = Math.random() < 0.5;
    const path = anthropic ? '/v1/messages' : '/v1/chat/completions';
    const body = anthropic
      ? { model: 'm', max_tokens: 40, stream, messages: [{ role: 'user', content: `soak ${i}` }] }
      : { model: 'm', max_tokens: 40, stream, messages: [{ role: 'user', content: `soak ${i}` }], logit_bias: NO_EOS };
    const what = `${anthropic ? 'anthropic' : 'openai'} ${stream ? 'stream' : 'whole'} ${i}`;
    let r, text;
    try {
      r = await fetch(`${s.base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(60000) });
      text = await r.text();
    } catch (e) {
      if (e.name === 'TimeoutError') counts.hung += 1;
      else counts.lost.push(`${what}: ${e}`);
      return;
    }
    if (r.status !== 200) {
      const j = JSON.parse(text);
      if (r.status >= 500 && typeof j.error?.message === 'string') counts.failed += 1;
      else counts.lost.push(`${what}: ${r.status} ${text.slice(0, 200)}`);
      return;
    }
    if (!stream) {
      const j = JSON.parse(text);
      if ((anthropic ? j.usage.output_tokens : j.usage.completion_tokens) > 0) counts.ok += 1;
      else counts.lost.push(`${what}: ${text.slice(0, 200)}`);
      return;
    }
    if (anthropic ? text.includes('event: error') : text.includes('data: {"error"')) counts.failed += 1;
    else if (anthropic ? text.includes('event: message_stop') : text.includes('data: [DONE]')) counts.ok += 1;
    else counts.lost.push(`${what}: a stream that ended without its end or an error: ${text.slice(-200)}`);
  }
  let next = 0;
  const worker = async (until) => { while (Date.now() < until) await one(next++); };
  // Warm-up with the same concurrency, then the figures the soak must come back to.
  await Promise.all(Array.from({ length: 6 }, () => worker(Date.now() + 3000)));
  const fds0 = fileFds(s.child.pid), engineFds0 = fileFds(s.enginePid());
  const until = Date.now() + seconds * 1000;
  let kills = 0;
  const killer = async () => {
    while (Date.now() < until - 4000) {
      await sleep(1500 + Math.random() * 3500);
      try { process.kill(s.enginePid(), 'SIGKILL'); kills += 1; } catch { /* between engines */ }
    }
  };
  await Promise.all([...Array.from({ length: 6 }, () => worker(until)), killer()]);
  t.diagnostic(`${seconds} s, ${kills} kills: ${counts.ok} answered, ${counts.failed} told they failed, ${counts.lost.length} lost, ${counts.hung} hung`);
  assert.deepEqual(counts.lost, []);
  assert.equal(counts.hung, 0);
  assert.ok(kills >= Math.floor(seconds / 10), `${kills} kills`);
  assert.ok(counts.ok > counts.failed, `answered ${counts.ok}, told they failed ${counts.failed}`);
  await waitFor('a ready engine', async () => { try { return s.enginePid() > 0 && (await fetch(`${s.base}/health`)).status === 200; } catch { return false; } }, 30000);
  assert.equal(fileFds(s.child.pid), fds0, 'the server\'s pipes and files are those it had before');
  assert.equal(fileFds(s.enginePid()), engineFds0, 'the new engine has what the first had');
  const ok = await post(s.base, '/v1/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'after the soak' }], max_tokens: 4, logit_bias: NO_EOS });
  assert.equal(ok.status, 200);
  const restarts = await metric(s.base, 'strata_engine_restarts_total');
  assert.ok(restarts > 0 && restarts <= kills, `${restarts} restarts after ${kills} kills (a kill can find the last one not yet reaped)`);
});

test('keys from --api-key-file: accepted, kept out of the command line; the engine does not inherit STRATA_API_KEY', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'strata-keys-'));
  const file = join(dir, 'keys');
  writeFileSync(file, '  sk-file-one  \n\nsk-file-two\n', { mode: 0o600 });
  const s = await server({ args: ['--api-key-file', file], env: { STRATA_API_KEY: 'sk-from-env' }, logName: 'keyfile' });
  const models = (key) => fetch(`${s.base}/v1/models`, { headers: key ? { authorization: `Bearer ${key}` } : {} });
  assert.equal((await models()).status, 401);
  assert.equal((await models('sk-file-one')).status, 200);
  assert.equal((await models('sk-file-two')).status, 200);
  assert.equal((await models('sk-from-env')).status, 401, 'a key file replaces the environment key');
  assert.ok(!readFileSync(`/proc/${s.child.pid}/cmdline`).toString().includes('sk-file'));
  assert.ok(!readFileSync(`/proc/${s.child.pid}/environ`).toString().includes('sk-from-env'), 'the unused environment key is wiped too');
  assert.ok(!readFileSync(`/proc/${s.enginePid()}/environ`).toString().includes('STRATA_API_KEY='));
  rmSync(dir, { recursive: true, force: true });
});

// What `ps` and /proc/PID/{cmdline,environ} show of a process, for its whole life: the keys it was
// started with must not be there once it listens (they are overwritten in place after reading).
const procText = (pid) => readFileSync(`/proc/${pid}/cmdline`).toString() + '\n' + readFileSync(`/proc/${pid}/environ`).toString();

test('keys given as --api-key, --upstream-key or STRATA_API_KEY are wiped from the process\'s own command line and environment', async () => {
  const s = await server({ args: ['--api-key', 'sk-argv-one', '--api-key=sk-argv-two'], env: { STRATA_API_KEY: 'sk-env-unused' }, logName: 'argv-keys' });
  const models = (base, key) => fetch(`${base}/v1/models`, { headers: key ? { authorization: `Bearer ${key}` } : {} });
  assert.equal((await models(s.base, 'sk-argv-one')).status, 200);
  assert.equal((await models(s.base, 'sk-argv-two')).status, 200);
  assert.equal((await models(s.base, 'sk-env-unused')).status, 401);
  const serveProc = procText(s.child.pid);
  for (const k of ['sk-argv-one', 'sk-argv-two', 'sk-env-unused']) assert.ok(!serveProc.includes(k), `serve's /proc shows ${k}`);
  assert.match(readFileSync(`/proc/${s.child.pid}/cmdline`).toString(), /--api-key\0x{11}\0--api-key=x{11}\0/, 'the flags stay, their values are overwritten');
  assert.ok(!readFileSync(`/proc/${s.enginePid()}/environ`).toString().includes('STRATA_API_KEY='));
  // The gateway: the clients' key from the environment, the lane's key on the command line.
  const gw = await startGateway(['--upstream', s.base, '--upstream-key', 'sk-argv-one', '--listen', '127.0.0.1:0', '--store', ''],
    { env: { STRATA_API_KEY: 'sk-gw-env' }, logName: 'argv-keys-gw' });
  assert.equal((await models(gw.base, 'sk-gw-env')).status, 200, 'the environment key is accepted');
  const chat = await post(gw.base, '/v1/chat/completions', { model: 'strata-tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 },
    { authorization: 'Bearer sk-gw-env' });
  assert.equal(chat.status, 200, `the lane takes the --upstream-key: ${await chat.text()}`);
  assert.equal((await models(gw.base, 'sk-argv-one')).status, 401);
  const gwProc = procText(gw.child.pid);
  for (const k of ['sk-argv-one', 'sk-gw-env']) assert.ok(!gwProc.includes(k), `the gateway's /proc shows ${k}`);
  await gw.stop();
});

test('a client that disconnects cancels its work at once', async () => {
  const s = await server({ logName: 'disconnect' });
  for (const stream of [true, false]) {
    const ac = new AbortController();
    const pending = fetch(`${s.base}/v1/chat/completions`, { method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: `stream ${stream}` }], max_tokens: 60000, stream, logit_bias: NO_EOS }) })
      .then((r) => r.text()).catch((e) => e);
    await waitFor('the request to run', async () => (await metric(s.base, 'strata_requests_running')) === 1);
    ac.abort();
    assert.equal((await pending).name, 'AbortError');
    await waitFor('the request to be cancelled', async () => (await metric(s.base, 'strata_requests_running')) === 0, 5000);
  }
  assert.equal((s.log().match(/cancelled: \d+ prompt tokens/g) ?? []).length, 2);
});

test('a full queue answers 429 (OpenAI) and 529 (Anthropic) with Retry-After', async () => {
  const s = await server({ args: ['--parallel', '1', '--queue', '1'], logName: 'queue' });
  const ac = new AbortController();
  const running = fetch(`${s.base}/v1/chat/completions`, { method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'long' }], max_tokens: 60000, stream: true, logit_bias: NO_EOS }) });
  await waitFor('the first request to run', async () => (await metric(s.base, 'strata_requests_running')) === 1);
  const waiting = post(s.base, '/v1/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'queued' }], max_tokens: 3, logit_bias: NO_EOS });
  await waitFor('the second request to wait', async () => (await metric(s.base, 'strata_requests_waiting')) === 1);
  const o = await post(s.base, '/v1/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'third' }], max_tokens: 3 });
  assert.equal(o.status, 429);
  assert.ok(Number(o.headers.get('retry-after')) >= 1);
  assert.equal((await o.json()).error.type, 'rate_limit_error');
  const a = await post(s.base, '/v1/messages', { model: 'm', max_tokens: 3, messages: [{ role: 'user', content: 'third' }] });
  assert.equal(a.status, 529);
  const body = await a.json();
  assert.equal(body.type, 'error');
  assert.equal(body.error.type, 'overloaded_error');
  ac.abort();
  await (await running).body?.cancel().catch(() => {});
  const w = await waiting;
  assert.equal(w.status, 200);
  assert.equal((await w.json()).usage.completion_tokens, 3);
});

test('bad input: every case a clean 4xx in the API shape, the server unharmed', async () => {
  const s = await server({ logName: 'bad-input' });
  const chat = (extra) => ({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, ...extra });
  let deep = 'null';
  for (let i = 0; i < 5000; ++i) deep = `[${deep}]`;
  const cases = [
    ['invalid JSON', '/v1/chat/completions', '{"model": "m", "messages": ['],
    ['not an object', '/v1/chat/completions', '[1, 2, 3]'],
    ['empty body', '/v1/messages', ''],
    ['messages is a number', '/v1/chat/completions', chat({ messages: 5 })],
    ['max_tokens is text', '/v1/chat/completions', chat({ max_tokens: 'ten' })],
    ['max_tokens huge', '/v1/chat/completions', '{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1e300}'],
    ['max_tokens beyond uint64', '/v1/chat/completions', '{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":99999999999999999999999999}'],
    ['max_tokens negative', '/v1/messages', { model: 'm', max_tokens: -5, messages: [{ role: 'user', content: 'hi' }] }],
    ['top_k huge', '/v1/chat/completions', chat({ top_k: 1e20 })],
    ['temperature NaN-like', '/v1/chat/completions', '{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":-1e400}'],
    ['logit_bias value huge', '/v1/chat/completions', chat({ logit_bias: { 5: 1e300 } })],
    ['logit_bias key not an id', '/v1/chat/completions', chat({ logit_bias: { abc: 1 } })],
    ['logit_bias id past the vocabulary', '/v1/chat/completions', chat({ logit_bias: { 151680: 1 } })],
    ['logit_bias id past the vocabulary (Anthropic route)', '/v1/messages', { model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }], logit_bias: { 151936: 1 } }],
    ['repetition_penalty 0 as a float', '/v1/chat/completions', '{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"repetition_penalty":1e-308}'],
    ['repetition_penalty 0 as a float (Anthropic route)', '/v1/messages', '{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"repetition_penalty":1e-308}'],
    ['deep nesting', '/v1/chat/completions', `{"model":"m","messages":${deep}}`],
    ['deep tool schema', '/v1/messages', `{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"t","input_schema":${deep}}]}`],
    ['invalid UTF-8', '/v1/chat/completions', Buffer.concat([Buffer.from('{"model":"m","messages":[{"role":"user","content":"'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}]}')])],
    ['10 MB string (too long for the context)', '/v1/messages', { model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'lorem ipsum '.repeat(900000) }] }],
    ['thousands of messages', '/v1/chat/completions', chat({ messages: Array.from({ length: 5000 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: 'x' })) })],
    ['unknown role', '/v1/chat/completions', chat({ messages: [{ role: 'wizard', content: 'x' }] })],
    ['unknown block type', '/v1/messages', { model: 'm', max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'hologram' }] }] }],
    ['tool_result in an assistant message', '/v1/messages', { model: 'm', max_tokens: 4, messages: [{ role: 'assistant', content: [{ type: 'tool_result', tool_use_id: 'x' }] }] }],
    ['too many stop strings', '/v1/chat/completions', chat({ stop: Array.from({ length: 100 }, (_, i) => `s${i}`) })],
    ['n too large', '/v1/chat/completions', chat({ n: 1000 })],
    ['body over the limit', '/v1/chat/completions', 'x'.repeat(33 * 1024 * 1024)],
    ['unknown endpoint', '/v1/nothing', {}],
    ['count_tokens without messages', '/v1/messages/count_tokens', { model: 'm' }],
    ['legacy prompt of bad ids', '/v1/completions', { model: 'm', prompt: [1, 2, 999999999] }],
    ['responses: invalid JSON', '/v1/responses', '{"model": "m", "input": ['],
    ['responses: deep nesting', '/v1/responses', `{"model":"m","input":${deep}}`],
    ['responses: deep call arguments', '/v1/responses', { model: 'm', input: [{ type: 'function_call', call_id: 'c', name: 'f', arguments: deep }] }],
    ['responses: invalid UTF-8', '/v1/responses', Buffer.concat([Buffer.from('{"model":"m","input":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')])],
    ['responses: thousands of items', '/v1/responses', { model: 'm', input: Array.from({ length: 5000 }, () => ({ role: 'user', content: 'x' })) }],
    ['responses: 10 MB string (too long for the context)', '/v1/responses', { model: 'm', input: 'lorem ipsum '.repeat(900000) }],
    ['responses: max_output_tokens huge', '/v1/responses', '{"model":"m","input":"hi","max_output_tokens":1e300}'],
    ['responses: too many tools', '/v1/responses', { model: 'm', input: 'x', tools: Array.from({ length: 1000 }, (_, i) => ({ type: 'function', name: `f${i}` })) }],
    ['responses: unknown item type', '/v1/responses', { model: 'm', input: [{ type: 'hologram' }] }],
    ['responses: content parts of the wrong type', '/v1/responses', { model: 'm', input: [{ role: 'user', content: [{ type: 'input_text', text: 5 }] }] }],
    ['responses: a cancel of nothing', '/v1/responses/resp_none/cancel', {}],
  ];
  for (const [what, path, body] of cases) {
    const r = await post(s.base, path, body);
    assert.ok(r.status >= 400 && r.status < 500, `${what}: status ${r.status}`);
    const j = await r.json();
    if (path.startsWith('/v1/messages')) {
      assert.equal(j.type, 'error', what);
      assert.equal(typeof j.error.message, 'string', what);
    } else {
      assert.equal(typeof j.error.message, 'string', what);
    }
  }
  // Extreme values inside the ranges are answers, not internal errors (top_p 1e-308 is 0 as a
  // float: the most likely token, as top_p 0).
  for (const extreme of ['"top_p":1e-308', '"top_p":5e-324', '"temperature":1e-308', '"repetition_penalty":1e-40', '"min_p":1', '"top_k":1048576', '"logit_bias":{"151679":100}']) {
    for (const path of ['/v1/chat/completions', '/v1/messages']) {
      const r = await post(s.base, path, `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4,${extreme}}`);
      assert.equal(r.status, 200, `${path} ${extreme}: ${await r.text()}`);
    }
  }
  // An oversized header line and a huge URL: refused by the HTTP layer.
  const big = await fetch(`${s.base}/health`, { headers: { 'x-filler': 'y'.repeat(20000) } });
  assert.ok(big.status >= 400 && big.status < 500, `huge header: ${big.status}`);
  const url = await fetch(`${s.base}/v1/models?${'q'.repeat(20000)}`);
  assert.ok(url.status >= 400 && url.status < 500, `huge URL: ${url.status}`);
  // Still healthy and answering.
  assert.equal((await fetch(`${s.base}/health`)).status, 200);
  const ok = await post(s.base, '/v1/chat/completions', chat({}));
  assert.equal(ok.status, 200);
  assert.equal(s.child.exitCode, null);
});

test('health, metrics and the warm-up probe', async () => {
  const s = await server({ logName: 'metrics' });
  const h = await fetch(`${s.base}/api/hello`, { method: 'HEAD' });
  assert.equal(h.status, 200);
  await post(s.base, '/v1/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'count this' }], max_tokens: 5, logit_bias: NO_EOS });
  const text = await (await fetch(`${s.base}/metrics`)).text();
  for (const name of ['strata_time_to_first_token_seconds_count', 'strata_inter_token_latency_seconds_count', 'strata_e2e_request_latency_seconds_count'])
    assert.ok(await metric(s.base, name) >= 1, `${name} counted`);
  assert.equal(await metric(s.base, 'strata_generation_tokens_total'), 5);
  assert.ok(await metric(s.base, 'strata_prompt_tokens_total') > 3);
  assert.match(text, /strata_requests_total\{api="openai",outcome="length"\} 1/);
  assert.match(text, /strata_kv_cache_usage_ratio/);
  assert.match(text, /strata_prefix_cache_hits_total/);
});
