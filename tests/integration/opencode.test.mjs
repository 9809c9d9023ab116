// opencode 1.18 (its linux-x64 native binary, the npm package `opencode-linux-x64` that the
// `opencode-ai` wrapper installs and runs; pinned directly because the wrapper's other platforms'
// packages are not all on the registry CI reaches, which leaves `npm ci` unable to verify the lock)
// completes a turn with `opencode run --format json` against strata serve and through strata
// gateway, configured as a user would: a custom provider on `@ai-sdk/openai-compatible` with
// the server's base URL and key, in an opencode.json of a fresh HOME (no models.dev fetch, no
// auto-update, no sharing). opencode sends two requests: a short one for the session's title and
// the turn itself (~7K tokens of system prompt and tool definitions). The model is random: what is
// tested is that the real client accepts the exchange and finishes the turn without an error.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stopAll, startClientTargets } from './harness.mjs';

const here = dirname(fileURLToPath(import.meta.url));
after(stopAll);

const targets = {};
before(async () => {
  for (const t of await startClientTargets('opencode')) targets[t.label] = t;
});

// Runs `opencode run` to completion (stdin closed: opencode reads piped stdin as part of the
// message), killed after `timeoutMs`. Resolves { code, signal, events, stderr }.
function opencodeRun(t, message, timeoutMs) {
  const home = mkdtempSync(join(tmpdir(), 'strata-opencode-'));
  const project = join(home, 'project');
  mkdirSync(project);
  const config = join(home, 'opencode.json');
  writeFileSync(config, JSON.stringify({
    $schema: 'https://opencode.ai/config.json',
    autoupdate: false,
    share: 'disabled',
    provider: {
      strata: {
        npm: '@ai-sdk/openai-compatible',
        name: 'Strata',
        options: { baseURL: `${t.base}/v1`, apiKey: t.key },
        models: { [t.model]: { name: t.model, limit: { context: 65536, output: 256 } } },
      },
    },
  }));
  const env = {
    PATH: process.env.PATH, HOME: home,
    XDG_CONFIG_HOME: join(home, '.config'), XDG_DATA_HOME: join(home, '.local/share'),
    XDG_CACHE_HOME: join(home, '.cache'), XDG_STATE_HOME: join(home, '.local/state'),
    OPENCODE_CONFIG: config, OPENCODE_DISABLE_MODELS_FETCH: 'true', OPENCODE_DISABLE_AUTOUPDATE: 'true',
    OPENCODE_DISABLE_LSP_DOWNLOAD: 'true', OPENCODE_DISABLE_SHARE: 'true', OPENCODE_DISABLE_DEFAULT_PLUGINS: 'true',
  };
  const bin = join(here, 'node_modules/opencode-linux-x64/bin/opencode');
  if (!existsSync(bin)) throw new Error(`${bin} is missing: npm ci installs it on linux x64 only`);
  return new Promise((resolve) => {
    const child = spawn(bin, ['run', '--print-logs', '--model', `strata/${t.model}`, '--format', 'json', message],
      { env, cwd: project, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '', stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      const events = stdout.split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
      resolve({ code, signal, events, stdout, stderr });
    });
  });
}

// Serve directly on the Qwen3 template, the gateway on the Qwen3.5 template: both ways in and
// both families, one ~7K-token prefill each.
for (const label of ['serve, Qwen3 template', 'gateway, Qwen3.5 template']) test(`opencode run completes a turn (${label})`, { timeout: 600000 }, async () => {
  const t = targets[label];
  const r = await opencodeRun(t, 'Say hello in one word.', 540000);
  const why = `opencode exited ${r.code ?? r.signal}\nstdout: ${r.stdout.slice(-3000)}\nstderr: ${r.stderr.slice(-4000)}\nserver log: ${t.server.log().slice(-3000)}`;
  assert.equal(r.code, 0, why);
  assert.deepEqual(r.events.filter((e) => e.type === 'error'), [], why);
  const finish = r.events.filter((e) => e.type === 'step_finish');
  assert.equal(finish.length, 1, why);
  assert.ok(['stop', 'length'].includes(finish[0].part.reason), why);
  assert.ok(finish[0].part.tokens.input > 3000, `opencode sent its full prompt: ${JSON.stringify(finish[0].part.tokens)}`);
  assert.ok(finish[0].part.tokens.output >= 1);
  assert.deepEqual(r.stderr.split('\n').filter((l) => l.includes('level=ERROR')), [], why);
  assert.match(t.server.log(), /POST \/v1\/chat\/completions 200/);
});
