// The Vercel AI SDK 6 (`ai`) against strata serve and strata gateway, through its three
// providers that speak APIs Strata serves: `@ai-sdk/openai-compatible` (chat completions),
// `@ai-sdk/anthropic` (messages) and `@ai-sdk/openai`'s `.chat(id)` (chat completions; the
// provider's default `openai(id)` speaks the Responses API: ai_sdk_responses.test.mjs). For each
// provider, on a Qwen3-template and a Qwen3.5-template model, served directly and through the
// gateway: generateText and streamText, a tool loop (the model's call, the tool's result sent
// back, an answer), and structured output from a zod schema (generateObject, and streamText with
// Output.object) that must parse. The models are random: tool calls are forced with toolChoice
// (the server constrains the call to the tool's schema), and the structured output is JSON
// because the server constrains decoding to the schema, not because the model knows JSON.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { generateText, streamText, generateObject, tool, stepCountIs, Output } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { z } from 'zod';
import { stopAll, startClientTargets } from './harness.mjs';

globalThis.AI_SDK_LOG_WARNINGS = false;
after(stopAll);

// Started in before(); the tests are declared per target at load time.
const targets = {};
const labels = ['serve, Qwen3 template', 'serve, Qwen3.5 template', 'gateway, Qwen3 template', 'gateway, Qwen3.5 template'];
before(async () => {
  for (const t of await startClientTargets('ai-sdk')) targets[t.label] = t;
});

// provider name -> (target) -> language model
const providers = {
  'openai-compatible': (t) => createOpenAICompatible({ name: 'strata', baseURL: `${t.base}/v1`, apiKey: t.key, supportsStructuredOutputs: true, includeUsage: true })(t.model),
  'anthropic': (t) => createAnthropic({ baseURL: `${t.base}/v1`, apiKey: t.key })(t.model),
  'openai .chat': (t) => createOpenAI({ baseURL: `${t.base}/v1`, apiKey: t.key }).chat(t.model),
};
// The anthropic provider drops `seed` (not an Anthropic field): its runs are not repeatable.
const seeded = (provider) => provider === 'anthropic' ? { temperature: 1 } : { temperature: 1, seed: 3 };
const common = { maxRetries: 0, timeout: 120000 };

const weatherSchema = z.object({ city: z.string().max(16), unit: z.enum(['C', 'F']) });
const weather = tool({
  description: 'The weather in a city',
  inputSchema: weatherSchema,
  execute: async ({ city, unit }) => `18 degrees ${unit} in ${city}`,
});
const personSchema = z.object({ name: z.string().max(12), age: z.number().int().min(0).max(150), mood: z.enum(['happy', 'sad']) });

for (const label of labels) for (const [provider, make] of Object.entries(providers)) {
  const name = `${provider}, ${label}`;

  test(`${name}: generateText and streamText`, async () => {
    const t = targets[label];
    const model = make(t);
    const body = { model, prompt: 'Say hello.', maxOutputTokens: 32, ...seeded(provider), ...common };
    const whole = await generateText(body);
    assert.equal(typeof whole.text, 'string');
    assert.ok(['stop', 'length'].includes(whole.finishReason), whole.finishReason);
    assert.ok(whole.usage.inputTokens > 5, JSON.stringify(whole.usage));
    assert.ok(whole.usage.outputTokens >= 1 && whole.usage.outputTokens <= 32, JSON.stringify(whole.usage));
    assert.equal(whole.response.modelId, t.model);
    // Qwen3.5's template opens a think block: the openai-compatible provider reads the server's
    // reasoning_content as reasoning, and none of it leaks into the text.
    if (t.kind === 'qwen35' && provider === 'openai-compatible') assert.ok(whole.reasoningText?.length > 0, JSON.stringify(whole.reasoning));
    assert.ok(!whole.text.includes('<think>') && !whole.text.includes('</think>'), whole.text);

    const errors = [];
    const stream = streamText({ ...body, onError: ({ error }) => errors.push(error) });
    let text = '';
    for await (const part of stream.textStream) text += part;
    assert.deepEqual(errors, []);
    assert.ok(['stop', 'length'].includes(await stream.finishReason));
    if (provider !== 'anthropic') assert.equal(text, whole.text, 'the same seed streams the same text');
    const usage = await stream.usage;
    assert.ok(usage.inputTokens > 5 && usage.outputTokens >= 1, JSON.stringify(usage));
  });

  test(`${name}: a tool loop (forced call, its result sent back, an answer)`, async () => {
    const t = targets[label];
    const result = await generateText({
      model: make(t), prompt: 'What is the weather in Oslo?', tools: { get_weather: weather },
      maxOutputTokens: 64, ...seeded(provider), ...common, stopWhen: stepCountIs(3),
      // The first step must call the tool, the second must answer.
      prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? { type: 'tool', toolName: 'get_weather' } : 'none' }),
    });
    assert.equal(result.steps.length, 2, JSON.stringify(result.steps.map((s) => s.content)));
    const [call, answer] = result.steps;
    assert.equal(call.finishReason, 'tool-calls');
    assert.equal(call.toolCalls.length, 1);
    assert.equal(call.toolCalls[0].toolName, 'get_weather');
    assert.ok(!call.toolCalls[0].invalid, JSON.stringify(call.toolCalls[0]));
    weatherSchema.parse(call.toolCalls[0].input);
    const output = `18 degrees ${call.toolCalls[0].input.unit} in ${call.toolCalls[0].input.city}`;
    assert.deepEqual(call.toolResults.map((r) => r.output), [output]);
    // The second request carried the call and its result back to the server.
    // (The body is the JSON text or the object, by provider; the result is the message's text,
    // or that text as a JSON string, by provider.)
    const body = answer.request.body;
    const sent = typeof body === 'string' ? body : JSON.stringify(body);
    const quoted = (v) => JSON.stringify(v).slice(1, -1);
    assert.ok(sent.includes(call.toolCalls[0].toolCallId), sent);
    assert.ok(sent.includes(quoted(output)) || sent.includes(quoted(JSON.stringify(output))), sent);
    assert.ok(['stop', 'length'].includes(answer.finishReason), answer.finishReason);
    assert.equal(answer.toolCalls.length, 0);
    assert.equal(typeof result.text, 'string');
  });

  test(`${name}: structured output from a zod schema parses (generateObject, streamText with Output.object)`, async () => {
    const t = targets[label];
    const model = make(t);
    const { object, finishReason } = await generateObject({ model, schema: personSchema, prompt: 'Describe a person.', maxOutputTokens: 300, ...seeded(provider), ...common });
    assert.equal(finishReason, 'stop');
    personSchema.parse(object);

    const schema = z.object({ ok: z.boolean(), digits: z.array(z.number().int().min(0).max(9)).max(3) });
    const stream = streamText({ model, output: Output.object({ schema }), prompt: 'Some digits.', maxOutputTokens: 200, ...seeded(provider), ...common });
    const partials = [];
    for await (const p of stream.partialOutputStream) partials.push(p);
    const final = await stream.output;
    schema.parse(final);
    assert.ok(partials.length >= 1);
    assert.deepEqual(partials.at(-1), final);
  });
}

// The anthropic provider's native structured output: `output_config.format` with the JSON
// schema (what it sends for models known to support it; forced here for Strata's id). The
// provider drops the keywords Anthropic's structured outputs do not take (maxLength, minimum,
// ...) before sending, so a bound only zod knows could not hold: the schema is enums and
// booleans, which the constraint does carry.
const choiceSchema = z.object({ mood: z.enum(['happy', 'sad']), sunny: z.boolean(), unit: z.enum(['C', 'F']) });
for (const label of labels) test(`anthropic, ${label}: structured output through output_config.format`, async () => {
  const t = targets[label];
  const { object, request } = await generateObject({
    model: providers.anthropic(t), schema: choiceSchema, prompt: 'Describe the weather.', maxOutputTokens: 100, temperature: 1, ...common,
    providerOptions: { anthropic: { structuredOutputMode: 'outputFormat' } },
  });
  assert.ok(JSON.stringify(request.body).includes('output_config'), 'the provider sent output_config');
  assert.deepEqual(Object.keys(object).sort(), ['mood', 'sunny', 'unit']);
  choiceSchema.parse(object);
});
