// Embeddings and reranking (docs/api.md, "Embeddings and reranking") through the official openai
// client (`embeddings.create`, which asks for base64 by default) and raw HTTP for /v1/rerank (the
// shape llama.cpp and Jina answer), against strata serve and through a quick-start gateway. The
// vectors are the tiny random model's own: what is checked is the API's contract (unit norm, the
// same input the same vector in any batch and either encoding, dimensions, token-id inputs, the
// instruction form) and the rerank order and bounds; the numbers themselves against a plain forward
// are the engine's unit test (tests/runtime/pooled_request_test.cpp). Last, a gateway whose
// retrieval reranks its pool on a rerank lane ([long_context] rerank_lane), and keeps BM25's
// order, still answering, when that lane is gone; and one that adds dense ranks from an embed
// lane ([long_context] embed_lane), embedding each chunk once, and goes on with BM25 alone when
// that lane is gone.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import { metric, stopAll, startGateway, startServer, workDir } from './harness.mjs';

let server, gw;
before(async () => {
  server = await startServer({ logName: 'embeddings' });
  gw = await startGateway(['--upstream', server.base, '--listen', '127.0.0.1:0', '--api-key', 'sk-emb', '--store', ''], { logName: 'embeddings-gw' });
});
after(stopAll);

const norm = (v) => Math.sqrt(v.reduce((a, x) => a + x * x, 0));
const maxDiff = (a, b) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0);
const post = async (base, path, body, key) => {
  const r = await fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) }, body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
};

for (const [label, base, key] of [['serve', () => server.base, 'unused'], ['the gateway', () => gw.base, 'sk-emb']]) {
  const client = () => new OpenAI({ baseURL: `${base()}/v1`, apiKey: key, maxRetries: 0 });

  test(`${label}: embeddings.create gives unit vectors, the same for the same input in any batch and encoding`, async () => {
    const one = await client().embeddings.create({ model: 'strata-tiny', input: 'The lighthouse keeper counted ships.' });
    assert.equal(one.object, 'list');
    assert.equal(one.data.length, 1);
    const v = one.data[0].embedding;
    assert.ok(v.length >= 16, `${v.length} dimensions`);
    assert.ok(Math.abs(norm(v) - 1) < 1e-4, `norm ${norm(v)}`);
    assert.ok(one.usage.prompt_tokens > 0 && one.usage.total_tokens === one.usage.prompt_tokens);

    const batch = await client().embeddings.create({ model: 'strata-tiny', input: ['A red door.', 'The lighthouse keeper counted ships.', 'A red door.'], encoding_format: 'float' });
    assert.deepEqual(batch.data.map((d) => d.index), [0, 1, 2]);
    assert.ok(maxDiff(batch.data[1].embedding, v) < 1e-4, 'batched = alone, float = base64');
    assert.ok(maxDiff(batch.data[0].embedding, batch.data[2].embedding) < 1e-4);
    assert.ok(maxDiff(batch.data[0].embedding, v) > 1e-3, 'different texts, different vectors');

    // dimensions: the leading ones, normalised again.
    const short = await client().embeddings.create({ model: 'strata-tiny', input: 'The lighthouse keeper counted ships.', dimensions: 8, encoding_format: 'float' });
    const s = short.data[0].embedding;
    assert.equal(s.length, 8);
    const head = v.slice(0, 8), n = norm(head);
    assert.ok(maxDiff(s, head.map((x) => x / n)) < 1e-4);

    // Token ids as input: the text's ids and the <|endoftext|> the text path appends.
    const ids = (await post(base(), '/tokenize', { content: 'The lighthouse keeper counted ships.<|endoftext|>', parse_special: true }, key)).body.tokens;
    const byIds = await client().embeddings.create({ model: 'strata-tiny', input: [ids], encoding_format: 'float' });
    assert.ok(maxDiff(byIds.data[0].embedding, v) < 1e-4, 'ids = text');

    // The instruction form changes the input, so the vector.
    const instructed = await client().embeddings.create({ model: 'strata-tiny', input: 'The lighthouse keeper counted ships.', instruction: 'Find the sentence', encoding_format: 'float' });
    assert.ok(maxDiff(instructed.data[0].embedding, v) > 1e-3);
  });

  test(`${label}: bad embeddings requests are 400s in OpenAI's shape`, async () => {
    for (const [body, param] of [[{ input: '' }, 'input'], [{ input: [] }, 'input'], [{ input: 'x', encoding_format: 'xml' }, 'encoding_format'],
      [{ input: 'x', dimensions: 0 }, 'dimensions'], [{ input: [[999999999]] }, 'input'], [{ input: Array(2049).fill('x') }, 'input'], [{}, 'input']]) {
      await assert.rejects(client().embeddings.create({ model: 'strata-tiny', ...body }), (e) => {
        assert.ok(e instanceof OpenAI.BadRequestError, `${JSON.stringify(body).slice(0, 80)}: ${e}`);
        assert.equal(e.error.type, 'invalid_request_error');
        assert.equal(e.param, param);
        return true;
      });
    }
  });

  test(`${label}: /v1/rerank and /rerank score documents in (0, 1), best first, top_n and documents as asked`, async () => {
    const documents = ['Ships pass the lighthouse at night.', { text: 'A recipe for bread.' }, 'The keeper counts them.'];
    const r = await post(base(), '/v1/rerank', { model: 'strata-tiny', query: 'Who counts ships?', documents, top_n: 2, return_documents: true }, key);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.results.length, 2);
    const [a, b] = r.body.results;
    assert.ok(a.relevance_score >= b.relevance_score);
    for (const x of r.body.results) {
      assert.ok(x.relevance_score > 0 && x.relevance_score < 1, String(x.relevance_score));
      assert.equal(x.document.text, typeof documents[x.index] === 'string' ? documents[x.index] : documents[x.index].text);
    }
    assert.notEqual(a.index, b.index);
    assert.ok(r.body.usage.prompt_tokens > 0);
    // The same call at /rerank, all documents, without their text: the same scores.
    const all = await post(base(), '/rerank', { model: 'strata-tiny', query: 'Who counts ships?', documents }, key);
    assert.equal(all.status, 200);
    assert.equal(all.body.results.length, 3);
    assert.ok(all.body.results.every((x) => x.document === undefined));
    for (const x of r.body.results) {
      const same = all.body.results.find((y) => y.index === x.index);
      assert.ok(Math.abs(same.relevance_score - x.relevance_score) < 1e-4);
    }
    for (const [body, param] of [[{ query: '', documents: ['x'] }, 'query'], [{ query: 'q', documents: [] }, 'documents'], [{ query: 'q', documents: [7] }, 'documents'], [{ query: 'q', documents: ['x'], top_n: 0 }, 'top_n']]) {
      const bad = await post(base(), '/v1/rerank', { model: 'strata-tiny', ...body }, key);
      assert.equal(bad.status, 400, JSON.stringify(body));
      assert.equal(bad.body.error.param, param);
    }
  });
}

test('a gateway reranks retrieval\'s pool on its rerank lane, and answers with BM25 alone when the lane is gone', async () => {
  const chat = await startServer({ args: ['--ctx', '1024'], logName: 'embeddings-chat-lane' });
  const reranker = await startServer({ name: 'strata-reranker', logName: 'embeddings-rerank-lane' });
  const cfg = join(workDir, `gateway-rerank-${process.pid}.toml`);
  writeFileSync(cfg, `[server]\nlisten = "127.0.0.1:0"\n[limits]\nlane_wait_s = 3\n[long_context]\nrerank_lane = "rerank"\nrerank_timeout_ms = 20000\n` +
    `[[lanes]]\nname = "chat"\nupstream = "${chat.base}"\nmodels = ["strata-tiny"]\n` +
    `[[lanes]]\nname = "rerank"\nupstream = "${reranker.base}"\nmodels = ["strata-reranker"]\n`);
  const front = await startGateway(['--config', cfg], { logName: 'embeddings-gw-rerank' });
  // A conversation four times the chat lane's window: abridged by retrieval.
  const paste = Array.from({ length: 400 }, (_, i) => `Note ${i}: the ${['red', 'blue', 'green'][i % 3]} crate went to dock ${i % 17}.`).join('\n');
  const ask = async () => {
    const r = await fetch(`${front.base}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'strata-tiny', messages: [{ role: 'user', content: `${paste}\n\nWhere did the blue crate go?` }], max_tokens: 4 }) });
    assert.equal(r.status, 200, await r.clone().text());
    await r.json();
    return r.headers.get('x-strata-context') ?? '';
  };
  assert.match(await ask(), /^abridged; retrieval=bm25\+rerank;/);
  assert.match(reranker.log(), /POST \/v1\/rerank 200/);
  assert.ok(await metric(front.base, 'strata_gateway_abridged_total{retrieval="bm25+rerank"}') >= 1);
  await reranker.stop();
  assert.match(await ask(), /^abridged; retrieval=bm25;/);
  assert.ok(await metric(front.base, 'strata_gateway_rerank_failures_total{result="failed"}') >= 1);
  await front.stop();
  await chat.stop();
});

test('a gateway adds dense ranks from its embed lane, embeds each chunk once, and answers with BM25 alone when the lane is gone', async () => {
  const chat = await startServer({ args: ['--ctx', '1024'], logName: 'embeddings-chat-lane-dense' });
  const embedder = await startServer({ name: 'strata-embedder', logName: 'embeddings-embed-lane' });
  const cfg = join(workDir, `gateway-dense-${process.pid}.toml`);
  writeFileSync(cfg, `[server]\nlisten = "127.0.0.1:0"\n[limits]\nlane_wait_s = 3\n[long_context]\nembed_lane = "embed"\nembed_timeout_ms = 20000\n` +
    `[[lanes]]\nname = "chat"\nupstream = "${chat.base}"\nmodels = ["strata-tiny"]\n` +
    `[[lanes]]\nname = "embed"\nupstream = "${embedder.base}"\nmodels = ["strata-embedder"]\n`);
  const front = await startGateway(['--config', cfg], { logName: 'embeddings-gw-dense' });
  const paste = Array.from({ length: 400 }, (_, i) => `Note ${i}: the ${['red', 'blue', 'green'][i % 3]} crate went to dock ${i % 17}.`).join('\n');
  const messages = [{ role: 'user', content: `${paste}\n\nWhere did the blue crate go?` }];
  const ask = async () => {
    const r = await fetch(`${front.base}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'strata-tiny', messages, max_tokens: 4 }) });
    assert.equal(r.status, 200, await r.clone().text());
    const body = await r.json();
    return { context: r.headers.get('x-strata-context') ?? '', answer: body.choices[0].message.content ?? '' };
  };
  const embedded = () => metric(front.base, 'strata_gateway_chunks_embedded_total');
  const first = await ask();
  assert.match(first.context, /^abridged; retrieval=bm25\+dense;/);
  assert.match(embedder.log(), /POST \/v1\/embeddings 200/);
  const n1 = await embedded();
  assert.ok(n1 > 20, `${n1} chunks embedded`);
  assert.ok(await metric(front.base, 'strata_gateway_abridged_total{retrieval="bm25+dense"}') >= 1);
  // The same conversation again: every chunk has its vector already.
  assert.match((await ask()).context, /retrieval=bm25\+dense;/);
  assert.equal(await embedded(), n1);
  // The next turn: only the chunks that left the verbatim window are new.
  messages.push({ role: 'assistant', content: first.answer || 'Dock 1.' }, { role: 'user', content: `${paste.slice(0, 3000)}\n\nAnd the green crate?` });
  assert.match((await ask()).context, /retrieval=bm25\+dense;/);
  const n2 = await embedded();
  assert.ok(n2 > n1 && n2 - n1 < n1, `${n1} then ${n2} chunks embedded`);
  assert.equal(await metric(front.base, 'strata_gateway_embed_failures_total{result="failed"}'), 0);
  await embedder.stop();
  assert.match((await ask()).context, /^abridged; retrieval=bm25;/);
  await front.stop();
  await chat.stop();
});
