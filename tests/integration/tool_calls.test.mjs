// Tool calls cut by max_tokens, forced calls on both call formats, Anthropic structured output,
// the probe endpoints and the smaller API details of issue #29, through the official openai and
// @anthropic-ai/sdk clients (and raw HTTP where a client has no method for a route), directly
// and through a gateway.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { jsonSchemaOutputFormat } from '@anthropic-ai/sdk/helpers/json-schema';
import { stopAll, startGateway, startServer, model, strataBin } from './harness.mjs';

const name = 'strata-tiny';
const key = 'sk-probe';
let hermes, xml, keyed, small, gw;  // servers: Qwen3 template, Qwen3.5 template, with a key, a 256-token context

before(async () => {
  [hermes, xml, keyed, small] = await Promise.all([
    startServer({ logName: 'calls-hermes' }),
    startServer({ kind: 'qwen35', logName: 'calls-xml' }),
    startServer({ args: ['--api-key', key], logName: 'calls-keyed' }),
    startServer({ args: ['--ctx', '256'], logName: 'calls-small' }),
  ]);
  gw = await startGateway(['--upstream', keyed.base, '--upstream-key', key, '--listen', '127.0.0.1:0', '--api-key', 'sk-client',
    '--store', '', '--lane-wait', '3'], { logName: 'calls-gw' });
});
after(stopAll);

const openai = (s, apiKey = 'unused') => new OpenAI({ baseURL: `${s.base}/v1`, apiKey, maxRetries: 0 });
const anthropic = (s, apiKey = 'unused') => new Anthropic({ baseURL: s.base, apiKey, maxRetries: 0 });

// Bounded arguments (short strings, bounded integers), so the whole call is a few dozen tokens.
const writeSchema = {
  type: 'object',
  properties: {
    path: { type: 'string', maxLength: 6 },
    mode: { type: 'integer', minimum: 0, maximum: 777 },
    append: { type: 'boolean' },
  },
  required: ['path', 'mode', 'append'],
};
const clockSchema = { type: 'object', properties: { zone: { type: 'string', enum: ['UTC', 'CET'] } }, required: ['zone'] };
const ask = 'Write the file.';

// ---- a call cut at every max_tokens: stream == whole ------------------------------------------

// An OpenAI answer reduced to what both forms must agree on.
function openaiWhole(r) {
  const c = r.choices[0];
  return {
    content: c.message.content ?? '',
    calls: (c.message.tool_calls ?? []).map((t) => ({ name: t.function.name, arguments: t.function.arguments })),
    finish: c.finish_reason,
  };
}
async function openaiStreamed(client, body) {
  const out = { content: '', calls: [], finish: null };
  for await (const chunk of await client.chat.completions.create({ ...body, stream: true })) {
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.delta?.content) out.content += c.delta.content;
    for (const t of c.delta?.tool_calls ?? []) {
      if (!out.calls[t.index]) out.calls[t.index] = { name: '', arguments: '' };
      if (t.function?.name) out.calls[t.index].name += t.function.name;
      if (t.function?.arguments) out.calls[t.index].arguments += t.function.arguments;
    }
    if (c.finish_reason) out.finish = c.finish_reason;
  }
  return out;
}
function anthropicWhole(m) {
  return {
    blocks: m.content.map((b) => (b.type === 'text' ? { type: 'text', text: b.text } : { type: b.type, name: b.name, input: b.input })),
    stop: m.stop_reason,
  };
}
// From the raw events (not the SDK's accumulator), so what the wire says is what is compared.
async function anthropicStreamed(client, body) {
  const blocks = [];
  const json = [];
  let stop = null, start = null, delta = null;
  for await (const e of await client.messages.create({ ...body, stream: true })) {
    if (e.type === 'message_start') start = e.message.usage;
    if (e.type === 'content_block_start') {
      blocks[e.index] = e.content_block.type === 'text' ? { type: 'text', text: '' } : { type: e.content_block.type, name: e.content_block.name };
      json[e.index] = '';
    }
    if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') blocks[e.index].text += e.delta.text;
    if (e.type === 'content_block_delta' && e.delta.type === 'input_json_delta') json[e.index] += e.delta.partial_json;
    if (e.type === 'content_block_stop' && blocks[e.index].type === 'tool_use') blocks[e.index].input = JSON.parse(json[e.index] || '{}');
    if (e.type === 'message_delta') { stop = e.delta.stop_reason; delta = e.usage; }
  }
  return { blocks, stop, start, delta };
}

// A Responses answer reduced the same way: output text, function calls, status and why it ended;
// streamed, from the raw events (output_item.added names a call, argument deltas add up).
function responsesWhole(r) {
  return {
    text: r.output.filter((i) => i.type === 'message').flatMap((i) => i.content.map((c) => c.text ?? '')).join(''),
    calls: r.output.filter((i) => i.type === 'function_call').map((i) => ({ name: i.name, arguments: i.arguments })),
    status: r.status,
    reason: r.incomplete_details?.reason ?? null,
  };
}
async function responsesStreamed(client, body) {
  const calls = new Map();
  let text = '', final = null;
  for await (const e of await client.responses.create({ ...body, stream: true })) {
    if (e.type === 'response.output_item.added' && e.item.type === 'function_call') calls.set(e.output_index, { name: e.item.name, arguments: '' });
    if (e.type === 'response.function_call_arguments.delta') calls.get(e.output_index).arguments += e.delta;
    if (e.type === 'response.output_text.delta') text += e.delta;
    if (e.type === 'response.completed' || e.type === 'response.incomplete') final = e.response;
  }
  assert.ok(final, 'the stream ends with response.completed or response.incomplete');
  const streamed = { text, calls: [...calls.values()], status: final.status, reason: final.incomplete_details?.reason ?? null };
  // The final response the stream carries is the whole answer too.
  assert.deepEqual(responsesWhole(final), streamed, 'the stream\'s final response = its events');
  return streamed;
}

// A value cut short is kept as far as it got: a string, or for a typed value cut before it was
// JSON (`tr` of `true`) its text as a string.
const asText = (v) => (typeof v === 'string' ? v : JSON.stringify(v));

// Directly on both call formats, and through a gateway (its lane the Qwen3 one with a key).
for (const [label, server, apiKey] of [['Qwen3 (JSON calls)', () => hermes, 'unused'], ['Qwen3.5 (XML calls)', () => xml, 'unused'],
  ['Qwen3 (JSON calls) through a gateway', () => gw, 'sk-client']]) {
  test(`${label}: a forced call cut at every max_tokens is a call with truncated arguments, streamed as whole (chat, messages, responses)`, async () => {
    const s = server();
    const oa = openai(s, apiKey), an = anthropic(s, apiKey);
    const tools = [{ type: 'function', function: { name: 'write_file', parameters: writeSchema } }];
    const atools = [{ name: 'write_file', input_schema: writeSchema }];
    const rtools = [{ type: 'function', name: 'write_file', parameters: writeSchema }];
    const obody = (max_tokens) => ({ model: name, messages: [{ role: 'user', content: ask }], tools, tool_choice: { type: 'function', function: { name: 'write_file' } }, max_tokens, temperature: 0 });
    const abody = (max_tokens) => ({ model: name, messages: [{ role: 'user', content: ask }], tools: atools, tool_choice: { type: 'tool', name: 'write_file' }, max_tokens, temperature: 0 });
    const rbody = (max_output_tokens) => ({ model: name, input: ask, tools: rtools, tool_choice: { type: 'function', name: 'write_file' }, max_output_tokens, temperature: 0 });

    const full = await oa.chat.completions.create(obody(200));
    assert.equal(full.choices[0].finish_reason, 'tool_calls');
    const fullCall = full.choices[0].message.tool_calls[0].function;
    const fullArgs = JSON.parse(fullCall.arguments);
    assert.deepEqual(Object.keys(fullArgs).sort(), ['append', 'mode', 'path']);
    const length = full.usage.completion_tokens;
    assert.ok(length >= 8 && length <= 80, `the whole call took ${length} tokens`);

    let calls = 0;
    for (let k = 1; k <= length; ++k) {
      const where = `max_tokens ${k} of ${length}`;
      const [ow, os, aw, as, rw, rs] = await Promise.all([
        oa.chat.completions.create(obody(k)).then(openaiWhole), openaiStreamed(oa, obody(k)),
        an.messages.create(abody(k)).then(anthropicWhole), anthropicStreamed(an, abody(k)),
        oa.responses.create(rbody(k)).then(responsesWhole), responsesStreamed(oa, rbody(k)),
      ]);
      assert.deepEqual(os, ow, `${where}: OpenAI stream = whole`);
      assert.deepEqual(rs, rw, `${where}: Responses stream = whole`);
      // The Responses answer is the chat answer's call in its own shape, never markup as text.
      assert.equal(rw.text, '', `${where}: ${rw.text}`);
      assert.deepEqual(rw.calls, ow.calls, `${where}: Responses calls = chat calls`);
      assert.deepEqual([rw.status, rw.reason], k < length ? ['incomplete', 'max_output_tokens'] : ['completed', null], where);
      assert.deepEqual(as.blocks, aw.blocks, `${where}: Anthropic stream = whole`);
      assert.equal(as.stop, aw.stop, `${where}: Anthropic stop reason`);
      // Never markup as text.
      assert.equal(ow.content, '', `${where}: ${ow.content}`);
      // (An answer with nothing else has its one empty text block.)
      assert.ok(aw.blocks.every((b) => b.type === 'tool_use' || (b.type === 'text' && b.text === '')), `${where}: ${JSON.stringify(aw.blocks)}`);
      const uses = aw.blocks.filter((b) => b.type === 'tool_use');
      const cut = k < length;
      assert.equal(ow.finish, cut ? 'length' : 'tool_calls', where);
      assert.equal(aw.stop, cut ? 'max_tokens' : 'tool_use', where);
      if (ow.calls.length === 0) {
        // Cut before the name was complete: no call at all.
        assert.equal(uses.length, 0, where);
        assert.ok(calls === 0, `${where}: a call vanished after an earlier cut had one`);
        continue;
      }
      ++calls;
      assert.equal(ow.calls.length, 1, where);
      assert.equal(ow.calls[0].name, 'write_file', where);
      // The arguments as far as they got: a JSON call's text is the start of the whole call's;
      // an XML call's parameters so far are closed into an object.
      if (label.includes('JSON')) {
        assert.ok(fullCall.arguments.startsWith(ow.calls[0].arguments), `${where}: ${ow.calls[0].arguments}`);
      } else {
        const partial = JSON.parse(ow.calls[0].arguments);
        for (const [k2, v] of Object.entries(partial)) {
          assert.ok(k2 in fullArgs, `${where}: ${k2}`);
          if (typeof v === 'string') assert.ok(asText(fullArgs[k2]).startsWith(v), `${where}: ${k2}=${v}`);
        }
      }
      if (!cut) assert.deepEqual(JSON.parse(ow.calls[0].arguments), fullArgs, where);
      assert.equal(uses.length, 1, where);
      assert.equal(uses[0].name, 'write_file', where);
      for (const [k2, v] of Object.entries(uses[0].input)) {
        assert.ok(k2 in fullArgs, `${where}: ${k2}`);
        if (typeof v === 'string') assert.ok(asText(fullArgs[k2]).startsWith(v), `${where}: ${k2}=${v}`);
      }
    }
    assert.ok(calls > length / 2, `a call from early on: ${calls} of ${length} cuts had one`);
  });
}

// ---- forced calls on the XML-call template ------------------------------------------------------

test('Qwen3.5 (XML calls): required/any calls an allowed tool; a named choice gets schema-valid arguments', async () => {
  const oa = openai(xml), an = anthropic(xml);
  const tools = [
    { type: 'function', function: { name: 'write_file', parameters: writeSchema } },
    { type: 'function', function: { name: 'get_time', parameters: clockSchema } },
  ];
  const atools = tools.map((t) => ({ name: t.function.name, input_schema: t.function.parameters }));
  const valid = (name, args) => {
    if (name === 'get_time') return ['UTC', 'CET'].includes(args.zone) && Object.keys(args).length === 1;
    return typeof args.path === 'string' && [...args.path].length <= 6 && Number.isInteger(args.mode) && args.mode >= 0 &&
      args.mode <= 777 && typeof args.append === 'boolean' && Object.keys(args).length === 3;
  };
  const seen = new Set();
  for (let seed = 1; seed <= 6; ++seed) {
    const r = await oa.chat.completions.create({ model: name, messages: [{ role: 'user', content: ask }], tools, tool_choice: 'required', max_tokens: 200, temperature: 1, seed });
    const call = r.choices[0].message.tool_calls[0].function;
    assert.ok(['write_file', 'get_time'].includes(call.name), call.name);
    assert.ok(valid(call.name, JSON.parse(call.arguments)), call.arguments);
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    seen.add(call.name);
    const m = await an.messages.create({ model: name, messages: [{ role: 'user', content: ask }], tools: atools, tool_choice: { type: 'any' }, max_tokens: 200, temperature: 1, seed });
    const use = m.content.find((b) => b.type === 'tool_use');
    assert.ok(use && valid(use.name, use.input), JSON.stringify(m.content));
    assert.equal(m.stop_reason, 'tool_use');
    const named = await an.messages.create({ model: name, messages: [{ role: 'user', content: ask }], tools: atools, tool_choice: { type: 'tool', name: 'get_time' }, max_tokens: 200, temperature: 1, seed });
    const t = named.content.find((b) => b.type === 'tool_use');
    assert.equal(t.name, 'get_time');
    assert.ok(valid('get_time', t.input), JSON.stringify(t.input));
  }
  assert.ok(seen.size >= 1);
});

test('Qwen3.5 (XML calls): a tool name the call format cannot carry is a clean 400 (and fine on the JSON format)', async () => {
  for (const bad of ['a>b', 'line\nbreak', 'x<y', ' padded']) {
    const tools = [{ type: 'function', function: { name: bad, parameters: clockSchema } }];
    const err = await openai(xml).chat.completions.create({ model: name, messages: [{ role: 'user', content: ask }], tools, tool_choice: 'required', max_tokens: 20 }).catch((e) => e);
    assert.equal(err.status, 400, JSON.stringify(bad));
    assert.match(err.error.message, /tools\[0\]\.function\.name: .*<function=NAME>/);
    const aerr = await anthropic(xml).messages.create({ model: name, messages: [{ role: 'user', content: ask }], tools: [{ name: bad, input_schema: clockSchema }], max_tokens: 20 }).catch((e) => e);
    assert.equal(aerr.status, 400);
    assert.equal(aerr.error.error.type, 'invalid_request_error');
    assert.match(aerr.error.error.message, /tools\.0\.name/);
  }
  const r = await openai(hermes).chat.completions.create({ model: name, messages: [{ role: 'user', content: ask }], tools: [{ type: 'function', function: { name: 'a>b', parameters: clockSchema } }], tool_choice: 'required', max_tokens: 60, temperature: 0 });
  assert.equal(r.choices[0].message.tool_calls[0].function.name, 'a>b');
});

// ---- Anthropic structured output ----------------------------------------------------------------

const titleSchema = {
  type: 'object',
  properties: { title: { type: 'string', maxLength: 24 }, words: { type: 'integer', minimum: 1, maximum: 9 } },
  required: ['title', 'words'],
  additionalProperties: false,
};
const validTitle = (o) => o && typeof o.title === 'string' && [...o.title].length <= 24 && Number.isInteger(o.words) &&
  o.words >= 1 && o.words <= 9 && Object.keys(o).length === 2;

// The SDK's helper moves keywords Anthropic's API does not take (maxLength, minimum, ...) into
// descriptions unless told not to: kept here, so the bounds are enforced and checked.
const bounded = () => jsonSchemaOutputFormat(titleSchema, { transform: false });
const moodSchema = {
  type: 'object',
  properties: { mood: { type: 'string', enum: ['calm', 'busy', 'lost'] }, done: { type: 'boolean' }, score: { type: 'integer', minimum: 0 } },
  required: ['mood', 'done', 'score'],
  additionalProperties: false,
};

test('Anthropic output_config.format: messages.parse() and the stream helper get schema-valid JSON', async () => {
  // The helper's default transform (bounds moved into descriptions): still the schema's shape.
  const t = await anthropic(hermes).messages.parse({
    model: name, max_tokens: 200, temperature: 1, seed: 2, messages: [{ role: 'user', content: 'How is it going?' }],
    output_config: { format: jsonSchemaOutputFormat(moodSchema) },
  });
  assert.ok(['calm', 'busy', 'lost'].includes(t.parsed_output.mood) && typeof t.parsed_output.done === 'boolean' &&
    Number.isInteger(t.parsed_output.score) && Object.keys(t.parsed_output).length === 3, JSON.stringify(t.content));
  for (const s of [hermes, xml]) {
    const an = anthropic(s);
    for (let seed = 1; seed <= 3; ++seed) {
      const m = await an.messages.parse({
        model: name, max_tokens: 200, temperature: 1, seed, messages: [{ role: 'user', content: 'Name this session.' }],
        output_config: { format: bounded() },
      });
      assert.ok(validTitle(m.parsed_output), JSON.stringify(m.content));
      assert.equal(m.stop_reason, 'end_turn');
    }
    const stream = an.messages.stream({
      model: name, max_tokens: 200, temperature: 1, seed: 9, messages: [{ role: 'user', content: 'Name this session.' }],
      output_config: { format: bounded() },
    });
    const final = await stream.finalMessage();
    assert.ok(validTitle(final.parsed_output), JSON.stringify(final.content));
  }
});

test('Anthropic beta output_format (raw, as older clients send it) is constrained the same way; bad schemas are 400s', async () => {
  const post = (body) => fetch(`${hermes.base}/v1/messages`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', 'anthropic-beta': 'structured-outputs-2025-11-13' },
    body: JSON.stringify({ model: name, max_tokens: 200, temperature: 1, seed: 4, messages: [{ role: 'user', content: 'Name this session.' }], ...body }),
  });
  const r = await post({ output_format: { type: 'json_schema', schema: titleSchema } });
  assert.equal(r.status, 200);
  const m = await r.json();
  assert.ok(validTitle(JSON.parse(m.content[0].text)), m.content[0].text);
  // The beta SDK's own path sends output_config.format.
  const b = await anthropic(hermes).beta.messages.parse({
    model: name, max_tokens: 200, temperature: 1, seed: 4, messages: [{ role: 'user', content: 'Name this session.' }],
    output_format: bounded(), betas: ['structured-outputs-2025-11-13'],
  });
  assert.ok(validTitle(b.parsed_output), JSON.stringify(b.content));
  for (const [body, re] of [
    [{ output_config: { format: { type: 'json_schema', schema: { type: 'object', patternProperties: {} } } } }, /output_config\.format\.schema: .*patternProperties/],
    [{ output_config: { format: { type: 'xml' } } }, /output_config\.format\.type: "xml" is not json_schema/],
    [{ output_format: { type: 'json_schema' } }, /output_format\.schema: Field required/],
    [{ output_config: { format: { type: 'json_schema', schema: titleSchema } }, output_format: { type: 'json_schema', schema: { type: 'object' } } }, /differs from output_config\.format/],
  ]) {
    const e = await post(body);
    assert.equal(e.status, 400, JSON.stringify(body));
    const j = await e.json();
    assert.equal(j.type, 'error');
    assert.match(j.error.message, re);
  }
  // output_config without a format (effort only, as Claude Code sends it) is not structured output.
  const plain = await post({ output_config: { effort: 'low' }, max_tokens: 5 });
  assert.equal(plain.status, 200);
});

// ---- message_start reports the prefix-cache split -----------------------------------------------

test('Anthropic message_start reports input_tokens and cache_read_input_tokens as message_delta does', async () => {
  const an = anthropic(hermes);
  const system = 'You are a careful assistant. '.repeat(40);
  const body = { model: name, max_tokens: 4, temperature: 0, system, messages: [{ role: 'user', content: 'Hello there.' }] };
  const first = await anthropicStreamed(an, body);
  assert.equal(first.start.input_tokens, first.delta.input_tokens);
  const again = await anthropicStreamed(an, body);
  assert.ok(again.delta.cache_read_input_tokens > 0, JSON.stringify(again.delta));
  assert.equal(again.start.cache_read_input_tokens, again.delta.cache_read_input_tokens);
  assert.equal(again.start.input_tokens, again.delta.input_tokens);
  assert.equal(again.start.input_tokens + again.start.cache_read_input_tokens, first.start.input_tokens + first.start.cache_read_input_tokens);
});

// ---- probes ------------------------------------------------------------------------------------

const ids = (text) => JSON.parse(execFileSync(strataBin, ['tokenize', '-m', model('qwen3'), '--no-special'], { input: text }).toString());
async function call(base, path, body, apiKey = key, method = 'POST') {
  const r = await fetch(`${base}${path}`, {
    method, headers: { 'content-type': 'application/json', ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : null, type: r.headers.get('content-type') };
}

for (const [label, base, apiKey] of [['serve', () => keyed.base, key], ['the gateway', () => gw.base, 'sk-client']]) {
  test(`probes on ${label}: /tokenize, /detokenize, /apply-template, input_tokens, count_tokens`, async () => {
    const b = base();
    const text = 'Hello world, héllo <|im_end|>';
    const t = await call(b, '/tokenize', { content: text }, apiKey);
    assert.equal(t.status, 200);
    const special = await call(b, '/tokenize', { content: text, parse_special: false }, apiKey);
    assert.deepEqual(special.body.tokens, ids(text));
    assert.ok(t.body.tokens.length < special.body.tokens.length);  // <|im_end|> is one token when parsed
    const pieces = await call(b, '/tokenize', { content: 'héllo', with_pieces: true, add_special: true }, apiKey);
    assert.ok(pieces.body.tokens.every((p) => Number.isInteger(p.id) && (typeof p.piece === 'string' || Array.isArray(p.piece))));
    assert.equal(pieces.body.tokens.map((p) => p.piece).join(''), 'héllo');
    const d = await call(b, '/detokenize', { tokens: t.body.tokens }, apiKey);
    assert.deepEqual(d.body, { content: text });

    const chat = { model: name, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Say hello.' }], max_tokens: 3, temperature: 0 };
    const p = await call(b, '/apply-template', chat, apiKey);
    assert.equal(p.status, 200);
    assert.ok(p.body.prompt.startsWith('<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n'), p.body.prompt);
    const n = await call(b, '/v1/chat/completions/input_tokens', chat, apiKey);
    assert.equal(n.body.object, 'response.input_tokens');
    const promptIds = await call(b, '/tokenize', { content: p.body.prompt }, apiKey);
    assert.equal(n.body.input_tokens, promptIds.body.tokens.length);
    const r = await openai({ base: b }, apiKey).chat.completions.create(chat);
    assert.equal(r.usage.prompt_tokens, n.body.input_tokens);
    const count = await anthropic({ base: b }, apiKey).messages.countTokens({ model: name, messages: [{ role: 'user', content: 'Say hello.' }] });
    const m = await anthropic({ base: b }, apiKey).messages.create({ model: name, max_tokens: 2, messages: [{ role: 'user', content: 'Say hello.' }] });
    assert.equal(count.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens);

    // Bad input: OpenAI-shaped 4xx naming the field; no key: 401.
    for (const [path, body, re] of [
      ['/tokenize', {}, /content: missing/],
      ['/tokenize', { content: 5 }, /content: expected a string/],
      ['/tokenize', { content: 'x', with_pieces: 'yes' }, /with_pieces: expected a boolean/],
      ['/detokenize', { tokens: [1, -1] }, /tokens\[1\]: -1 is not in the vocabulary/],
      ['/detokenize', { tokens: [1e12] }, /tokens\[0\]/],
      ['/detokenize', { tokens: 'abc' }, /tokens: expected an array/],
      ['/detokenize', '[1,2', /not valid JSON/],
      ['/apply-template', { messages: [] }, /messages: must not be empty/],
      ['/v1/chat/completions/input_tokens', { messages: [{ role: 'wizard', content: 'x' }] }, /unknown role/],
    ]) {
      const e = await call(b, path, body, apiKey);
      assert.equal(e.status, 400, `${path} ${JSON.stringify(body)}`);
      assert.match(e.body.error.message, re);
      assert.equal(e.body.error.type, 'invalid_request_error');
    }
    for (const path of ['/tokenize', '/detokenize', '/apply-template', '/v1/chat/completions/input_tokens']) {
      const e = await call(b, path, { content: 'x', tokens: [1], messages: [{ role: 'user', content: 'x' }] }, null);
      assert.equal(e.status, 401, path);
      const wrong = await call(b, path, { content: 'x' }, 'sk-wrong');
      assert.equal(wrong.status, 401, path);
    }
  });

  test(`HEAD / and GET / answer 200 without a key on ${label}`, async () => {
    const head = await fetch(`${base()}/`, { method: 'HEAD' });
    assert.equal(head.status, 200);
    const get = await fetch(`${base()}/`);
    assert.equal(get.status, 200);
    const j = await get.json();
    assert.deepEqual(Object.keys(j), ['server']);
    // Everything else still wants the key.
    assert.equal((await fetch(`${base()}/v1/models`)).status, 401);
  });
}

// ---- a prompt that cannot fit -------------------------------------------------------------------

test('a prompt that cannot fit says "prompt is too long: N tokens > M maximum" directly and through a gateway, as Claude Code reads it', async () => {
  const claudeCode = /prompt is too long[^0-9]*(\d+)\s*tokens?\s*>\s*(\d+)/i;  // Claude Code's own pattern
  const big = 'lorem ipsum dolor sit amet '.repeat(200);
  const body = { model: name, max_tokens: 16, system: big, messages: [{ role: 'user', content: 'Summarise.' }] };
  const direct = await anthropic(small).messages.create(body).catch((e) => e);
  assert.equal(direct.status, 400);
  const [, n, m] = direct.error.error.message.match(claudeCode);
  assert.ok(Number(n) > Number(m));
  assert.equal(direct.error.error.message, `prompt is too long: ${n} tokens > ${m} maximum`);
  // Through a gateway, without and with its window guard (which abridges what it can first: the
  // system prompt stays verbatim, so this one cannot fit either way).
  for (const guard of [['--no-long-context'], ['--store', '']]) {
    const front = await startGateway(['--upstream', small.base, '--listen', '127.0.0.1:0', ...guard, '--lane-wait', '3'], { logName: 'calls-gw-small' });
    const e = await anthropic(front).messages.create(body).catch((x) => x);
    assert.equal(e.status, 400, guard.join(' '));
    assert.equal(e.error.type, 'error');
    assert.equal(e.error.error.type, 'invalid_request_error');
    assert.equal(e.error.error.message, direct.error.error.message, guard.join(' '));
    const oe = await openai(front).chat.completions.create({ model: name, max_tokens: 16, messages: [{ role: 'system', content: big }, { role: 'user', content: 'Summarise.' }] }).catch((x) => x);
    assert.equal(oe.status, 400);
    assert.match(oe.error.message, claudeCode);
    await front.stop();
  }
});
