// strata gateway in front of a supervised `strata serve` lane (window 8,192 tokens), through the
// official clients: routing and aliases, keys (401), unknown models (404), per-key queues and
// rate limits, the thinking-budget clamp, a 1,000,046-token paste answered by a lane that never
// sees more than its window, sessions that persist across a gateway restart and never leak
// between conversations or keys, 200 concurrent streams, and kill -9 of the lane mid-stream.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { stopAll, startGateway, startServer, model, strataBin, tokenCount, waitFor, workDir } from './harness.mjs';

after(stopAll);

const WINDOW = 8192;
// Under the sanitizers (STRATA_TEST_DIVISOR=4) the long inputs shrink; the 1M paste stays a
// paste far beyond the window either way.
const DIVISOR = Number(process.env.STRATA_TEST_DIVISOR ?? 1);
const PASTE_TOKENS = DIVISOR > 1 ? 100_046 : 1_000_046;
const NO_EOS = { 151645: -100 };
const keys = { alice: 'sk-alice-' + 'a'.repeat(24), bob: 'sk-bob-' + 'b'.repeat(24), carol: 'sk-carol-' + 'c'.repeat(24) };
const sha = (s) => createHash('sha256').update(s).digest('hex');
const store = join(workDir, `gateway-sessions-${process.pid}.sqlite`);
const configPath = join(workDir, `gateway-${process.pid}.toml`);

writeFileSync(configPath, `
[server]
listen = "127.0.0.1:0"
debug_endpoints = true

[limits]
max_concurrency_per_key = 256
queue_per_key = 256
lane_wait_s = 90

[long_context]
store = "${store}"

[[lanes]]
name = "tiny"
command = ["${strataBin}", "serve", "-m", "${model('qwen3')}", "--name", "strata-tiny", "--ctx", "${WINDOW}", "--parallel", "16", "--queue", "512", "--kv-mib", "512"]
models = ["strata-tiny", "strata-tiny-fast"]

[[keys]]
name = "alice"
sha256 = "${sha(keys.alice)}"

[[keys]]
name = "bob"
sha256 = "${sha(keys.bob)}"
max_concurrency = 1

[[keys]]
name = "carol"
sha256 = "${sha(keys.carol)}"
requests_per_minute = 2
`);

let gw;
before(async () => {
  rmSync(store, { force: true });
  gw = await startGateway(['--config', configPath]);
});

const openai = (key = keys.alice) => new OpenAI({ baseURL: `${gw.base}/v1`, apiKey: key, maxRetries: 0, timeout: 600000 });
const anthropic = (key = keys.alice) => new Anthropic({ baseURL: gw.base, apiKey: key, maxRetries: 0, timeout: 600000 });
const post = (path, body, key = keys.alice, headers = {}) =>
  fetch(`${gw.base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': key, ...headers }, body: JSON.stringify(body) });
const concurrency = async () => (await fetch(`${gw.base}/concurrency`)).json();

// Seeded filler prose: varied words, names and numbers, one line per sentence.
function filler(seed, lines) {
  let x = seed >>> 0;
  const rand = () => ((x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 4294967296);
  const pick = (a) => a[Math.floor(rand() * a.length)];
  const nouns = ['harbor', 'lantern', 'orchard', 'ledger', 'quarry', 'meadow', 'signal', 'bridge', 'archive', 'furnace', 'valley', 'compass'];
  const verbs = ['watched', 'repaired', 'counted', 'painted', 'carried', 'measured', 'followed', 'described'];
  const names = ['Ilsa', 'Marek', 'Tobin', 'Rhea', 'Oskar', 'Nadia', 'Pell', 'Quinn', 'Soren', 'Vera'];
  const out = [];
  for (let i = 0; i < lines; ++i)
    out.push(`${pick(names)} ${pick(verbs)} the ${pick(nouns)} near ${pick(names)}'s ${pick(nouns)} on day ${Math.floor(rand() * 9000) + 100}.`);
  return out;
}

test('models: the lane ids and aliases with the lane window; keys and unknown models in each API shape', async () => {
  const list = await openai().models.list();
  const ids = list.data.map((m) => m.id).sort();
  assert.deepEqual(ids, ['strata-tiny', 'strata-tiny-fast']);
  assert.equal(list.data[0].context_length, WINDOW);

  await assert.rejects(openai('sk-wrong').chat.completions.create({ model: 'strata-tiny', messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e.status === 401 && e.error?.code === 'invalid_api_key');
  await assert.rejects(anthropic('sk-wrong').messages.create({ model: 'strata-tiny', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e.status === 401 && e.error?.error?.type === 'authentication_error');
  for (const path of ['/', '/api/hello']) assert.equal((await fetch(gw.base + path, { method: "HEAD" })).status, 200, path);
  await assert.rejects(openai().chat.completions.create({ model: 'gpt-17', messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e.status === 404 && /gpt-17/.test(e.message));
  await assert.rejects(anthropic().messages.create({ model: 'claude-none', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e.status === 404 && e.error?.error?.type === 'not_found_error');
});

test('both SDKs through the gateway, whole and streamed, on the model id and its alias', async () => {
  const whole = await openai().chat.completions.create({ model: 'strata-tiny-fast', messages: [{ role: 'user', content: 'Say something.' }], max_tokens: 12 });
  assert.equal(whole.object, 'chat.completion');
  assert.ok(whole.usage.completion_tokens > 0);
  let text = '';
  for await (const c of await openai().chat.completions.create({ model: 'strata-tiny', messages: [{ role: 'user', content: 'Stream it.' }], max_tokens: 12, stream: true, logit_bias: NO_EOS }))
    text += (c.choices[0]?.delta?.content ?? '') + (c.choices[0]?.delta?.reasoning_content ?? '');
  assert.ok(text.length > 0);
  const msg = await anthropic().messages.create({ model: 'strata-tiny', max_tokens: 12, messages: [{ role: 'user', content: 'Hello' }] });
  assert.equal(msg.type, 'message');
  const events = [];
  const stream = anthropic().messages.stream({ model: 'strata-tiny', max_tokens: 12, messages: [{ role: 'user', content: 'Hello' }] });
  for await (const ev of stream) events.push(ev.type);
  assert.equal(events[0], 'message_start');
  assert.equal(events.at(-1), 'message_stop');
});

test('thinking budget that leaves no room for the answer is clamped, not refused', async () => {
  const res = await post('/v1/messages', { model: 'strata-tiny', max_tokens: 4000, thinking: { type: 'enabled', budget_tokens: 3999 }, messages: [{ role: 'user', content: 'Think, then answer.' }] });
  assert.equal(res.status, 200, await res.clone().text());
  assert.equal(res.headers.get('x-strata-thinking'), 'clamped');
  const body = await res.json();
  assert.ok(body.usage.output_tokens <= 4000);
});

// The paste is built before the tests: building it blocks node's event loop for seconds, and a
// request sent right after that on a pooled keep-alive connection the server has meanwhile
// closed (its keep-alive timeout is 5 s) fails with EPIPE before the server sees it.
const needle = 'The secret launch code for Project Heron is 7341-KESTREL.';
const question = '\n\nQuestion: What is the secret launch code for Project Heron?';
let paste;
function buildPaste() {
  const lines = filler(7, Math.ceil(PASTE_TOKENS / 17));
  lines.splice(Math.floor(lines.length * 0.4), 0, needle);
  let base = lines.join('\n') + '\nFiller:';
  let n = tokenCount(base + question);
  // Lines tokenize independently (each ends in a newline): drop the excess in bulk, then pad.
  while (n > PASTE_TOKENS) {
    lines.splice(lines.length - Math.ceil((n - PASTE_TOKENS) / (n / lines.length)) - 1);
    base = lines.join('\n') + '\nFiller:';
    n = tokenCount(base + question);
  }
  // " a" is one token after ":" or another " a": pad to the exact count.
  let pad = PASTE_TOKENS - n;
  paste = base + ' a'.repeat(pad) + question;
  for (let m = tokenCount(paste); m !== PASTE_TOKENS; m = tokenCount(paste)) {
    pad -= m - PASTE_TOKENS;
    paste = base + ' a'.repeat(pad) + question;
  }
}
before(buildPaste);

test(`a ${PASTE_TOKENS.toLocaleString('en')}-token paste: 200 with an answer, the lane never sees more than its window`, async () => {
  const { data, response } = await openai().chat.completions.create({ model: 'strata-tiny', messages: [{ role: 'user', content: paste }], max_tokens: 16 }).withResponse();
  assert.equal(response.status, 200);
  assert.ok(data.choices[0].message.content !== undefined);
  assert.ok(data.usage.prompt_tokens + 16 <= WINDOW, `the lane got ${data.usage.prompt_tokens} prompt tokens`);
  assert.match(response.headers.get('x-strata-context') ?? '', /^abridged; retrieval=bm25; tokens_in=\d+; tokens_out=\d+$/);

  // What the lane received holds the needle (retrieved from the middle) and the question (tail).
  const dbg = await (await post('/v1/gateway/assemble', { model: 'strata-tiny', messages: [{ role: 'user', content: paste }], max_tokens: 16 })).json();
  assert.equal(dbg.abridged, true);
  assert.ok(dbg.prompt_tokens_out + 16 <= WINDOW);
  const sent = dbg.body.messages.map((m) => m.content).join('\n');
  assert.ok(sent.includes(needle), 'the needle was not retrieved');
  assert.ok(sent.includes(question.trim()), 'the question (the paste tail) was not kept');
  assert.equal(dbg.stats.session_hit, true, 'the second assembly of the same paste reuses its session');
});

// A chat of many turns, far beyond the window, with facts in old turns.
function longChat(seed, facts, turns = 300) {  // ~25K tokens: beyond the window under any divisor
  const messages = [{ role: 'system', content: 'You are a careful assistant.' }];
  const body = filler(seed, turns * 4);
  for (let t = 0; t < turns; ++t) {
    const fact = facts[t];
    messages.push({ role: 'user', content: (fact ? fact + ' ' : '') + body.slice(t * 4, t * 4 + 2).join(' ') });
    messages.push({ role: 'assistant', content: body.slice(t * 4 + 2, t * 4 + 4).join(' ') });
  }
  return messages;
}

test('sessions: the next turn is incremental, survives a gateway restart, and never crosses conversations or keys', async () => {
  const factA = 'The vault combination of the Osprey archive is 55-19-73.';
  const factB = 'The vault combination of the Osprey archive is 12-88-40.';
  const chatA = longChat(11, { 5: factA });
  const ask = (messages, q) => [...messages, { role: 'user', content: q }];
  const q = 'What is the vault combination of the Osprey archive?';

  const first = await (await post('/v1/gateway/assemble', { model: 'strata-tiny', max_tokens: 64, messages: ask(chatA, q) })).json();
  assert.equal(first.abridged, true, JSON.stringify(first).slice(0, 400));
  assert.ok(first.prompt_tokens_out + 64 <= WINDOW);
  assert.ok(JSON.stringify(first.body).includes(factA));

  // The next turn: only the new messages are processed.
  const next = ask([...ask(chatA, q), { role: 'assistant', content: 'Let me check.' }], 'Remind me: the vault combination of the Osprey archive?');
  const second = await (await post('/v1/gateway/assemble', { model: 'strata-tiny', max_tokens: 64, messages: next })).json();
  assert.equal(second.stats.session_hit, true);
  assert.ok(JSON.stringify(second.body).includes(factA));
  assert.ok(second.stats.chunks_new < first.stats.chunks_total / 10, `chunks_new ${second.stats.chunks_new} of ${first.stats.chunks_total}`);

  // Another conversation with the same opening but a different fact, and the same chat under
  // another key: neither sees conversation A's fact.
  const chatB = longChat(11, { 5: factB });
  const other = await (await post('/v1/gateway/assemble', { model: 'strata-tiny', max_tokens: 64, messages: ask(chatB, q) })).json();
  assert.ok(JSON.stringify(other.body).includes(factB));
  assert.ok(!JSON.stringify(other.body).includes(factA), 'conversation B saw conversation A\'s fact');
  const asBob = await (await post('/v1/gateway/assemble', { model: 'strata-tiny', max_tokens: 64, messages: ask(chatB, q) }, keys.bob)).json();
  assert.equal(asBob.stats.session_hit, false, 'a session crossed from one key to another');

  // Restart the gateway (the lane with it) on the same store: the next turn is still incremental.
  await gw.stop();
  gw = await startGateway(['--config', configPath]);
  const third = await (await post('/v1/gateway/assemble', { model: 'strata-tiny', max_tokens: 64, messages: next })).json();
  assert.equal(third.stats.session_hit, true, 'the session did not survive the restart');
  assert.ok(third.stats.chunks_new < first.stats.chunks_total / 10);
  assert.ok(JSON.stringify(third.body).includes(factA));
});

test('per-key concurrency queues (visible in /concurrency) and rate limits (429 with Retry-After)', async () => {
  // bob may run one request at a time: the second waits in his queue.
  const long = (i) => openai(keys.bob).chat.completions.create({ model: 'strata-tiny', messages: [{ role: 'user', content: `Long ${i}` }], max_tokens: DIVISOR > 1 ? 100 : 400, logit_bias: NO_EOS });
  const a = long(1), b = long(2);
  await waitFor('a queued bob request', async () => (await concurrency()).requests.some((r) => r.key === 'bob' && r.state === 'queued' && r.queue_position === 1));
  const c = await concurrency();
  assert.deepEqual(c.keys.find((k) => k.key === 'bob'), { key: 'bob', running: 1, queued: 1, limit: 1 });
  assert.equal(c.lanes[0].name, 'tiny');
  await Promise.all([a, b]);

  // carol: 2 requests a minute.
  const r1 = await post('/v1/chat/completions', { model: 'strata-tiny', messages: [{ role: 'user', content: 'one' }], max_tokens: 2 }, keys.carol);
  const r2 = await post('/v1/chat/completions', { model: 'strata-tiny', messages: [{ role: 'user', content: 'two' }], max_tokens: 2 }, keys.carol);
  const r3 = await post('/v1/messages', { model: 'strata-tiny', messages: [{ role: 'user', content: 'three' }], max_tokens: 2 }, keys.carol);
  assert.deepEqual([r1.status, r2.status, r3.status], [200, 200, 429]);
  assert.ok(Number(r3.headers.get('retry-after')) >= 1);
  assert.equal((await r3.json()).error.type, 'rate_limit_error');
});

test('200 concurrent streaming clients through the gateway all get their whole answer', async () => {
  const n = DIVISOR > 1 ? 64 : 200;
  const client = openai();
  const results = await Promise.all(Array.from({ length: n }, async (_, i) => {
    let chunks = 0, finish = null;
    const stream = await client.chat.completions.create({ model: 'strata-tiny', messages: [{ role: 'user', content: `Client ${i}` }], max_tokens: 8, stream: true, logit_bias: NO_EOS });
    for await (const c of stream) {
      chunks += 1;
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    return { chunks, finish };
  }));
  assert.equal(results.filter((r) => r.finish === 'length').length, n);
});

test('kill -9 of the lane mid-stream: a clean error, the lane restarted, the next request served', async () => {
  const lanePid = gw.lanePid();
  assert.ok(lanePid > 0);
  const stream = await openai().chat.completions.create({ model: 'strata-tiny', messages: [{ role: 'user', content: 'Go on.' }], max_tokens: 4000, stream: true, logit_bias: NO_EOS });
  let chunks = 0;
  const outcome = await (async () => {
    try {
      for await (const _ of stream) if (++chunks === 5) process.kill(lanePid, 'SIGKILL');
      return 'ended without error';
    } catch (e) {
      return e;
    }
  })();
  assert.ok(outcome instanceof Error, `the stream ${outcome}`);
  assert.match(String(outcome.message), /lane failed mid-answer/);
  await waitFor('the lane to come back', async () => {
    const h = await (await fetch(`${gw.base}/health`)).json();
    return h.lanes[0].healthy && h.lanes[0].restarts >= 1;
  }, 120000);
  const after = await openai().chat.completions.create({ model: 'strata-tiny', messages: [{ role: 'user', content: 'Still there?' }], max_tokens: 4 });
  assert.equal(after.object, 'chat.completion');
  assert.notEqual(gw.lanePid(), lanePid);
});

test('quick start: --upstream to a running lane, --api-key, and a request while that lane is down waits for it', async () => {
  const lane = await startServer({ logName: 'gw-upstream' });
  const quick = await startGateway(['--upstream', lane.base, '--listen', '127.0.0.1:0', '--api-key', 'sk-quick', '--store', '', '--lane-wait', '3']);
  const client = new OpenAI({ baseURL: `${quick.base}/v1`, apiKey: 'sk-quick', maxRetries: 0 });
  const r = await client.chat.completions.create({ model: 'anything', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
  assert.equal(r.object, 'chat.completion');
  const metrics = await (await fetch(`${quick.base}/metrics`)).text();
  assert.match(metrics, /strata_gateway_lane_up\{lane="default"\} 1/);
  await lane.stop();
  const res = await fetch(`${quick.base}/v1/chat/completions`, { method: 'POST', headers: { authorization: 'Bearer sk-quick', 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }), signal: AbortSignal.timeout(120000) });
  // Nobody restarts an upstream lane: after --lane-wait (3 s here) the answer is a 503.
  assert.equal(res.status, 503);
  assert.ok(Number(res.headers.get('retry-after')) >= 1);
  await quick.stop();
});

test('quick start in front of a keyed lane: --upstream-key, and without it a 502 naming the lane key', async () => {
  const lane = await startServer({ args: ['--api-key', 'sk-lane'], logName: 'gw-keyed-lane' });
  const body = JSON.stringify({ model: 'strata-tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
  const post = (base) => fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: { authorization: 'Bearer sk-client', 'content-type': 'application/json' }, body });
  const bare = await startGateway(['--upstream', lane.base, '--listen', '127.0.0.1:0', '--api-key', 'sk-client', '--store', '', '--lane-wait', '3'], { logName: 'gw-bare' });
  const refused = await post(bare.base);
  assert.equal(refused.status, 502);
  const err = await refused.json();
  assert.match(err.error.message, /lane 'default' refused the gateway \(HTTP 401\).*upstream_key/);
  await bare.stop();
  const keyed = await startGateway(['--upstream', lane.base, '--upstream-key', 'sk-lane', '--listen', '127.0.0.1:0', '--api-key', 'sk-client', '--store', '', '--lane-wait', '3'], { logName: 'gw-keyed' });
  const client = new OpenAI({ baseURL: `${keyed.base}/v1`, apiKey: 'sk-client', maxRetries: 0 });
  await waitFor('the keyed lane\'s model list', async () => (await client.models.list()).data.length > 0);
  assert.deepEqual((await client.models.list()).data.map((m) => m.id), ['strata-tiny']);
  const ok = await post(keyed.base);
  assert.equal(ok.status, 200);
  await keyed.stop();
  await lane.stop();
});

test('a dead lane\'s requests go to its fallback lane', async () => {
  const cfg = join(workDir, `gateway-fallback-${process.pid}.toml`);
  // Nothing listens on port 1: the "dead" lane never comes up; "live" is the main gateway.
  writeFileSync(cfg, `[server]\nlisten = "127.0.0.1:0"\n[long_context]\nenabled = false\n` +
    `[[lanes]]\nname = "dead"\nupstream = "http://127.0.0.1:1"\nmodels = ["strata-tiny"]\nfallback = "live"\n` +
    `[[lanes]]\nname = "live"\nupstream = "${gw.base}"\nmodels = ["something-else"]\nupstream_key = "${keys.alice}"\n`);
  const front = await startGateway(['--config', cfg]);
  await waitFor('the live lane', async () => (await (await fetch(`${front.base}/health`)).json()).lanes.some((l) => l.name === 'live' && l.healthy));
  const client = new OpenAI({ baseURL: `${front.base}/v1`, apiKey: 'unused', maxRetries: 0 });
  const r = await client.chat.completions.create({ model: 'strata-tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
  assert.equal(r.object, 'chat.completion');
  const health = await (await fetch(`${front.base}/health`)).json();
  assert.deepEqual(health.lanes.map((l) => [l.name, l.healthy]), [['dead', false], ['live', true]]);
  await front.stop();
});

test('TLS: the gateway serves HTTPS with the configured certificate', async () => {
  const { execFileSync } = await import('node:child_process');
  const { request } = await import('node:https');
  const { readFileSync } = await import('node:fs');
  const cert = join(workDir, `gw-cert-${process.pid}.pem`), key = join(workDir, `gw-key-${process.pid}.pem`);
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '1',
    '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'ignore' });
  const tlsConfig = join(workDir, `gateway-tls-${process.pid}.toml`);
  writeFileSync(tlsConfig, `[server]\nlisten = "127.0.0.1:0"\ntls_cert = "${cert}"\ntls_key = "${key}"\n` +
    `[[lanes]]\nname = "via"\nupstream = "${gw.base}"\nmodels = ["*"]\nupstream_key = "${keys.alice}"\n`);
  const tls = await startGateway(['--config', tlsConfig]);
  assert.match(tls.base, /^https:/);
  const body = JSON.stringify({ model: 'strata-tiny', messages: [{ role: 'user', content: 'over TLS' }], max_tokens: 4 });
  const answer = await new Promise((resolve, reject) => {
    const req = request(`${tls.base}/v1/chat/completions`, { method: 'POST', ca: readFileSync(cert), headers: { 'content-type': 'application/json' } }, (res) => {
      let text = '';
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, body: JSON.parse(text) }));
    });
    req.on('error', reject);
    req.end(body);
  });
  assert.equal(answer.status, 200);
  assert.equal(answer.body.object, 'chat.completion');
  await tls.stop();
});
