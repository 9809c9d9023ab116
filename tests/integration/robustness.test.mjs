// strata serve under stress: 32 parallel streams each get exactly their own answer; kill -9 of
// the engine mid-stream ends that stream with an error event while queued work survives the
// restart; a client that disconnects cancels its work; a full queue answers 429 / 529 with
// Retry-After; a suite of bad HTTP input gets clean 4xx answers and leaves the server healthy.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { mkdtempSync, writeFileSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stopAll, startServer, waitFor, metric } from './harness.mjs';

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
  const err = await outcome;
  assert.ok(err instanceof OpenAI.APIError, `stream must end with an error, got: ${err}`);
  assert.match(err.message, /answered nothing/);
  assert.ok(Date.now() - stoppedAt < 16000, 'the stream ended within 16 s of the stop');
  const pidNow = () => { try { return s.enginePid(); } catch { return null; } };  // ps fails while there is none
  await waitFor('a new engine', async () => pidNow() > 0 && pidNow() !== enginePid && (await fetch(`${s.base}/health`)).status === 200, 20000);
  const next = await client.chat.completions.create({ model: 'strata-tiny', messages: [{ role: 'user', content: 'Hello again' }], max_tokens: 4, logit_bias: NO_EOS });
  assert.equal(next.usage.completion_tokens, 4);
  assert.equal(await metric(s.base, 'strata_engine_restarts_total'), 1);
  try { process.kill(enginePid, 'SIGKILL'); } catch { /* already gone */ }
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
  assert.ok(!readFileSync(`/proc/${s.enginePid()}/environ`).toString().includes('STRATA_API_KEY='));
  rmSync(dir, { recursive: true, force: true });
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
