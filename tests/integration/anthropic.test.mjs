// strata serve through the official `@anthropic-ai/sdk` client: messages whole and streamed
// (event order checked on the raw stream), the stream helper, tools and forced tool choice,
// thinking with an enforced budget and signed blocks, count_tokens, errors and their wording.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { stopAll, startServer, tinyPng } from './harness.mjs';

let server, thinking, small, client, thinkingClient;
const model = 'strata-tiny';
const hello = [{ role: 'user', content: 'Say hello.' }];
// The test model's eos feature makes greedy decoding stop at once, so repeatable runs sample
// with a seed (a field this server accepts beside Anthropic's own).
const seeded = { temperature: 1, seed: 7 };

before(async () => {
  [server, thinking, small] = await Promise.all([
    startServer({ logName: 'anthropic' }),
    startServer({ kind: 'qwen35', logName: 'anthropic-35' }),
    startServer({ args: ['--ctx', '256'], logName: 'anthropic-small' }),
  ]);
  client = new Anthropic({ baseURL: server.base, apiKey: 'unused', maxRetries: 0 });
  thinkingClient = new Anthropic({ baseURL: thinking.base, apiKey: 'unused', maxRetries: 0 });
});
after(stopAll);

test('a message: text block, stop reason, usage', async () => {
  const m = await client.messages.create({ model, max_tokens: 64, messages: hello, temperature: 0 });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.match(m.id, /^msg_/);
  assert.equal(m.content[0].type, 'text');
  assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason));
  assert.ok(m.usage.input_tokens > 5);
  assert.ok(m.usage.output_tokens >= 1 && m.usage.output_tokens <= 64);
});

test('streamed events come in the documented order and match the whole message', async () => {
  const body = { model, max_tokens: 24, messages: hello, ...seeded };
  const whole = await client.messages.create(body);
  const events = [];
  for await (const e of await client.messages.create({ ...body, stream: true })) events.push(e);
  assert.equal(events[0].type, 'message_start');
  assert.equal(events[0].message.stop_reason, null);
  assert.ok(events[0].message.usage.input_tokens > 0);
  assert.equal(events.at(-1).type, 'message_stop');
  assert.equal(events.at(-2).type, 'message_delta');
  let open = -1, text = '';
  for (const e of events.slice(1, -2)) {
    if (e.type === 'ping') continue;
    if (e.type === 'content_block_start') { assert.equal(open, -1); open = e.index; }
    else if (e.type === 'content_block_delta') { assert.equal(e.index, open); if (e.delta.type === 'text_delta') text += e.delta.text; }
    else if (e.type === 'content_block_stop') { assert.equal(e.index, open); open = -1; }
    else assert.fail(`unexpected event ${e.type}`);
  }
  assert.equal(open, -1);
  assert.equal(text, whole.content.map((b) => b.text ?? '').join(''));
  const delta = events.at(-2);
  assert.equal(delta.delta.stop_reason, whole.stop_reason);
  assert.equal(delta.usage.output_tokens, whole.usage.output_tokens);
});

test('the SDK stream helper builds the final message', async () => {
  const stream = client.messages.stream({ model, max_tokens: 32, messages: hello, ...seeded });
  let textEvents = 0;
  stream.on('text', () => { textEvents += 1; });
  const final = await stream.finalMessage();
  assert.equal(final.role, 'assistant');
  assert.ok(textEvents >= 1);
});

const tools = [
  { name: 'get_weather', description: 'Weather for a city', input_schema: { type: 'object', properties: { city: { type: 'string', maxLength: 16 }, unit: { type: 'string', enum: ['C', 'F'] } }, required: ['city', 'unit'] } },
  { name: 'add', input_schema: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'] } },
];

test('tool_choice tool forces a tool_use block with schema-valid input', async () => {
  const m = await client.messages.create({ model, max_tokens: 200, tools, tool_choice: { type: 'tool', name: 'add' }, messages: [{ role: 'user', content: 'Add 2 and 3' }], temperature: 0.5 });
  assert.equal(m.stop_reason, 'tool_use');
  const use = m.content.find((b) => b.type === 'tool_use');
  assert.equal(use.name, 'add');
  assert.match(use.id, /^toolu_/);
  assert.ok(Number.isInteger(use.input.a) && Number.isInteger(use.input.b));
});

test('tool_choice any, streamed: input_json_delta assembles into the input', async () => {
  const stream = client.messages.stream({ model, max_tokens: 200, tools, tool_choice: { type: 'any' }, messages: [{ role: 'user', content: 'Weather in Rome' }], temperature: 1 });
  const partial = [];
  stream.on('inputJson', (p) => partial.push(p));
  const final = await stream.finalMessage();
  const use = final.content.find((b) => b.type === 'tool_use');
  assert.ok(['get_weather', 'add'].includes(use.name));
  if (use.name === 'get_weather') assert.ok(['C', 'F'].includes(use.input.unit));
  assert.ok(partial.length >= 1);
  assert.equal(final.stop_reason, 'tool_use');
});

test('a tool round trip: tool_use history and tool_result (string, blocks, is_error)', async () => {
  const m = await client.messages.create({
    model, max_tokens: 16, tools,
    messages: [
      { role: 'user', content: 'Add 2 and 3, and weather in Oslo' },
      { role: 'assistant', content: [{ type: 'text', text: 'Calling tools.' }, { type: 'tool_use', id: 'toolu_1', name: 'add', input: { a: 2, b: 3 } }, { type: 'tool_use', id: 'toolu_2', name: 'get_weather', input: { city: 'Oslo', unit: 'C' } }] },
      { role: 'user', content: [
        { type: 'tool_result', tool_use_id: 'toolu_1', content: '5' },
        { type: 'tool_result', tool_use_id: 'toolu_2', content: [{ type: 'text', text: 'service down' }], is_error: true },
        { type: 'text', text: 'Thanks.', cache_control: { type: 'ephemeral' } },
      ] },
    ],
  });
  assert.equal(m.role, 'assistant');
});

test('thinking with a budget: signed thinking block, then the answer; signatures are verified', async () => {
  const body = { model, max_tokens: 1100, thinking: { type: 'enabled', budget_tokens: 1024 }, messages: hello, temperature: 0 };
  const m = await thinkingClient.messages.create(body);
  assert.equal(m.content[0].type, 'thinking');
  assert.ok(m.content[0].thinking.length > 0);
  assert.ok(m.content[0].signature.length > 0);
  assert.ok(m.usage.output_tokens <= 1100);
  // The test model never closes its reasoning by itself: without the budget it would think until
  // max_tokens. The answer comes because the server closed the thinking at 1,024 tokens.
  assert.equal(m.usage.output_tokens, 1100);
  assert.equal(m.stop_reason, 'max_tokens');
  assert.equal(m.content[1].type, 'text');
  assert.ok(m.content[1].text.length > 0, 'the answer still comes after the budget closes thinking');

  // The block goes back unmodified: accepted. Modified: 400 naming the signature.
  const next = [...hello, { role: 'assistant', content: m.content }, { role: 'user', content: 'And again?' }];
  const ok = await thinkingClient.messages.create({ model, max_tokens: 8, messages: next });
  assert.equal(ok.role, 'assistant');
  const tampered = structuredClone(next);
  tampered[1].content[0].thinking += ' (edited)';
  await assert.rejects(thinkingClient.messages.create({ model, max_tokens: 8, messages: tampered }),
    (e) => e instanceof Anthropic.BadRequestError && /signature/.test(e.message));
});

test('thinking with a budget and the most stop sequences a client may send (the server adds its own stop)', async () => {
  const stop_sequences = Array.from({ length: 16 }, (_, i) => `zz-never-${i}-zz`);
  const m = await thinkingClient.messages.create({ model, max_tokens: 1030, thinking: { type: 'enabled', budget_tokens: 1024 }, stop_sequences, messages: hello, temperature: 0 });
  assert.equal(m.content[0].type, 'thinking');
  assert.equal(m.stop_reason, 'max_tokens');
  await assert.rejects(thinkingClient.messages.create({ model, max_tokens: 8, stop_sequences: [...stop_sequences, 'one more'], messages: hello }),
    (e) => e instanceof Anthropic.BadRequestError && /stop_sequences/.test(e.message));
});

test('streamed thinking: thinking_delta, then signature_delta before the block stops', async () => {
  const events = [];
  for await (const e of await thinkingClient.messages.create({ model, max_tokens: 1060, stream: true, thinking: { type: 'enabled', budget_tokens: 1024 }, messages: hello, temperature: 0 })) events.push(e);
  const starts = events.filter((e) => e.type === 'content_block_start').map((e) => e.content_block.type);
  assert.equal(starts[0], 'thinking');
  assert.ok(starts.includes('text'));
  const stopOfThinking = events.findIndex((e) => e.type === 'content_block_stop' && e.index === 0);
  assert.equal(events[stopOfThinking - 1].delta.type, 'signature_delta');
  assert.ok(events.some((e) => e.delta?.type === 'thinking_delta'));
});

test('adaptive and disabled thinking are accepted', async () => {
  const a = await thinkingClient.messages.create({ model, max_tokens: 20, thinking: { type: 'adaptive' }, messages: hello });
  assert.equal(a.role, 'assistant');
  const d = await thinkingClient.messages.create({ model, max_tokens: 20, thinking: { type: 'disabled' }, messages: hello });
  assert.ok(!d.content.some((b) => b.type === 'thinking'));
});

test('count_tokens equals the prompt a message is charged for', async () => {
  const body = { model, system: [{ type: 'text', text: 'Be brief.' }], messages: [{ role: 'user', content: 'Count me, please.' }], tools };
  const counted = await client.messages.countTokens(body);
  const m = await client.messages.create({ ...body, max_tokens: 4 });
  assert.equal(counted.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens);
});

test('system blocks, role system entries, stop sequences, metadata and unknown fields', async () => {
  const base = { model, max_tokens: 40, temperature: 0, metadata: { user_id: 'u1' }, some_future_field: { x: 1 } };
  const m = await client.messages.create({
    ...base,
    system: [{ type: 'text', text: 'x-anthropic-billing-header: cc_version=1; cch=abc;' }, { type: 'text', text: 'Be brief.', cache_control: { type: 'ephemeral' } }],
    messages: [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello.' }, { role: 'system', content: 'Mid-conversation note.' }, { role: 'user', content: 'Bye' }],
  }, { headers: { 'anthropic-beta': 'context-management-2025-06-27,interleaved-thinking-2025-05-14' } });
  assert.equal(m.role, 'assistant');
  // A stop sequence cut from the greedy answer ends it there.
  // The first seed whose answer is long enough to cut (replies of the test model are short).
  let seed = 0, text = '';
  while ([...text].length < 8 && seed < 40) text = (await client.messages.create({ model, max_tokens: 40, messages: hello, temperature: 1, seed: ++seed })).content[0]?.text ?? '';
  assert.ok([...text].length >= 8, 'some seed gives an answer of 8 characters');
  {
    const stop = [...text].slice(4, 6).join('');
    const cut = await client.messages.create({ model, max_tokens: 40, messages: hello, temperature: 1, seed, stop_sequences: [stop] });
    assert.equal(cut.stop_reason, 'stop_sequence');
    assert.equal(cut.stop_sequence, stop);
    assert.equal(cut.content[0].text, text.slice(0, text.indexOf(stop)));
  }
});

// Claude Code's turns put `role: "system"` entries after user turns. Qwen3.5's template raises on
// any system message that is not first, so the server merges them, in order, after the top-level
// system text: the same prompt as one leading system block, on both template families.
test('mid-conversation system entries become one leading system message (Qwen3 and Qwen3.5 templates)', async () => {
  const turns = [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello.' }, { role: 'user', content: 'List the agents.' }];
  const inline = { model, system: 'Be brief.', messages: [turns[0], { role: 'system', content: 'Agents: explore, plan.' }, ...turns.slice(1), { role: 'system', content: 'Reminder: be kind.' }] };
  const merged = { model, system: 'Be brief.\n\nAgents: explore, plan.\n\nReminder: be kind.', messages: turns };
  for (const c of [client, thinkingClient]) {
    const m = await c.messages.create({ ...inline, max_tokens: 8, temperature: 0 });
    assert.equal(m.role, 'assistant');
    assert.equal((await c.messages.countTokens(inline)).input_tokens, (await c.messages.countTokens(merged)).input_tokens);
    const alone = await c.messages.countTokens({ ...merged, system: 'Be brief.' });
    assert.ok((await c.messages.countTokens(inline)).input_tokens > alone.input_tokens, 'the entries are in the prompt');
  }
});

test('errors: Anthropic shape, status and wording', async () => {
  await assert.rejects(client.messages.create({ model, messages: hello }), (e) => {
    assert.ok(e instanceof Anthropic.BadRequestError);
    assert.equal(e.error.type, 'error');
    assert.equal(e.error.error.type, 'invalid_request_error');
    assert.match(e.message, /max_tokens/);
    assert.match(e.requestID, /^req_/);
    return true;
  });
  await assert.rejects(client.messages.create({ model, max_tokens: 10, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: tinyPng } }] }] }),
    (e) => e instanceof Anthropic.BadRequestError && /does not accept images/.test(e.message));
  await assert.rejects(client.messages.create({ model, max_tokens: 10, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'bm90IGFuIGltYWdl' } }] }] }),
    (e) => e instanceof Anthropic.BadRequestError && /not a valid image\/png image/.test(e.message));
  await assert.rejects(client.messages.create({ model, max_tokens: 2000, thinking: { type: 'enabled', budget_tokens: 2000 }, messages: hello }),
    (e) => e instanceof Anthropic.BadRequestError && /budget_tokens/.test(e.message));
  // Too long for the 256-token context: the wording Claude Code acts on.
  const smallClient = new Anthropic({ baseURL: small.base, apiKey: 'unused', maxRetries: 0 });
  await assert.rejects(smallClient.messages.create({ model, max_tokens: 10, messages: [{ role: 'user', content: 'word '.repeat(400) }] }), (e) => {
    assert.ok(e instanceof Anthropic.BadRequestError);
    assert.match(e.message, /prompt is too long: \d+ tokens > 255 maximum/);
    return true;
  });
  // max_tokens beyond the window: clamped, and the stop says why.
  // (Streamed: the SDK refuses non-streamed requests this large.)
  const clamped = await smallClient.messages.stream({ model, max_tokens: 100000, messages: hello, temperature: 0.7 }).finalMessage();
  assert.ok(['end_turn', 'model_context_window_exceeded'].includes(clamped.stop_reason));
});

test('authentication: x-api-key or Bearer; 401 in Anthropic shape', async (t) => {
  const keyed = await startServer({ args: ['--api-key', 'sk-ant-test'], logName: 'anthropic-key' });
  t.after(() => keyed.stop());
  const bad = new Anthropic({ baseURL: keyed.base, apiKey: 'nope', maxRetries: 0 });
  await assert.rejects(bad.messages.create({ model, max_tokens: 2, messages: hello }), (e) => e instanceof Anthropic.AuthenticationError && e.error.error.type === 'authentication_error');
  const byKey = new Anthropic({ baseURL: keyed.base, apiKey: 'sk-ant-test', maxRetries: 0 });
  assert.equal((await byKey.messages.create({ model, max_tokens: 2, messages: hello })).role, 'assistant');
  const byToken = new Anthropic({ baseURL: keyed.base, authToken: 'sk-ant-test', apiKey: null, maxRetries: 0 });
  assert.equal((await byToken.messages.create({ model, max_tokens: 2, messages: hello })).role, 'assistant');
  // The reachability probes Claude Code sends before a key is involved are answered without one.
  for (const path of ['/', '/api/hello']) assert.equal((await fetch(keyed.base + path, { method: 'HEAD' })).status, 200, path);
  assert.equal((await fetch(keyed.base + '/v1/models')).status, 401);
});

// A tool call cut by max_tokens (coding agents hit it with large write calls): a tool_use block
// whose input is the arguments so far (closed into an object), stop_reason "max_tokens", no
// markup in any text, and the stream (raw events and the SDK's helper) equal to the whole answer.
// Qwen3 (Hermes): the forced call's JSON constraint writes the call. Qwen3.5 (XML): the prompt
// opens the named call and the XML call constraint writes its parameters; four tokens cut it at
// its first one. (tests/integration/tool_calls.test.mjs cuts calls at every max_tokens.)
test('a tool call cut by max_tokens stays a tool_use with stop_reason max_tokens, whole and streamed (Hermes and XML)', async () => {
  const cases = [
    ['qwen3', client, { tool_choice: { type: 'tool', name: 'get_weather' }, max_tokens: 32, temperature: 0 }],
    ['qwen35', thinkingClient, { tool_choice: { type: 'tool', name: 'get_weather' }, max_tokens: 4, temperature: 0 }],
  ];
  for (const [kind, c, extra] of cases) {
    const body = { model, tools, messages: [{ role: 'user', content: 'Weather in Rio?' }], ...extra };
    const whole = await c.messages.create(body);
    assert.equal(whole.stop_reason, 'max_tokens', kind);
    const uses = whole.content.filter((b) => b.type === 'tool_use');
    assert.equal(uses.length, 1, `${kind}: ${JSON.stringify(whole.content)}`);
    assert.equal(uses[0].name, 'get_weather');
    assert.equal(typeof uses[0].input, 'object');
    if (kind === 'qwen3') assert.ok(Object.keys(uses[0].input).length >= 1, JSON.stringify(uses[0].input));
    else assert.ok(Object.keys(uses[0].input).every((k) => k === 'city') && (uses[0].input.city ?? '').length <= 4, JSON.stringify(uses[0].input));
    for (const b of whole.content) if (b.type === 'text') assert.ok(!b.text.includes('<'), `${kind}: markup in the text: ${b.text}`);

    // Raw events: one tool_use block, its deltas parse to the whole answer's input.
    const events = [];
    for await (const e of await c.messages.create({ ...body, stream: true })) events.push(e);
    const starts = events.filter((e) => e.type === 'content_block_start');
    assert.deepEqual(starts.map((e) => e.content_block.type), whole.content.map((b) => b.type), kind);
    const partial = events.filter((e) => e.delta?.type === 'input_json_delta').map((e) => e.delta.partial_json).join('');
    assert.deepEqual(JSON.parse(partial), uses[0].input, kind);
    const text = events.filter((e) => e.delta?.type === 'text_delta').map((e) => e.delta.text).join('');
    assert.equal(text, whole.content.filter((b) => b.type === 'text').map((b) => b.text).join(''));
    assert.equal(events.find((e) => e.type === 'message_delta').delta.stop_reason, 'max_tokens', kind);

    // The SDK's stream helper assembles the same message.
    const final = await c.messages.stream(body).finalMessage();
    assert.equal(final.stop_reason, 'max_tokens');
    assert.deepEqual(final.content.map((b) => b.type === 'tool_use' ? { name: b.name, input: b.input } : b), whole.content.map((b) => b.type === 'tool_use' ? { name: b.name, input: b.input } : b));
  }
});
