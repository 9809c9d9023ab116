// The Claude Code CLI (`claude -p ... --output-format json`) completes a turn against strata
// serve: ANTHROPIC_BASE_URL points at the server, non-essential traffic is off, and the tiny test
// model has a context large enough for Claude Code's own prompt (~19K tokens of system prompt
// and tool definitions). The model is random, so the answer is noise; what is tested is that the
// real client accepts every byte of the exchange and finishes the turn without an error, directly
// and through strata gateway. Both template families: Qwen3's, and Qwen3.5's, which raises on the
// system entries Claude Code puts inside `messages` unless the server merges them into the
// leading system message.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stopAll, startGateway, startServer } from './harness.mjs';

const here = dirname(fileURLToPath(import.meta.url));
let server;
after(stopAll);

// Runs `claude -p` against `base` with `key`; resolves its parsed JSON result after checking
// that it succeeded.
async function claudeTurn(base, key, home, serverLog) {
  const env = {
    PATH: process.env.PATH,
    HOME: home,
    ANTHROPIC_BASE_URL: base,
    ANTHROPIC_API_KEY: key,
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    DISABLE_TELEMETRY: '1',
    DISABLE_AUTOUPDATER: '1',
    CLAUDE_CODE_MAX_OUTPUT_TOKENS: '256',
  };
  const bin = join(here, 'node_modules/.bin/claude');
  const { stdout, stderr, code } = await new Promise((resolve) => {
    execFile(bin, ['-p', 'Say hello in one word.', '--output-format', 'json', '--model', 'strata-tiny'], { env, cwd: home, timeout: 840000, maxBuffer: 16 << 20 },
      (err, stdout, stderr) => resolve({ stdout, stderr, code: err ? (err.code ?? err.signal) : 0 }));
  });
  assert.equal(code, 0, `claude exited with ${code}\nstdout: ${stdout}\nstderr: ${stderr}\nserver log:\n${serverLog().slice(-4000)}`);
  const result = JSON.parse(stdout);
  assert.equal(result.type, 'result');
  assert.equal(result.subtype, 'success');
  assert.equal(result.is_error, false, stdout);
  assert.equal(typeof result.result, 'string');
  assert.ok(result.usage.input_tokens + result.usage.cache_read_input_tokens > 10000, 'Claude Code sent its full prompt');
  return result;
}

// Directly, then through a quick-start gateway in front of the same server (its own key; the
// lane's key as --upstream-key): the second turn's prompt is mostly in the prefix cache.
for (const kind of ['qwen3', 'qwen35-eos']) test(`claude -p completes a turn against strata serve and through strata gateway (${kind} template)`, { timeout: 1200000 }, async () => {
  server = await startServer({ kind, name: 'strata-tiny', args: ['--api-key', 'sk-claude-test'], logName: `claude-code-${kind}` });
  const home = mkdtempSync(join(tmpdir(), 'strata-claude-home-'));
  await claudeTurn(server.base, 'sk-claude-test', home, server.log);
  assert.match(server.log(), /POST \/v1\/messages 200/);
  const gw = await startGateway(['--upstream', server.base, '--upstream-key', 'sk-claude-test', '--api-key', 'sk-claude-gateway',
    '--listen', '127.0.0.1:0', '--store', ''], { logName: `claude-code-gateway-${kind}` });
  const viaGateway = await claudeTurn(gw.base, 'sk-claude-gateway', home, () => `${gw.log()}\n${server.log()}`);
  assert.ok(viaGateway.usage.cache_read_input_tokens > 0, `the lane's prefix cache served the gateway's turn: ${JSON.stringify(viaGateway.usage)}`);
  await gw.stop();
  await server.stop();
});
