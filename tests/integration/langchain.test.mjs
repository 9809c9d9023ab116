// LangChain.js 1.x (`@langchain/openai`'s ChatOpenAI on chat completions, `@langchain/anthropic`'s
// ChatAnthropic on messages) against strata serve and strata gateway, on a Qwen3-template and a
// Qwen3.5-template model: invoke, stream (the chunks add up to the answer), a bindTools tool loop
// (a forced call, a ToolMessage with its result, an answer) and withStructuredOutput with a zod
// schema by each method the class offers (ChatOpenAI: jsonSchema and functionCalling;
// ChatAnthropic: functionCalling, and jsonSchema, which sends `output_config.format`). The models
// are random: what makes calls and JSON valid is the server's constrained decoding.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { ChatOpenAI } from '@langchain/openai';
import { ChatAnthropic } from '@langchain/anthropic';
import { HumanMessage, ToolMessage } from '@langchain/core/messages';
import { tool } from '@langchain/core/tools';
import { z } from 'zod';
import { stopAll, startClientTargets } from './harness.mjs';

after(stopAll);

const targets = {};
const labels = ['serve, Qwen3 template', 'serve, Qwen3.5 template', 'gateway, Qwen3 template', 'gateway, Qwen3.5 template'];
before(async () => {
  for (const t of await startClientTargets('langchain')) targets[t.label] = t;
});

const classes = {
  ChatOpenAI: (t, extra = {}) => new ChatOpenAI({ model: t.model, apiKey: t.key, configuration: { baseURL: `${t.base}/v1` }, maxRetries: 0, timeout: 120000, temperature: 1, maxTokens: 64, ...extra }),
  ChatAnthropic: (t, extra = {}) => new ChatAnthropic({ model: t.model, apiKey: t.key, anthropicApiUrl: t.base, maxRetries: 0, temperature: 1, maxTokens: 64, ...extra }),
};
const structuredMethods = { ChatOpenAI: ['jsonSchema', 'functionCalling'], ChatAnthropic: ['functionCalling', 'jsonSchema'] };

const weatherSchema = z.object({ city: z.string().max(16), unit: z.enum(['C', 'F']) });
const getWeather = tool(async ({ city, unit }) => `18 degrees ${unit} in ${city}`, { name: 'get_weather', description: 'The weather in a city', schema: weatherSchema });
const personSchema = z.object({ name: z.string().max(12), age: z.number().int().min(0).max(150), mood: z.enum(['happy', 'sad']) });
const flagsSchema = z.object({ sunny: z.boolean(), windy: z.boolean(), cold: z.boolean() });
const text = (content) => typeof content === 'string' ? content : content.filter((b) => b.type === 'text').map((b) => b.text).join('');

for (const label of labels) for (const [cls, make] of Object.entries(classes)) {
  const name = `${cls}, ${label}`;

  test(`${name}: invoke and stream`, async () => {
    const model = make(targets[label]);
    const reply = await model.invoke([new HumanMessage('Say hello.')]);
    assert.equal(reply.getType(), 'ai');
    assert.equal(typeof text(reply.content), 'string');
    assert.ok(reply.usage_metadata.input_tokens > 5, JSON.stringify(reply.usage_metadata));
    assert.ok(reply.usage_metadata.output_tokens >= 1 && reply.usage_metadata.output_tokens <= 64);
    assert.ok(!text(reply.content).includes('</think>'));

    let sum, chunks = 0;
    for await (const chunk of await model.stream('Say hello.')) { sum = sum ? sum.concat(chunk) : chunk; chunks += 1; }
    assert.ok(chunks >= 1);
    assert.equal(sum.getType(), 'ai');
    assert.equal(typeof text(sum.content), 'string');
    assert.ok(sum.usage_metadata?.output_tokens >= 1, JSON.stringify(sum.usage_metadata));
  });

  test(`${name}: bindTools tool loop (forced call, ToolMessage, answer)`, async () => {
    const model = make(targets[label]);
    const question = new HumanMessage('What is the weather in Oslo?');
    const caller = model.bindTools([getWeather], { tool_choice: 'get_weather' });
    const call = await caller.invoke([question]);
    assert.equal(call.tool_calls?.length, 1, JSON.stringify(call.content));
    assert.equal(call.tool_calls[0].name, 'get_weather');
    weatherSchema.parse(call.tool_calls[0].args);
    assert.ok(call.tool_calls[0].id);
    const result = await getWeather.invoke(call.tool_calls[0]);
    assert.ok(result instanceof ToolMessage);
    assert.equal(result.tool_call_id, call.tool_calls[0].id);
    // The whole exchange goes back with the tools still bound; the model answers in text.
    const answerer = model.bindTools([getWeather], { tool_choice: 'none' });
    const answer = await answerer.invoke([question, call, result]);
    assert.equal(answer.getType(), 'ai');
    assert.deepEqual(answer.tool_calls ?? [], []);
    assert.equal(typeof text(answer.content), 'string');
    const bare = await answerer.invoke([question]);
    assert.ok(answer.usage_metadata.input_tokens > bare.usage_metadata.input_tokens + 10,
      `the call and its result were sent: ${answer.usage_metadata.input_tokens} prompt tokens, ${bare.usage_metadata.input_tokens} without them`);
  });

  for (const method of structuredMethods[cls]) test(`${name}: withStructuredOutput (${method})`, async () => {
    const model = make(targets[label], { maxTokens: 300 });
    // ChatAnthropic's jsonSchema method (output_config.format) moves every keyword but the types
    // and the object structure into descriptions (maxLength, minimum, even enum): only a
    // schema of booleans stays bounded for a random model.
    const schema = cls === 'ChatAnthropic' && method === 'jsonSchema' ? flagsSchema : personSchema;
    const structured = model.withStructuredOutput(schema, { method, includeRaw: true });
    const { parsed, raw } = await structured.invoke('Describe a person.');
    assert.ok(parsed, `nothing parsed from ${JSON.stringify(raw.content)} ${JSON.stringify(raw.tool_calls)}`);
    schema.parse(parsed);
  });
}
