// The OpenAI Responses API (POST /v1/responses and the stored responses' routes) through the
// official `openai` client, on a Qwen3-template and a Qwen3.5-template model, directly and through
// `strata gateway`: whole and streamed responses (the published event sequence checked on every
// stream, and stream = whole), a tool-call round trip (function_call -> function_call_output ->
// answer) with the items sent back and with previous_response_id, retrieve / input_items / delete /
// cancel, structured output through text.format, max_output_tokens -> incomplete, reasoning items
// on the thinking template, errors in OpenAI's shape, Codex CLI's real request (a capture of
// codex exec 0.171.0, fixtures/codex_request.json) replayed, and stored responses kept across a
// restart of serve (--responses-db).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, rmSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { stopAll, startServer, startGateway, workDir } from './harness.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const codexRequest = JSON.parse(readFileSync(join(here, 'fixtures/codex_request.json'), 'utf8'));
const model = 'strata-tiny';
const EOS = '151645';  // <|im_end|>: biased against where a reply must run to max_output_tokens
const targets = {};

before(async () => {
  const [qwen3, qwen35] = await Promise.all([
    startServer({ logName: 'responses' }),
    startServer({ kind: 'qwen35', logName: 'responses-35' }),
  ]);
  const [gw3, gw35] = await Promise.all([
    startGateway(['--upstream', qwen3.base, '--listen', '127.0.0.1:0', '--api-key', 'sk-gw', '--store', '', '--lane-wait', '3'], { logName: 'gw-responses' }),
    startGateway(['--upstream', qwen35.base, '--listen', '127.0.0.1:0', '--api-key', 'sk-gw', '--store', '', '--lane-wait', '3'], { logName: 'gw-responses-35' }),
  ]);
  const client = (base, key = 'unused') => new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0 });
  targets.qwen3 = { client: client(qwen3.base), base: qwen3.base, key: 'unused', thinking: false };
  targets.qwen35 = { client: client(qwen35.base), base: qwen35.base, key: 'unused', thinking: true };
  targets['gateway-qwen3'] = { client: client(gw3.base, 'sk-gw'), base: gw3.base, key: 'sk-gw', thinking: false };
  targets['gateway-qwen35'] = { client: client(gw35.base, 'sk-gw'), base: gw35.base, key: 'sk-gw', thinking: true };
});
after(stopAll);

// Every invariant of the published event sequence; returns the response of its terminal event.
function checkEvents(events) {
  assert.equal(events[0].type, 'response.created');
  assert.equal(events[0].response.status, 'in_progress');
  assert.deepEqual(events[0].response.output, []);
  assert.equal(events[1].type, 'response.in_progress');
  events.forEach((e, i) => assert.equal(e.sequence_number, i, `sequence_number of event ${i} (${e.type})`));
  const last = events.at(-1);
  assert.ok(['response.completed', 'response.incomplete'].includes(last.type), `terminal event ${last.type}`);
  const items = [];  // output_index -> {item, done, parts}
  let open = null;
  for (const e of events.slice(2, -1)) {
    switch (e.type) {
      case 'response.output_item.added':
        assert.equal(open, null, 'one item open at a time');
        assert.equal(e.output_index, items.length);
        assert.ok(['in_progress', undefined].includes(e.item.status));
        open = { item: e.item, text: '', args: '', summary: '', parts: 0 };
        items.push(open);
        break;
      case 'response.content_part.added':
        assert.equal(e.item_id, open.item.id);
        assert.equal(e.output_index, items.length - 1);
        assert.equal(e.content_index, 0);
        assert.equal(e.part.type, open.item.type === 'reasoning' ? 'reasoning_text' : 'output_text');
        open.parts += 1;
        break;
      case 'response.output_text.delta':
      case 'response.reasoning_text.delta':
        assert.equal(e.item_id, open.item.id);
        assert.equal(open.parts, 1, `${e.type} inside its content part`);
        assert.equal(e.item_id.slice(0, 3), e.type === 'response.output_text.delta' ? 'msg' : 'rs_');
        open.text += e.delta;
        break;
      case 'response.output_text.done':
      case 'response.reasoning_text.done':
        assert.equal(e.text, open.text);
        break;
      case 'response.reasoning_summary_part.added':
      case 'response.reasoning_summary_part.done':
        assert.equal(e.item_id, open.item.id);
        assert.equal(e.summary_index, 0);
        break;
      case 'response.reasoning_summary_text.delta':
        open.summary += e.delta;
        break;
      case 'response.reasoning_summary_text.done':
        assert.equal(e.text, open.summary);
        break;
      case 'response.content_part.done':
        assert.equal(e.part.text, open.text);
        break;
      case 'response.function_call_arguments.delta':
        assert.equal(e.item_id, open.item.id);
        open.args += e.delta;
        break;
      case 'response.function_call_arguments.done':
        assert.equal(e.arguments, open.args);
        assert.equal(e.name, open.item.name);
        break;
      case 'response.output_item.done':
        assert.equal(e.output_index, items.length - 1);
        assert.equal(e.item.id, open.item.id);
        if (e.item.type === 'message') assert.equal(e.item.content[0].text, open.text);
        if (e.item.type === 'reasoning') assert.equal(e.item.content[0].text, open.text);
        if (e.item.type === 'function_call') assert.equal(e.item.arguments, open.args);
        open.done = e.item;
        open = null;
        break;
      default:
        assert.fail(`unexpected event ${e.type}`);
    }
  }
  assert.equal(open, null, 'every item closed before the end');
  assert.deepEqual(last.response.output, items.map((i) => i.done));
  return last.response;
}

async function collect(stream) {
  const events = [];
  for await (const e of stream) events.push(e);
  return events;
}

// The output text of a response (the SDK adds output_text to whole responses).
const textOf = (r) => r.output.filter((i) => i.type === 'message').map((i) => i.content[0].text).join('');

for (const name of ['qwen3', 'qwen35', 'gateway-qwen3', 'gateway-qwen35']) {
  const t = () => targets[name];

  test(`${name}: a whole response: items, status, usage`, async () => {
    const r = await t().client.responses.create({ model, input: 'Say hello.', max_output_tokens: 24, temperature: 1, seed: 5 });
    assert.equal(r.object, 'response');
    assert.match(r.id, /^resp_/);
    assert.ok(['completed', 'incomplete'].includes(r.status));
    assert.equal(r.model, model);
    assert.equal(r.store, true);
    assert.ok(r.output.length >= 1);
    if (t().thinking) assert.equal(r.output[0].type, 'reasoning');
    for (const item of r.output) {
      if (item.type === 'message') { assert.equal(item.role, 'assistant'); assert.equal(item.content[0].type, 'output_text'); }
      if (item.type === 'reasoning') { assert.equal(item.content[0].type, 'reasoning_text'); assert.deepEqual(item.summary, []); }
    }
    assert.equal(r.output_text, textOf(r));
    assert.ok(r.usage.input_tokens > 5);
    assert.ok(r.usage.output_tokens >= 1 && r.usage.output_tokens <= 24);
    assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
    assert.equal(typeof r.usage.input_tokens_details.cached_tokens, 'number');
    if (t().thinking) assert.ok(r.usage.output_tokens_details.reasoning_tokens > 0);
  });

  test(`${name}: streamed events follow the published sequence and match the whole response`, async () => {
    const body = { model, input: [{ role: 'user', content: [{ type: 'input_text', text: 'Say hello.' }] }], instructions: 'Be brief.', max_output_tokens: 20, temperature: 1, seed: 9, store: false };
    const whole = await t().client.responses.create(body);
    const final = checkEvents(await collect(await t().client.responses.create({ ...body, stream: true })));
    assert.equal(final.status, whole.status);
    assert.deepEqual(final.output.map((i) => i.type), whole.output.map((i) => i.type));
    assert.equal(textOf(final), textOf(whole));
    assert.deepEqual(final.usage.output_tokens, whole.usage.output_tokens);
    assert.equal(final.instructions, 'Be brief.');
    // The SDK's stream helper builds the same response.
    const helper = await t().client.responses.stream(body).finalResponse();
    assert.equal(helper.output_text, textOf(whole));
  });

  test(`${name}: a reasoning summary and encrypted reasoning when asked for`, async () => {
    if (!t().thinking) return;
    const body = { model, input: 'Think first.', max_output_tokens: 16, temperature: 1, seed: 2, reasoning: { effort: 'low', summary: 'auto' }, include: ['reasoning.encrypted_content'], store: false };
    const events = await collect(await t().client.responses.create({ ...body, stream: true }));
    const final = checkEvents(events);
    assert.ok(events.some((e) => e.type === 'response.reasoning_summary_text.delta'));
    const rs = final.output[0];
    assert.equal(rs.type, 'reasoning');
    assert.equal(rs.summary[0].text, rs.content[0].text);
    assert.match(rs.encrypted_content, /^strata1:/);
    // Sent back with only its encrypted_content (store false, as Codex does), it is accepted.
    const next = await t().client.responses.create({ model, max_output_tokens: 4, store: false,
      input: [{ role: 'user', content: 'Think first.' }, { type: 'reasoning', id: rs.id, summary: [], encrypted_content: rs.encrypted_content }, { role: 'user', content: 'Go on.' }] });
    assert.ok(['completed', 'incomplete'].includes(next.status));
  });

  const tools = [{ type: 'function', name: 'get_weather', description: 'Weather for a city', strict: true,
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, unit: { type: 'string', enum: ['C', 'F'] } }, required: ['city', 'unit'], additionalProperties: false } },
    { type: 'web_search' }, { type: 'custom', name: 'apply_patch' }];

  // A call is made by a forced tool choice on both templates: the JSON constraint writes a Hermes
  // call (Qwen3), the XML call constraint a <function=...><parameter=...> one whose values follow
  // the schema (Qwen3.5), so the random test model's arguments are schema-valid.
  const makeCall = (choice) => ({ tool_choice: choice });

  test(`${name}: a tool call round trip: function_call, function_call_output, answer`, async () => {
    const input = [{ role: 'user', content: 'Weather in Paris?' }];
    const r = await t().client.responses.create({ model, input, tools, ...makeCall({ type: 'function', name: 'get_weather' }), max_output_tokens: 120, temperature: 0.7, seed: 3 });
    assert.equal(r.status, 'completed');
    const call = r.output.find((i) => i.type === 'function_call');
    assert.ok(call, JSON.stringify(r.output));
    assert.equal(call.name, 'get_weather');
    assert.match(call.call_id, /^call_/);
    assert.match(call.id, /^fc_/);
    const args = JSON.parse(call.arguments);
    assert.equal(typeof args.city, 'string');
    // JSON Schema's maxLength counts code points; a string's .length counts UTF-16 units.
    assert.ok([...args.city].length <= 12, JSON.stringify(args.city));
    assert.ok(['C', 'F'].includes(args.unit));
    // The items sent back, as a stateless client does.
    const back = await t().client.responses.create({ model, tools, max_output_tokens: 16, store: false,
      input: [...input, ...r.output, { type: 'function_call_output', call_id: call.call_id, output: '{"temp": 21}' }] });
    assert.ok(['completed', 'incomplete'].includes(back.status));
    assert.ok(back.usage.input_tokens > r.usage.input_tokens, 'the call and its output are in the prompt');
    // The same through previous_response_id.
    const cont = await t().client.responses.create({ model, tools, max_output_tokens: 16, previous_response_id: r.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp": 21}' }] });
    assert.equal(cont.previous_response_id, r.id);
    assert.equal(cont.usage.input_tokens, back.usage.input_tokens, 'previous_response_id prepends the same items');
  });

  test(`${name}: a streamed forced call assembles in the SDK`, async () => {
    const events = await collect(await t().client.responses.create({ model, input: 'Weather?', tools, ...makeCall('required'), max_output_tokens: 120, temperature: 1, seed: 11, stream: true }));
    const final = checkEvents(events);
    const call = final.output.find((i) => i.type === 'function_call');
    assert.ok(call);
    assert.ok(events.some((e) => e.type === 'response.function_call_arguments.delta'));
    JSON.parse(call.arguments);
  });

  test(`${name}: previous_response_id continues a stored conversation`, async () => {
    const first = await t().client.responses.create({ model, input: 'My name is Ada.', max_output_tokens: 8, temperature: 1, seed: 1 });
    const second = await t().client.responses.create({ model, input: 'What is my name?', previous_response_id: first.id, max_output_tokens: 8 });
    assert.equal(second.previous_response_id, first.id);
    assert.ok(second.usage.input_tokens > first.usage.input_tokens + 3, 'the first exchange is in the prompt');
    // A chain: the third sees both exchanges.
    const third = await t().client.responses.create({ model, input: 'And again?', previous_response_id: second.id, max_output_tokens: 4 });
    assert.ok(third.usage.input_tokens > second.usage.input_tokens);
    await assert.rejects(t().client.responses.create({ model, input: 'x', previous_response_id: 'resp_doesnotexist' }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id' && /not found/.test(e.message));
  });

  test(`${name}: retrieve, input_items, cancel, delete`, async () => {
    const r = await t().client.responses.create({ model, input: [{ role: 'user', content: 'one' }, { role: 'assistant', content: 'two' }, { role: 'user', content: 'three' }], max_output_tokens: 6, metadata: { run: 'test' } });
    const got = await t().client.responses.retrieve(r.id);
    assert.equal(got.id, r.id);
    assert.deepEqual(got.output, r.output);
    assert.deepEqual(got.metadata, { run: 'test' });
    const items = await t().client.responses.inputItems.list(r.id, { order: 'asc' });
    assert.deepEqual(items.data.map((i) => i.content[0].text), ['one', 'two', 'three']);
    assert.ok(items.data.every((i) => typeof i.id === 'string'));
    const page = await t().client.responses.inputItems.list(r.id, { limit: 1 });
    assert.equal(page.data[0].content[0].text, 'three');  // newest first by default
    await assert.rejects(t().client.responses.cancel(r.id), (e) => e instanceof OpenAI.BadRequestError && /not in progress/.test(e.message));
    await t().client.responses.delete(r.id);
    await assert.rejects(t().client.responses.retrieve(r.id), (e) => e instanceof OpenAI.NotFoundError);
    await assert.rejects(t().client.responses.delete(r.id), (e) => e instanceof OpenAI.NotFoundError);
    // store: false keeps nothing.
    const unstored = await t().client.responses.create({ model, input: 'x', max_output_tokens: 2, store: false });
    await assert.rejects(t().client.responses.retrieve(unstored.id), (e) => e instanceof OpenAI.NotFoundError);
  });

  test(`${name}: structured output through text.format`, async () => {
    const schema = { type: 'object', properties: { city: { type: 'string', maxLength: 10 }, n: { type: 'integer', minimum: 0, maximum: 9 } }, required: ['city', 'n'], additionalProperties: false };
    const r = await t().client.responses.create({ model, input: 'A city and a digit.', text: { format: { type: 'json_schema', name: 'pick', schema, strict: true } }, max_output_tokens: 80, temperature: 1, seed: 4 });
    assert.equal(r.status, 'completed');
    assert.equal(r.output.filter((i) => i.type === 'reasoning').length, 0, 'constrained output has no reasoning block');
    const v = JSON.parse(r.output_text);
    assert.equal(typeof v.city, 'string');
    assert.ok(Number.isInteger(v.n) && v.n >= 0 && v.n <= 9);
    assert.deepEqual(Object.keys(v).sort(), ['city', 'n']);
    assert.equal(r.text.format.type, 'json_schema');
    // The prompt and seed of openai.test.mjs's json_object case (the same messages render the same
    // prompt), where the object closes within the limit. (The Qwen3.5 test model has no eos
    // feature: a free object never closes.)
    if (t().thinking) return;
    const obj = await t().client.responses.create({ model, input: 'Say hello.', text: { format: { type: 'json_object' } }, max_output_tokens: 200, temperature: 0.8, seed: 6 });
    assert.equal(obj.status, 'completed');
    const parsed = JSON.parse(obj.output_text);
    assert.ok(typeof parsed === 'object' && !Array.isArray(parsed) && parsed !== null);
  });

  test(`${name}: max_output_tokens ends a response incomplete, whole and streamed`, async () => {
    const body = { model, input: 'Talk.', max_output_tokens: 5, temperature: 0, logit_bias: { [EOS]: -100 }, store: false };
    const r = await t().client.responses.create(body);
    assert.equal(r.status, 'incomplete');
    assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(r.usage.output_tokens, 5);
    assert.equal(r.output.at(-1).status, 'incomplete');
    const events = await collect(await t().client.responses.create({ ...body, stream: true }));
    assert.equal(events.at(-1).type, 'response.incomplete');
    const final = checkEvents(events);
    assert.deepEqual(final.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(textOf(final), textOf(r));
  });

  test(`${name}: bad input gets a 400 in OpenAI's shape`, async () => {
    const cases = [
      [{ model, input: [{ type: 'message', role: 'robot', content: 'x' }] }, 'input[0].role'],
      [{ model, input: 'x', max_output_tokens: 0 }, 'max_output_tokens'],
      [{ model, input: 'x', text: { format: { type: 'yaml' } } }, 'text.format.type'],
      [{ model, input: 'x', tools: [{ type: 'function', name: 'f' }], tool_choice: { type: 'function', name: 'g' } }, 'tool_choice.name'],
      [{ model, input: 'x', background: true }, 'background'],
      [{ model }, 'input'],
    ];
    for (const [body, param] of cases)
      await assert.rejects(t().client.responses.create(body), (e) => e instanceof OpenAI.BadRequestError && e.param === param && e.error.type === 'invalid_request_error', JSON.stringify(body));
    // Not JSON at all, by hand.
    const res = await fetch(`${t().base}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${t().key}` }, body: '{"input": [' });
    assert.equal(res.status, 400);
    assert.match((await res.json()).error.message, /not valid JSON/);
  });

  test(`${name}: Codex CLI's request, replayed, streams a complete response`, async () => {
    // As captured from codex exec 0.171.0, with max_output_tokens added: Codex sends none, and the
    // Qwen3.5 test model never stops by itself.
    const res = await fetch(`${t().base}/v1/responses`, { method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream', authorization: `Bearer ${t().key}` },
      body: JSON.stringify({ ...codexRequest, model, max_output_tokens: 24 }) });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^text\/event-stream/);
    const text = await res.text();
    const events = [];
    for (const block of text.split('\n\n').filter((b) => b.trim())) {
      const lines = block.split('\n');
      assert.match(lines[0], /^event: /);
      const data = JSON.parse(lines[1].replace(/^data: /, ''));
      assert.equal(lines[0].slice(7), data.type, 'the event line names the data type');
      events.push(data);
    }
    const final = checkEvents(events);
    assert.equal(final.store, false);
    assert.equal(final.tools.length, codexRequest.tools.length, 'tools echoed as sent, those it cannot run included');
    assert.ok(final.usage.input_tokens > 5000, 'the whole Codex prompt was read');
    for (const item of final.output) if (item.type === 'reasoning') assert.match(item.encrypted_content, /^strata1:/);
  });
}

for (const name of ['qwen3', 'gateway-qwen3']) {
  test(`${name}: cancel stops a response while it streams`, async () => {
    const t = targets[name];
    const stream = await t.client.responses.create({ model, input: 'Talk.', stream: true, max_output_tokens: 60000, temperature: 0, logit_bias: { [EOS]: -100 } });
    const events = [];
    let cancelled = null;
    for await (const e of stream) {
      events.push(e);
      if (!cancelled && e.type === 'response.output_text.delta') cancelled = await t.client.responses.cancel(events[0].response.id);
    }
    assert.equal(cancelled.status, 'cancelled');
    assert.equal(cancelled.id, events[0].response.id);
    const last = events.at(-1);
    assert.equal(last.type, 'response.incomplete');
    assert.equal(last.response.status, 'cancelled');
    assert.ok(last.response.usage.output_tokens < 60000);
    const stored = await t.client.responses.retrieve(events[0].response.id);
    assert.equal(stored.status, 'cancelled');
    assert.equal(textOf(stored), textOf(last.response));
    // Cancelling it again: it is no longer in progress.
    await assert.rejects(t.client.responses.cancel(stored.id), (e) => e instanceof OpenAI.BadRequestError);
  });
}

test('stored responses are bounded: --responses-store keeps the newest', async () => {
  const s = await startServer({ args: ['--responses-store', '2'], logName: 'responses-bounded' });
  const client = new OpenAI({ baseURL: `${s.base}/v1`, apiKey: 'unused', maxRetries: 0 });
  const ids = [];
  for (let i = 0; i < 3; ++i) ids.push((await client.responses.create({ model, input: `turn ${i}`, max_output_tokens: 2 })).id);
  await assert.rejects(client.responses.retrieve(ids[0]), (e) => e instanceof OpenAI.NotFoundError);
  assert.equal((await client.responses.retrieve(ids[1])).id, ids[1]);
  assert.equal((await client.responses.retrieve(ids[2])).id, ids[2]);
  await assert.rejects(client.responses.create({ model, input: 'x', previous_response_id: ids[0] }), (e) => e instanceof OpenAI.BadRequestError);
  await s.stop();
});

test('stored responses survive a restart of serve with --responses-db', async () => {
  const db = join(workDir, `responses-${process.pid}-${Date.now()}.db`);
  const args = ['--responses-db', db, '--api-key', 'sk-a', '--api-key', 'sk-b'];
  const clientOf = (s, key = 'sk-a') => new OpenAI({ baseURL: `${s.base}/v1`, apiKey: key, maxRetries: 0 });
  let s = await startServer({ args, logName: 'responses-db' });
  let client = clientOf(s);
  const first = await client.responses.create({ model, input: 'My name is Ada.', max_output_tokens: 8, metadata: { run: 'db' } });
  const asked = await client.responses.create({ model, input: 'What is my name?', previous_response_id: first.id, max_output_tokens: 4 });
  const gone = await client.responses.create({ model, input: 'forget me', max_output_tokens: 2 });
  await client.responses.delete(gone.id);
  const unstored = await client.responses.create({ model, input: 'x', max_output_tokens: 2, store: false });
  await s.stop();  // SIGTERM: a clean stop

  s = await startServer({ args, logName: 'responses-db-2' });
  client = clientOf(s);
  const got = await client.responses.retrieve(first.id);
  assert.equal(got.id, first.id);
  assert.equal(got.status, first.status);
  assert.deepEqual(got.output, first.output);
  assert.deepEqual(got.metadata, { run: 'db' });
  const items = await client.responses.inputItems.list(first.id);
  assert.deepEqual(items.data.map((i) => i.content[0].text), ['My name is Ada.']);
  const cont = await client.responses.create({ model, input: 'What is my name?', previous_response_id: first.id, max_output_tokens: 4 });
  assert.equal(cont.previous_response_id, first.id);
  assert.equal(cont.usage.input_tokens, asked.usage.input_tokens, 'the same stored items come before the new input');
  // A chain through a response made before the restart.
  const chained = await client.responses.create({ model, input: 'Again?', previous_response_id: asked.id, max_output_tokens: 4 });
  assert.ok(chained.usage.input_tokens > asked.usage.input_tokens);
  // Deleted and unstored stay gone; another key sees nothing.
  await assert.rejects(client.responses.retrieve(gone.id), (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(client.responses.retrieve(unstored.id), (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(clientOf(s, 'sk-b').responses.retrieve(first.id), (e) => e instanceof OpenAI.NotFoundError);
  assert.doesNotMatch(s.log(), /memory only/);
  // A kill -9 loses nothing that was answered: each store is committed before its answer.
  const late = await client.responses.create({ model, input: 'after the restart', max_output_tokens: 2 });
  s.child.kill('SIGKILL');
  await new Promise((r) => s.child.on('exit', r));

  s = await startServer({ args, logName: 'responses-db-3' });
  client = clientOf(s);
  assert.equal((await client.responses.retrieve(late.id)).id, late.id);
  assert.equal((await client.responses.retrieve(chained.id)).id, chained.id);
  const again = await client.responses.create({ model, input: 'Last one.', previous_response_id: late.id, max_output_tokens: 2 });
  assert.equal(again.previous_response_id, late.id);
  await s.stop();
  for (const f of [db, `${db}-wal`]) rmSync(f, { force: true });
});

test('a generation that fails mid-stream ends with an error event and response.failed', async () => {
  // The engine of a dedicated server is killed while it streams.
  const s = await startServer({ logName: 'responses-fail' });
  const res = await fetch(`${s.base}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, input: 'Talk.', stream: true, max_output_tokens: 60000, logit_bias: { [EOS]: -100 } }) });
  const reader = res.body.getReader();
  let text = '';
  const decoder = new TextDecoder();
  let killed = false;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value);
    if (!killed && text.includes('response.output_text.delta')) { process.kill(s.enginePid(), 'SIGKILL'); killed = true; }
  }
  assert.ok(killed);
  assert.match(text, /event: error\ndata: \{"type":"error"/);
  assert.match(text, /event: response\.failed\n/);
  const failed = JSON.parse(text.split('event: response.failed\ndata: ')[1].split('\n')[0]);
  assert.equal(failed.response.status, 'failed');
  assert.equal(failed.response.error.code, 'server_error');
  await s.stop();
});
