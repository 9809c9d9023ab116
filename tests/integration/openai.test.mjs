// strata serve through the official `openai` npm client: chat completions whole and streamed,
// the SDK's stream helper, tools (forced, required, streamed deltas), response_format, logprobs,
// n, seed, stop, legacy completions, reasoning, errors; a server with speculative decoding
// (--spec-ngram) answers greedy and seeded sampled requests exactly as one without (both
// template families), and counts its drafts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { metric, stopAll, startServer, tinyPng } from './harness.mjs';

let server, thinking, client, thinkingClient;
const EOS = '151645';

before(async () => {
  [server, thinking] = await Promise.all([startServer({ logName: 'openai' }), startServer({ kind: 'qwen35', logName: 'openai-35' })]);
  client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'unused', maxRetries: 0 });
  thinkingClient = new OpenAI({ baseURL: `${thinking.base}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(stopAll);

const hello = [{ role: 'user', content: 'Say hello.' }];

test('models list the served model with its context length', async () => {
  const list = await client.models.list();
  assert.equal(list.data.length, 1);
  assert.equal(list.data[0].id, 'strata-tiny');
  assert.equal(list.data[0].context_length, 65536);
  const one = await client.models.retrieve('strata-tiny');
  assert.equal(one.id, 'strata-tiny');
  await assert.rejects(client.models.retrieve('no-such-model'), (e) => e instanceof OpenAI.NotFoundError);
});

test('chat completion: message, finish reason, usage', async () => {
  const r = await client.chat.completions.create({ model: 'strata-tiny', messages: hello, max_completion_tokens: 40, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 5);
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 40);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test('streamed chat equals the whole answer (greedy), with role first and usage last', async () => {
  const body = { model: 'strata-tiny', messages: hello, max_tokens: 30, temperature: 0, logit_bias: { [EOS]: -100 } };
  const whole = await client.chat.completions.create(body);
  const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  const text = chunks.flatMap((c) => c.choices.map((ch) => ch.delta.content ?? '')).join('');
  assert.equal(text, whole.choices[0].message.content);
  const finish = chunks.filter((c) => c.choices[0]?.finish_reason);
  assert.equal(finish.length, 1);
  assert.equal(finish[0].choices[0].finish_reason, 'length');
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage.completion_tokens, 30);
  assert.equal(last.usage.prompt_tokens, whole.usage.prompt_tokens);
  for (const c of chunks.slice(0, -1)) assert.equal(c.usage, null);
});

test('the SDK stream helper assembles a final completion', async () => {
  const stream = client.chat.completions.stream({ model: 'strata-tiny', messages: hello, max_tokens: 20, temperature: 0 });
  const final = await stream.finalChatCompletion();
  assert.equal(final.choices[0].message.role, 'assistant');
  assert.ok(['stop', 'length'].includes(final.choices[0].finish_reason));
});

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 20 }, days: { type: 'integer' } }, required: ['city', 'days'], additionalProperties: false },
  },
};
const clock = { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string', enum: ['UTC', 'CET'] } }, required: ['zone'] } } };

test('a forced tool choice yields a call with arguments matching the schema', async () => {
  const r = await client.chat.completions.create({
    model: 'strata-tiny', messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: [weather, clock],
    tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 200, temperature: 0.7, seed: 3,
  });
  const c = r.choices[0];
  assert.equal(c.finish_reason, 'tool_calls');
  assert.equal(c.message.tool_calls.length, 1);
  const call = c.message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.match(call.id, /^call_/);
  assert.equal(call.function.name, 'get_weather');
  const args = JSON.parse(call.function.arguments);
  assert.equal(typeof args.city, 'string');
  assert.ok([...args.city].length <= 20);  // code points, as the schema counts
  assert.ok(Number.isInteger(args.days));
  assert.deepEqual(Object.keys(args).sort(), ['city', 'days']);
});

test('tool_choice required calls one of the tools; streamed deltas assemble in the SDK', async () => {
  const stream = client.chat.completions.stream({
    model: 'strata-tiny', messages: [{ role: 'user', content: 'What time is it?' }], tools: [weather, clock],
    tool_choice: 'required', max_tokens: 200, temperature: 1, seed: 11,
  });
  const deltas = [];
  stream.on('chunk', (c) => { for (const tc of c.choices[0]?.delta?.tool_calls ?? []) deltas.push(tc); });
  const final = await stream.finalChatCompletion();
  const call = final.choices[0].message.tool_calls[0];
  assert.ok(['get_weather', 'get_time'].includes(call.function.name));
  const args = JSON.parse(call.function.arguments);
  if (call.function.name === 'get_time') assert.ok(['UTC', 'CET'].includes(args.zone));
  else assert.equal(typeof args.city, 'string');
  // First fragment: index, id, type, name, empty arguments; later ones: index + arguments.
  assert.equal(deltas[0].index, 0);
  assert.equal(deltas[0].type, 'function');
  assert.equal(deltas[0].function.arguments, '');
  assert.ok(deltas.length >= 2);
  assert.equal(deltas.slice(1).map((d) => d.function.arguments).join(''), call.function.arguments);
  assert.equal(final.choices[0].finish_reason, 'tool_calls');
});

test('tool history (assistant tool_calls + tool results) is accepted', async () => {
  const r = await client.chat.completions.create({
    model: 'strata-tiny', tools: [weather], max_tokens: 10,
    messages: [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Weather in Oslo?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo","days":1}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'Snow, -3 C' },
    ],
  });
  assert.equal(r.choices[0].message.role, 'assistant');
});

test('developer and system messages after the first turn are accepted by the Qwen3.5 template', async () => {
  // Codex and other agents send `developer` instructions between turns; Qwen3.5's template takes
  // only a first system message, so the server merges every one into it.
  const r = await thinkingClient.chat.completions.create({
    model: 'strata-tiny', max_tokens: 6, temperature: 0,
    messages: [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Hi' },
      { role: 'developer', content: 'Answer in French.' },
      { role: 'assistant', content: 'Bonjour.' },
      { role: 'system', content: 'Now in German.' },
      { role: 'user', content: 'Again?' },
    ],
  });
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.ok(r.usage.prompt_tokens > 20);
});

test('response_format json_schema and json_object produce JSON', async () => {
  const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer' }, tags: { type: 'array', items: { type: 'string', maxLength: 8 }, maxItems: 3 } }, required: ['name', 'age', 'tags'], additionalProperties: false };
  const r = await client.chat.completions.create({
    model: 'strata-tiny', messages: [{ role: 'user', content: 'A person, as JSON.' }], max_tokens: 300, temperature: 0.8, seed: 5,
    response_format: { type: 'json_schema', json_schema: { name: 'person', schema, strict: true } },
  });
  const v = JSON.parse(r.choices[0].message.content);
  assert.deepEqual(Object.keys(v), ['name', 'age', 'tags']);
  assert.ok(Number.isInteger(v.age) && Array.isArray(v.tags) && v.tags.length <= 3);
  // A random model rarely closes a free-form object; this seed does at once.
  const o = await client.chat.completions.create({ model: 'strata-tiny', messages: hello, max_tokens: 200, temperature: 0.8, seed: 6, response_format: { type: 'json_object' } });
  assert.equal(o.choices[0].finish_reason, 'stop');
  const parsed = JSON.parse(o.choices[0].message.content);
  assert.equal(typeof parsed, 'object');
  assert.ok(!Array.isArray(parsed) && parsed !== null);
});

test('an unsupported schema keyword is a 400 naming it', async () => {
  await assert.rejects(client.chat.completions.create({
    model: 'strata-tiny', messages: hello, max_tokens: 5,
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', patternProperties: { '^a': { type: 'string' } } } } },
  }), (e) => e instanceof OpenAI.BadRequestError && /patternProperties/.test(e.message));
});

test('logprobs and top_logprobs', async () => {
  const r = await client.chat.completions.create({ model: 'strata-tiny', messages: hello, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 3, logit_bias: { [EOS]: -100 } });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, 8);
  for (const t of lp) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    // Greedy: the chosen token is the most likely one.
    assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4);
    assert.ok(Array.isArray(t.bytes));
  }
  assert.equal(lp.map((t) => Buffer.from(t.bytes).toString('latin1')).join(''), Buffer.from(r.choices[0].message.content, 'utf8').toString('latin1'));
});

test('n choices, and seeds make sampling repeatable', async () => {
  const body = { model: 'strata-tiny', messages: hello, max_tokens: 12, temperature: 1, seed: 1234, n: 3, logit_bias: { [EOS]: -100 } };
  const a = await client.chat.completions.create(body);
  const b = await client.chat.completions.create(body);
  assert.equal(a.choices.length, 3);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
  assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
  assert.ok(new Set(a.choices.map((c) => c.message.content)).size > 1, 'different seeds per choice');
  assert.equal(a.usage.completion_tokens, 36);
});

test('stop strings end the answer before them', async () => {
  const body = { model: 'strata-tiny', messages: hello, max_tokens: 40, temperature: 0, logit_bias: { [EOS]: -100 } };
  const full = (await client.chat.completions.create(body)).choices[0].message.content;
  const chars = [...full];
  const stop = chars.slice(10, 13).join('');
  const cut = full.slice(0, full.indexOf(stop));
  const r = await client.chat.completions.create({ ...body, stop: [stop] });
  assert.equal(r.choices[0].message.content, cut);
  assert.equal(r.choices[0].finish_reason, 'stop');
});

test('reasoning comes back as reasoning_content (and reasoning)', async () => {
  const r = await thinkingClient.chat.completions.create({ model: 'strata-tiny', messages: hello, max_tokens: 30, temperature: 0, logit_bias: { [EOS]: -100 } });
  const m = r.choices[0].message;
  assert.ok(m.reasoning_content.length > 0);
  assert.equal(m.reasoning, m.reasoning_content);
  const off = await thinkingClient.chat.completions.create({ model: 'strata-tiny', messages: hello, max_tokens: 10, temperature: 0, chat_template_kwargs: { enable_thinking: false } });
  assert.equal(off.choices[0].message.reasoning_content, undefined);
});

test('legacy completions, whole and streamed', async () => {
  const r = await client.completions.create({ model: 'strata-tiny', prompt: 'Once upon a time', max_tokens: 10, temperature: 0, logprobs: 2, logit_bias: { [EOS]: -100 } });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.usage.completion_tokens, 10);
  assert.equal(r.choices[0].logprobs.tokens.length, 10);
  const stream = await client.completions.create({ model: 'strata-tiny', prompt: 'Once upon a time', max_tokens: 10, temperature: 0, stream: true, logit_bias: { [EOS]: -100 } });
  let text = '';
  for await (const c of stream) text += c.choices[0]?.text ?? '';
  assert.equal(text, r.choices[0].text);
});

test('errors come in OpenAI shape with the right classes', async () => {
  await assert.rejects(client.chat.completions.create({ model: 'strata-tiny', messages: 'hello' }), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError);
    assert.equal(e.status, 400);
    assert.equal(e.error.type, 'invalid_request_error');
    assert.equal(e.param, 'messages');
    return true;
  });
  await assert.rejects(client.chat.completions.create({ model: 'strata-tiny', messages: hello, temperature: 7 }), (e) => e instanceof OpenAI.BadRequestError && /temperature/.test(e.message));
  await assert.rejects(client.chat.completions.create({
    model: 'strata-tiny', max_tokens: 5,
    messages: [{ role: 'user', content: [{ type: 'text', text: 'what is this?' }, { type: 'image_url', image_url: { url: `data:image/png;base64,${tinyPng}` } }] }],
  }), (e) => e instanceof OpenAI.BadRequestError && /does not accept images/.test(e.message));
  await assert.rejects(client.chat.completions.create({
    model: 'strata-tiny', max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://example.com/cat.png' } }] }],
  }), (e) => e instanceof OpenAI.BadRequestError && /does not fetch/.test(e.message));
});

test('an API key is required when configured (401 in OpenAI shape)', async (t) => {
  const keyed = await startServer({ args: ['--api-key', 'sk-test-123'], logName: 'openai-key' });
  t.after(() => keyed.stop());
  const bad = new OpenAI({ baseURL: `${keyed.base}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.chat.completions.create({ model: 'strata-tiny', messages: hello, max_tokens: 2 }), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  const good = new OpenAI({ baseURL: `${keyed.base}/v1`, apiKey: 'sk-test-123', maxRetries: 0 });
  const r = await good.chat.completions.create({ model: 'strata-tiny', messages: hello, max_tokens: 2 });
  assert.equal(r.choices.length, 1);
});

// A tool call cut by max_tokens (coding agents hit it with large write calls): a tool call with
// its arguments so far, finish_reason "length", no markup in the text, the stream adding up to
// the whole answer. Qwen3 (Hermes): the forced call's JSON constraint writes the call.
// Qwen3.5 (XML): the random test model cannot write XML by itself, so a response_format string
// spells an XML call for it (the parser finds calls in any answer text; the text keeps the
// string's opening quote).
test('a tool call cut by max_tokens stays a call with finish_reason length, whole and streamed (Hermes and XML)', async () => {
  const xmlCall = '<tool_call><function=get_weather><parameter=city>Rio de Janeiro, Brazil</parameter><parameter=days>12</parameter></function></tool_call>';
  const cases = [
    ['qwen3', client, { tools: [weather], tool_choice: 'required', max_tokens: 32, temperature: 0 }],
    ['qwen35', thinkingClient, { tools: [weather], max_tokens: 26, temperature: 0,
      response_format: { type: 'json_schema', json_schema: { name: 'call', schema: { type: 'string', const: xmlCall } } } }],
  ];
  for (const [kind, c, extra] of cases) {
    const body = { model: 'strata-tiny', messages: [{ role: 'user', content: 'Weather in Rio?' }], ...extra };
    const whole = await c.chat.completions.create(body);
    const choice = whole.choices[0];
    assert.equal(choice.finish_reason, 'length', kind);
    assert.equal(choice.message.tool_calls?.length, 1, `${kind}: ${JSON.stringify(choice.message)}`);
    const call = choice.message.tool_calls[0].function;
    assert.equal(call.name, 'get_weather');
    assert.ok(!(choice.message.content ?? '').includes('<'), `${kind}: markup in the text: ${choice.message.content}`);
    if (kind === 'qwen3') {
      // The JSON as far as it got: a prefix of an object, not yet one.
      assert.ok(call.arguments.startsWith('{'), call.arguments);
      assert.throws(() => JSON.parse(call.arguments));
    } else {
      // The parameters so far, the one being read as far as it got.
      const args = JSON.parse(call.arguments);
      assert.ok(typeof args.city === 'string' && 'Rio de Janeiro, Brazil'.startsWith(args.city) && args.city.length < 22, call.arguments);
      assert.equal(args.days, undefined);
    }
    const stream = await c.chat.completions.create({ ...body, stream: true });
    let text = '', args = '', name = '', finish = null, calls = 0;
    for await (const chunk of stream) {
      const ch = chunk.choices[0];
      if (!ch) continue;
      text += ch.delta.content ?? '';
      for (const tc of ch.delta.tool_calls ?? []) {
        if (tc.id) { calls += 1; name = tc.function.name; }
        args += tc.function.arguments ?? '';
      }
      if (ch.finish_reason) finish = ch.finish_reason;
    }
    assert.equal(finish, 'length', kind);
    assert.equal(calls, 1, kind);
    assert.equal(name, call.name);
    assert.equal(args, call.arguments, kind);
    assert.equal(text, choice.message.content ?? '', kind);
  }
});

test('--spec-ngram: greedy and seeded sampled answers equal a plain server\'s, drafts are counted, "speculative": false opts out', async () => {
  const spec = await startServer({ kind: 'qwen35', args: ['--spec-ngram', '4'], logName: 'openai-spec' });
  const specClient = new OpenAI({ baseURL: `${spec.base}/v1`, apiKey: 'unused', maxRetries: 0 });
  const messages = [{ role: 'user', content: 'Repeat after me: the quick brown fox jumps over the lazy dog, the quick brown fox jumps over the lazy dog.' }];
  const body = { model: 'strata-tiny', messages, max_tokens: 64, temperature: 0 };
  const plain = await thinkingClient.chat.completions.create(body);
  const drafted = await specClient.chat.completions.create(body);
  assert.equal(drafted.choices[0].message.content, plain.choices[0].message.content);
  assert.equal(drafted.choices[0].message.reasoning_content, plain.choices[0].message.reasoning_content);
  assert.equal(drafted.usage.completion_tokens, 64);
  const n = await metric(spec.base, 'strata_spec_drafted_tokens_total');
  assert.ok(n > 0, `${n} tokens drafted`);
  assert.ok(await metric(spec.base, 'strata_spec_accepted_tokens_total') > 0);
  // Opted out: the same answer, no more drafts.
  const out = await specClient.chat.completions.create({ ...body, speculative: false });
  assert.equal(out.choices[0].message.content, plain.choices[0].message.content);
  assert.equal(await metric(spec.base, 'strata_spec_drafted_tokens_total'), n);
  // Sampled with a seed (the CPU backend's rows come to the host, so these draft too; a low
  // temperature, so the random test model repeats the prompt as its greedy answer does): the same
  // tokens as the plain server's, with either template family.
  const sampled = { ...body, temperature: 0.1, top_p: 0.95, seed: 4242 };
  const plainSampled = await thinkingClient.chat.completions.create(sampled);
  const specSampled = await specClient.chat.completions.create(sampled);
  assert.equal(specSampled.choices[0].message.content, plainSampled.choices[0].message.content);
  assert.equal(specSampled.choices[0].message.reasoning_content, plainSampled.choices[0].message.reasoning_content);
  assert.ok(await metric(spec.base, 'strata_spec_drafted_tokens_total') > n, 'the sampled request drafted');
  await spec.stop();
  const spec3 = await startServer({ args: ['--spec-ngram', '4'], logName: 'openai-spec-qwen3' });
  const spec3Client = new OpenAI({ baseURL: `${spec3.base}/v1`, apiKey: 'unused', maxRetries: 0 });
  // This server's model is biased to end its turns: kept going, as a long answer would.
  for (const b of [body, sampled].map((x) => ({ ...x, logit_bias: { [EOS]: -100 } }))) {
    const p3 = await client.chat.completions.create(b);
    const s3 = await spec3Client.chat.completions.create(b);
    assert.equal(s3.choices[0].message.content, p3.choices[0].message.content, `temperature ${b.temperature}`);
  }
  assert.ok(await metric(spec3.base, 'strata_spec_drafted_tokens_total') > 0);
  await spec3.stop();
});
