// The clients' Responses API paths against strata serve and strata gateway: the AI SDK's default
// `openai(id)` provider (which speaks POST /v1/responses) for generateText, streamText, a tool
// loop and structured output, and LangChain's ChatOpenAI with `useResponsesApi: true`, on a
// Qwen3-template and a Qwen3.5-template model, directly and through the gateway. The same
// checks as ai_sdk.test.mjs and langchain.test.mjs make on chat completions.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { generateText, streamText, generateObject, tool, stepCountIs } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { ChatOpenAI } from '@langchain/openai';
import { z } from 'zod';
import { stopAll, startClientTargets } from './harness.mjs';

globalThis.AI_SDK_LOG_WARNINGS = false;
after(stopAll);

const targets = {};
const labels = ['serve, Qwen3 template', 'serve, Qwen3.5 template', 'gateway, Qwen3 template', 'gateway, Qwen3.5 template'];
before(async () => {
  for (const t of await startClientTargets('ai-sdk-responses')) targets[t.label] = t;
});

// `openai(id)` is `openai.responses(id)`; store: false as Codex and stateless clients send it.
const responsesModel = (t) => createOpenAI({ baseURL: `${t.base}/v1`, apiKey: t.key })(t.model);
const common = { maxRetries: 0, timeout: 120000, temperature: 1, providerOptions: { openai: { store: false } } };
const weatherSchema = z.object({ city: z.string().max(16), unit: z.enum(['C', 'F']) });
const weather = tool({ description: 'The weather in a city', inputSchema: weatherSchema, execute: async ({ city, unit }) => `18 degrees ${unit} in ${city}` });
const personSchema = z.object({ name: z.string().max(12), age: z.number().int().min(0).max(150), mood: z.enum(['happy', 'sad']) });

for (const label of labels) {
  test(`openai(id) on /v1/responses, ${label}: generateText and streamText`, async () => {
    const t = targets[label];
    const body = { model: responsesModel(t), prompt: 'Say hello.', maxOutputTokens: 32, ...common };
    const whole = await generateText(body);
    assert.equal(typeof whole.text, 'string');
    assert.ok(['stop', 'length'].includes(whole.finishReason), whole.finishReason);
    assert.ok(whole.usage.inputTokens > 5 && whole.usage.outputTokens >= 1, JSON.stringify(whole.usage));
    const errors = [];
    const stream = streamText({ ...body, onError: ({ error }) => errors.push(error) });
    let text = '';
    for await (const part of stream.textStream) text += part;
    assert.deepEqual(errors, []);
    assert.equal(typeof text, 'string');
    assert.ok(['stop', 'length'].includes(await stream.finishReason));
  });

  test(`openai(id) on /v1/responses, ${label}: a tool loop`, async () => {
    const t = targets[label];
    const result = await generateText({
      model: responsesModel(t), prompt: 'What is the weather in Oslo?', tools: { get_weather: weather }, maxOutputTokens: 64, ...common,
      stopWhen: stepCountIs(3), prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? { type: 'tool', toolName: 'get_weather' } : 'none' }),
    });
    assert.equal(result.steps.length, 2);
    const [call, answer] = result.steps;
    assert.equal(call.finishReason, 'tool-calls');
    assert.equal(call.toolCalls[0].toolName, 'get_weather');
    weatherSchema.parse(call.toolCalls[0].input);
    assert.ok(JSON.stringify(answer.request.body).includes(call.toolCalls[0].toolCallId));
    assert.equal(answer.toolCalls.length, 0);
  });

  test(`openai(id) on /v1/responses, ${label}: structured output (generateObject)`, async () => {
    const t = targets[label];
    const { object } = await generateObject({ model: responsesModel(t), schema: personSchema, prompt: 'Describe a person.', maxOutputTokens: 300, ...common });
    personSchema.parse(object);
  });

  test(`ChatOpenAI useResponsesApi, ${label}: invoke, stream, withStructuredOutput`, async () => {
    const t = targets[label];
    const model = new ChatOpenAI({ model: t.model, apiKey: t.key, configuration: { baseURL: `${t.base}/v1` }, useResponsesApi: true, maxRetries: 0, temperature: 1, maxTokens: 64 });
    const reply = await model.invoke('Say hello.');
    assert.equal(reply.getType(), 'ai');
    assert.ok(reply.usage_metadata.input_tokens > 5);
    let chunks = 0;
    for await (const chunk of await model.stream('Say hello.')) { assert.equal(chunk.getType(), 'ai'); chunks += 1; }
    assert.ok(chunks >= 1);
    const parsed = await model.withStructuredOutput(personSchema, { method: 'jsonSchema' }).invoke('Describe a person.');
    personSchema.parse(parsed);
  });
}
