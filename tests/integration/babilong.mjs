// A BABILong-style retrieval suite for the gateway's long-context assembly (tests/integration/
// babilong.test.mjs at CI size, bench/bench_babilong.mjs at 1M tokens):
//   stories   bAbI qa1-qa5 generators: four people moving between six rooms and carrying three
//             objects (qa1 where a person is, qa2 where an object is, qa3 where an object was
//             before a room), relations between rooms (qa4) and objects given between people (qa5);
//   haystacks real, varied text the machine has installed (licences, copyright files, manual
//             pages, C headers) with the story's statements scattered through it in order;
//   needles   distinct facts, two-hop pairs and a fact in an old chat turn in that text, a
//             #define in C headers and a Chinese fact in CJK manual pages, with the question at
//             the end of the paste;
//   score     a sample counts when every supporting statement is present in what
//             POST /v1/gateway/assemble returns (the body a lane would be sent).
// Each story is asked with the question at the end of the pasted message ("end") and as its own
// user turn after the paste ("turn").
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';
import { join } from 'node:path';

// --- seeded randomness ---------------------------------------------------------------------

export function rng(seed) {
  let x = (seed * 2654435761) >>> 0 || 1;
  const next = () => {  // xorshift32
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    return x / 4294967296;
  };
  return {
    unit: next,
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)),
    pick: (a) => a[Math.floor(next() * a.length)],
    shuffle: (a) => {
      const b = [...a];
      for (let i = b.length - 1; i > 0; --i) {
        const j = Math.floor(next() * (i + 1));
        [b[i], b[j]] = [b[j], b[i]];
      }
      return b;
    },
  };
}

// --- real text -----------------------------------------------------------------------------

const listFiles = (dir, filter = () => true) => {
  const out = [];
  for (const name of readdirSafe(dir)) {
    const p = join(dir, name);
    try {
      if (statSync(p).isFile() && filter(name)) out.push(p);
    } catch { /* a dangling link */ }
  }
  return out;
};

// Documents from four kinds of installed text, each capped so that no kind dominates, and apart
// from them the manual pages in Chinese, Japanese and Korean (man-db, dpkg, passwd... install
// them) for the CJK needles. Returns { docs: [{ kind, path, text }], bytes, missing: [what was
// not found], cjk: [{ kind, path, text }] }.
const stripRoffComments = (text) => text.split('\n').filter((l) => !l.startsWith('.\\"') && !l.startsWith("'\\\"")).join('\n');
export function realText({ maxBytesPerKind = 8 << 20 } = {}) {
  const kinds = {
    licence: listFiles('/usr/share/common-licenses'),
    copyright: readdirSafe('/usr/share/doc').map((d) => join('/usr/share/doc', d, 'copyright')).filter((p) => isFile(p)),
    manual: listFiles('/usr/share/man/man1', (n) => n.endsWith('.gz')).concat(listFiles('/usr/share/man/man3', (n) => n.endsWith('.gz'))),
    header: listFiles('/usr/include', (n) => n.endsWith('.h')).concat(
      ...readdirSafe('/usr/include').map((d) => listFiles(join('/usr/include', d), (n) => n.endsWith('.h')))),
  };
  const docs = [];
  const missing = [];
  let bytes = 0;
  const r = rng(1234);
  for (const [kind, files] of Object.entries(kinds)) {
    if (files.length === 0) {
      missing.push(kind);
      continue;
    }
    let taken = 0;
    const seen = new Set();  // many copyright files repeat the same licence text
    for (const path of r.shuffle(files)) {
      if (taken >= maxBytesPerKind) break;
      let text;
      try {
        text = path.endsWith('.gz') ? gunzipSync(readFileSync(path)).toString('utf8') : readFileSync(path, 'utf8');
      } catch { continue; }
      if (kind === 'manual') text = stripRoffComments(text);
      text = text.replace(/\r/g, '').replace(/\n{3,}/g, '\n\n').trim();
      if (text.length < 200) continue;
      const key = text.slice(0, 400);
      if (seen.has(key)) continue;
      seen.add(key);
      docs.push({ kind, path, text });
      taken += text.length;
    }
    bytes += taken;
  }
  const cjk = [];
  for (const lang of ['zh_CN', 'zh_TW', 'ja', 'ko']) {
    for (const section of readdirSafe(`/usr/share/man/${lang}`)) {
      for (const path of listFiles(join('/usr/share/man', lang, section), (n) => n.endsWith('.gz'))) {
        try {
          const text = stripRoffComments(gunzipSync(readFileSync(path)).toString('utf8')).replace(/\n{3,}/g, '\n\n').trim();
          if (text.length >= 200) cjk.push({ kind: 'cjk', path, text });
        } catch { /* unreadable: left out */ }
      }
    }
  }
  return { docs, bytes, missing, cjk };
}

function readdirSafe(dir) {
  try { return readdirSync(dir).sort(); } catch { return []; }
}
function isFile(p) {
  try { return statSync(p).isFile(); } catch { return false; }
}

// A haystack of about `bytes` bytes: the documents in a seeded order, each headed by its path.
export function haystack(corpus, bytes, seed) {
  const r = rng(seed);
  const parts = [];
  let n = 0;
  const order = r.shuffle(corpus.docs);
  for (let i = 0; n < bytes; i = (i + 1) % order.length) {
    const d = order[i];
    const piece = `==> ${d.path} <==\n${d.text}`;
    parts.push(piece.length > bytes - n + 200 ? piece.slice(0, Math.max(200, bytes - n)) : piece);
    n += parts.at(-1).length + 2;
  }
  return parts.join('\n\n');
}

// Inserts statements, in order, at line starts spread through the text (each on its own line).
export function scatter(text, statements, seed, { from = 0.02, to = 0.98 } = {}) {
  const r = rng(seed);
  const cuts = statements.map(() => Math.floor(text.length * (from + (to - from) * r.unit()))).sort((a, b) => a - b);
  let out = '';
  let at = 0;
  cuts.forEach((c, i) => {
    let p = text.indexOf('\n', Math.max(c, at));
    if (p < 0) p = text.length;
    else p += 1;
    out += text.slice(at, p) + statements[i] + '\n';
    at = p;
  });
  return out + text.slice(at);
}

// --- bAbI stories --------------------------------------------------------------------------

const PEOPLE = ['Mary', 'John', 'Daniel', 'Sandra'];
const ROOMS = ['kitchen', 'hallway', 'bathroom', 'garden', 'office', 'bedroom'];
const OBJECTS = ['football', 'apple', 'milk'];
const MOVE = ['went to', 'journeyed to', 'travelled to', 'moved to', 'went back to'];
const TAKE = ['picked up', 'got', 'grabbed', 'took'];
const DROP = ['dropped', 'put down', 'discarded', 'left'];

// A simulated world: every statement changes it; returns the statements with what they did.
function simulate(r, steps, { objects = true } = {}) {
  const loc = {}, holder = {}, events = [];
  for (let i = 0; i < steps; ++i) {
    const p = r.pick(PEOPLE);
    const held = OBJECTS.filter((o) => holder[o] === p);
    const free = OBJECTS.filter((o) => holder[o] === undefined);
    const roll = r.unit();
    if (!objects || roll < 0.6 || loc[p] === undefined) {
      const room = r.pick(ROOMS.filter((x) => x !== loc[p]));
      loc[p] = room;
      events.push({ kind: 'move', person: p, room, text: `${p} ${r.pick(MOVE)} the ${room}.` });
    } else if (roll < 0.82 && free.length > 0) {
      const o = r.pick(free);
      holder[o] = p;
      events.push({ kind: 'take', person: p, object: o, text: `${p} ${r.pick(TAKE)} the ${o} there.` });
    } else if (held.length > 0) {
      const o = r.pick(held);
      delete holder[o];
      events.push({ kind: 'drop', person: p, object: o, text: `${p} ${r.pick(DROP)} the ${o}.` });
    }
  }
  return { events, loc, holder };
}

// Supporting statements must be unambiguous in the assembled text: a story whose supporting
// statement also occurs elsewhere in it is generated again.
const unique = (events, idx) => idx.every((i) => events.filter((e) => e.text === events[i].text).length === 1);

export function qa1(seed) {
  for (let a = 0; ; ++a) {
    const r = rng(seed * 97 + a);
    const { events } = simulate(r, r.int(14, 22), { objects: false });
    const p = r.pick(PEOPLE);
    const last = events.findLastIndex((e) => e.person === p);
    if (last < 0 || !unique(events, [last])) continue;
    return { task: 'qa1', statements: events.map((e) => e.text), supporting: [last], question: `Where is ${p}?`, answer: events[last].room };
  }
}

export function qa2(seed) {
  for (let a = 0; ; ++a) {
    const r = rng(seed * 89 + a);
    const { events, holder } = simulate(r, r.int(20, 32));
    const held = OBJECTS.filter((o) => holder[o] !== undefined);
    if (held.length === 0) continue;
    const o = r.pick(held), h = holder[o];
    const take = events.findLastIndex((e) => e.kind === 'take' && e.object === o);
    const move = events.findLastIndex((e) => e.kind === 'move' && e.person === h);
    if (move < 0 || !unique(events, [take, move])) continue;
    return { task: 'qa2', statements: events.map((e) => e.text), supporting: [take, move].sort((x, y) => x - y), question: `Where is the ${o}?`, answer: events[move].room };
  }
}

export function qa3(seed) {
  for (let a = 0; ; ++a) {
    const r = rng(seed * 83 + a);
    const { events, holder } = simulate(r, r.int(28, 40));
    const held = OBJECTS.filter((o) => holder[o] !== undefined);
    if (held.length === 0) continue;
    const o = r.pick(held), h = holder[o];
    const take = events.findLastIndex((e) => e.kind === 'take' && e.object === o);
    const moves = events.map((e, i) => [e, i]).filter(([e, i]) => i > take && e.kind === 'move' && e.person === h).map(([, i]) => i);
    if (moves.length < 2) continue;
    const [before, last] = moves.slice(-2);
    const room = events[last].room;
    // "before the R" must name one arrival: the holder reached R once while holding it.
    if (moves.filter((i) => events[i].room === room).length !== 1) continue;
    if (!unique(events, [take, before, last])) continue;
    return { task: 'qa3', statements: events.map((e) => e.text), supporting: [take, before, last], question: `Where was the ${o} before the ${room}?`, answer: events[before].room };
  }
}

const DIRECTIONS = [['north', 'south'], ['east', 'west']];

export function qa4(seed) {
  const r = rng(seed * 79);
  const [a, b, c] = r.shuffle(ROOMS);
  const [d1] = r.shuffle(DIRECTIONS);
  const [x, y] = r.unit() < 0.5 ? d1 : [...d1].reverse();
  // "The A is X of the B. The C is Y of the B." (two relations around one room).
  const statements = [`The ${a} is ${x} of the ${b}.`, `The ${c} is ${y} of the ${b}.`];
  const ask = r.int(0, 3);
  const questions = [
    [`What is ${x} of the ${b}?`, 0, a], [`What is ${y} of the ${b}?`, 1, c],
    [`What is the ${b} ${y} of?`, 0, a], [`What is the ${b} ${x} of?`, 1, c],
  ];
  const [question, s, answer] = questions[ask];
  return { task: 'qa4', statements, supporting: [s], question, answer };
}

const GIVERS = ['Fred', 'Jeff', 'Bill', 'Mary'];
const GIVE = ['gave', 'handed', 'passed'];

export function qa5(seed) {
  for (let at = 0; ; ++at) {
    const r = rng(seed * 73 + at);
    const events = [];
    const holder = {};
    const loc = {};
    for (let i = 0, n = r.int(14, 22); i < n; ++i) {
      const p = r.pick(GIVERS);
      const roll = r.unit();
      const held = OBJECTS.filter((o) => holder[o] === p);
      const free = OBJECTS.filter((o) => holder[o] === undefined);
      if (roll < 0.35 && held.length > 0) {
        const o = r.pick(held), q = r.pick(GIVERS.filter((g) => g !== p));
        holder[o] = q;
        events.push({ kind: 'give', person: p, to: q, object: o, text: `${p} ${r.pick(GIVE)} the ${o} to ${q}.` });
      } else if (roll < 0.65 && free.length > 0) {
        const o = r.pick(free);
        holder[o] = p;
        events.push({ kind: 'take', person: p, object: o, text: `${p} ${r.pick(TAKE)} the ${o} there.` });
      } else {
        const room = r.pick(ROOMS.filter((x) => x !== loc[p]));
        loc[p] = room;
        events.push({ kind: 'move', person: p, room, text: `${p} ${r.pick(MOVE)} the ${room}.` });
      }
    }
    const gives = events.map((e, i) => [e, i]).filter(([e]) => e.kind === 'give');
    if (gives.length === 0) continue;
    const [g, gi] = gives.at(-1 - r.int(0, Math.min(2, gives.length - 1)));
    // The question must have one answer: no other gift between the same pair / of the same object.
    const forms = [
      [`What did ${g.person} give to ${g.to}?`, (e) => e.person === g.person && e.to === g.to, g.object],
      [`Who gave the ${g.object} to ${g.to}?`, (e) => e.object === g.object && e.to === g.to, g.person],
      [`Who did ${g.person} give the ${g.object} to?`, (e) => e.person === g.person && e.object === g.object, g.to],
    ];
    const [question, same, answer] = forms[r.int(0, 2)];
    if (gives.filter(([e]) => same(e)).length !== 1 || !unique(events, [gi])) continue;
    return { task: 'qa5', statements: events.map((e) => e.text), supporting: [gi], question, answer };
  }
}

export const TASKS = { qa1, qa2, qa3, qa4, qa5 };

// --- conversations -------------------------------------------------------------------------

const INTRO = 'Here is some text I pasted from my machine; please read it carefully.\n\n';
// How people end a paste with a question: after a blank line, after a marker, wrapped in an
// instruction, or glued to the material's last line.
const ENDINGS = [
  (q) => `\n\nQuestion: ${q}`,
  (q) => `\n\n${q}`,
  (q) => `\n\nRead the text above carefully. ${q} Answer in one word.`,
  (q) => `\n${q}`,
];

export function storyConversation(story, corpus, bytes, seed, format) {
  const hay = scatter(haystack(corpus, bytes, seed), story.statements, seed + 1);
  if (format === 'end') return [{ role: 'user', content: INTRO + hay + ENDINGS[seed % ENDINGS.length](story.question) }];
  return [
    { role: 'user', content: INTRO + hay },
    { role: 'assistant', content: 'I have read the text. What would you like to know?' },
    { role: 'user', content: story.question },
  ];
}

// --- needles -------------------------------------------------------------------------------

const PLACES = ['Harrowgate', 'Fernhill', 'Coldwater', 'Larkspur', 'Millbrook', 'Thornfield', 'Westmarch', 'Oakhaven', 'Redcliff', 'Stonebury'];
const THINGS = ['depot', 'observatory', 'archive', 'boathouse', 'granary', 'workshop'];
const COLORS = ['red', 'blue', 'green', 'yellow', 'purple', 'orange', 'black', 'white'];
const CONTAINERS = ['tin', 'chest', 'crate', 'satchel', 'casket', 'jar'];
const HIDING = ['cellar', 'attic', 'pantry', 'loft', 'vestry', 'scullery'];

const ZH_PLACES = ['北港', '东林', '西山', '南湖', '石桥', '青田', '白沙', '红岩', '松江', '柳溪'];
const ZH_THINGS = ['仓库', '档案馆', '船库', '粮仓', '工坊', '天文台'];

// Kinds: 'single' (one fact among three of the same shape), 'two-hop' (a fact that names the
// entity of another), 'chat' (a fact stated in an old turn, the paste in the last), 'code' (a
// #define among three of the same shape in C headers, asked for in words: the identifier's
// parts must be found), 'cjk' (a Chinese sentence among three of the same shape in Chinese,
// Japanese and Korean manual pages, asked in Chinese).
export function needleCase(kind, seed, corpus, bytes) {
  const r = rng(seed * 61);
  if (kind === 'code') {
    const hay = haystack({ docs: corpus.docs.filter((d) => d.kind === 'header') }, bytes, seed);
    const [p, ...others] = r.shuffle(PLACES);
    const thing = r.pick(THINGS);
    const define = (place) => `#define ${place.toUpperCase()}_${thing.toUpperCase()}_ACCESS_CODE "${r.int(1000, 9999)}-${r.pick(['KESTREL', 'LARK', 'OSPREY', 'HERON', 'WREN'])}"`;
    const needle = define(p);
    const facts = r.shuffle([needle, ...others.slice(0, 3).map(define)]);
    return { kind, supporting: [needle], messages: [{ role: 'user', content: INTRO + scatter(hay, facts, seed + 4) + `\n\nIn these headers, what is the access code for the ${p} ${thing} defined as?` }] };
  }
  if (kind === 'cjk') {
    // Half the bytes: this text takes about twice the tokens a byte that the English mix does.
    const hay = haystack({ docs: corpus.cjk }, Math.round(bytes / 2), seed);
    const [p, ...others] = r.shuffle(ZH_PLACES);
    const thing = r.pick(ZH_THINGS);
    const fact = (place) => `${place}${thing}的门禁密码是${r.int(1000, 9999)}。`;
    const needle = fact(p);
    const facts = r.shuffle([needle, ...others.slice(0, 3).map(fact)]);
    return { kind, supporting: [needle], messages: [{ role: 'user', content: '这是我从电脑上复制的一些文字，请仔细阅读。\n\n' + scatter(hay, facts, seed + 5) + `\n\n${p}${thing}的门禁密码是多少？` }] };
  }
  const hay = haystack(corpus, bytes, seed);
  if (kind === 'single') {
    const [p, ...others] = r.shuffle(PLACES);
    const thing = r.pick(THINGS);
    const code = () => `${r.int(1000, 9999)}-${r.pick(['KESTREL', 'LARK', 'OSPREY', 'HERON', 'WREN'])}`;
    const needle = `The access code for the ${p} ${thing} is ${code()}.`;
    const distractors = others.slice(0, 3).map((o) => `The access code for the ${o} ${thing} is ${code()}.`);
    const facts = r.shuffle([needle, ...distractors]);
    return { kind, supporting: [needle], messages: [{ role: 'user', content: INTRO + scatter(hay, facts, seed + 2) + `\n\nQuestion: What is the access code for the ${p} ${thing}?` }] };
  }
  if (kind === 'two-hop') {
    const [c1, c2] = r.shuffle(COLORS);
    const gate = r.pick(['gate', 'door', 'cabinet', 'locker']), box = r.pick(CONTAINERS), room = r.pick(HIDING), place = r.pick(PLACES);
    const hop1 = `The key to the ${c1} ${gate} is hidden in the ${c2} ${box}.`;
    const hop2 = `The ${c2} ${box} is kept in the ${room} of the old mill at ${place}.`;
    const facts = r.unit() < 0.5 ? [hop1, hop2] : [hop2, hop1];
    return { kind, supporting: [hop1, hop2], messages: [{ role: 'user', content: INTRO + scatter(hay, facts, seed + 3) + `\n\nWhere is the key to the ${c1} ${gate}? Name the room and the building.` }] };
  }
  // chat: 40 short turns, the fact in turn 4, then the paste with the question at its end.
  const place = r.pick(PLACES);
  const combo = `${r.int(10, 99)}-${r.int(10, 99)}-${r.int(10, 99)}`;
  const needle = `By the way, my locker combination at the ${place} gym is ${combo}.`;
  const messages = [];
  const lines = hay.split('\n').filter((l) => l.trim().length > 40);
  for (let t = 0; t < 40; ++t) {
    const said = lines.slice(t * 6, t * 6 + 3).join(' ');
    messages.push({ role: 'user', content: t === 4 ? `${said} ${needle} What do you make of that?` : `${said} What do you make of that?` });
    messages.push({ role: 'assistant', content: lines.slice(t * 6 + 3, t * 6 + 6).join(' ') });
  }
  messages.push({ role: 'user', content: INTRO + hay + `\n\nWhat is my locker combination at the ${place} gym?` });
  return { kind, supporting: [needle], messages };
}

// --- scoring -------------------------------------------------------------------------------

// The text a lane would be sent (every message's content, the system prompt included).
export function sentText(assembled) {
  return assembled.body.messages.map((m) => (typeof m.content === 'string' ? m.content : JSON.stringify(m.content))).join('\n');
}

// Asks the gateway to assemble `messages` and says which of `supporting` it kept.
export async function assemble(base, model, messages, maxTokens = 64) {
  const res = await fetch(`${base}/v1/gateway/assemble`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages, max_tokens: maxTokens }),
  });
  if (res.status !== 200) throw new Error(`assemble: HTTP ${res.status}: ${(await res.text()).slice(0, 300)}`);
  return res.json();
}

// Runs the suite: per task and format the samples whose every supporting statement was kept,
// then the needles. Returns rows { name, found, of, tokens } (tokens: the mean prompt size).
export async function runSuite({ base, model, corpus, bytes, stories = 8, tasks = Object.keys(TASKS), needles = true, log = () => {} }) {
  const rows = [];
  const score = async (name, messages, supporting) => {
    const a = await assemble(base, model, messages);
    const sent = sentText(a);
    const kept = supporting.filter((s) => sent.includes(s)).length;
    return { ok: kept === supporting.length, kept, tokens: a.prompt_tokens_in, abridged: a.abridged, out: a.prompt_tokens_out, ms: a.ms };
  };
  for (const task of tasks) {
    for (const format of ['end', 'turn']) {
      const row = { name: `${task} ${format}`, found: 0, of: 0, tokens: 0, ms: 0, abridged: 0 };
      for (let i = 0; i < stories; ++i) {
        const story = TASKS[task](1000 * (i + 1) + task.charCodeAt(2));
        const messages = storyConversation(story, corpus, bytes, 7000 + 31 * i + task.charCodeAt(2), format);
        const s = await score(row.name, messages, story.supporting.map((k) => story.statements[k]));
        row.of += 1;
        row.found += s.ok ? 1 : 0;
        row.tokens += s.tokens / stories;
        row.ms += s.ms / stories;
        row.abridged += s.abridged ? 1 : 0;
        if (!s.ok) log(`  miss: ${row.name} story ${i}: ${s.kept}/${story.supporting.length} supporting kept (${story.question})`);
      }
      rows.push(row);
    }
  }
  if (needles) {
    const kinds = [['single', 8], ['two-hop', 3], ['chat', 1], ['code', 4]];
    if (corpus.cjk?.length > 0) kinds.push(['cjk', 4]);
    else log('  needle cjk: not run (no Chinese, Japanese or Korean manual pages installed)');
    for (const [kind, n] of kinds) {
      const row = { name: `needle ${kind}`, found: 0, of: 0, tokens: 0, ms: 0, abridged: 0 };
      for (let i = 0; i < n; ++i) {
        const c = needleCase(kind, 500 + 17 * i + kind.length, corpus, bytes);
        const s = await score(row.name, c.messages, c.supporting);
        row.of += 1;
        row.found += s.ok ? 1 : 0;
        row.tokens += s.tokens / n;
        row.ms += s.ms / n;
        row.abridged += s.abridged ? 1 : 0;
        if (!s.ok) log(`  miss: ${row.name} ${i}: ${s.kept}/${c.supporting.length} kept`);
      }
      rows.push(row);
    }
  }
  return rows;
}

export function table(rows) {
  const lines = ['| samples | all supporting kept | mean prompt tokens in | mean assembly ms |', '|---|---|---|---|'];
  for (const r of rows) lines.push(`| ${r.name} | ${r.found}/${r.of} | ${Math.round(r.tokens).toLocaleString('en')} | ${Math.round(r.ms)} |`);
  return lines.join('\n');
}

// A gateway with debug endpoints in front of a supervised tiny lane whose window is `window`.
export async function startAssembleGateway(harness, window, tag) {
  const { writeFileSync } = await import('node:fs');
  const cfg = join(harness.workDir, `gateway-babilong-${tag}-${process.pid}.toml`);
  writeFileSync(cfg, `[server]\nlisten = "127.0.0.1:0"\ndebug_endpoints = true\n[long_context]\nstore = ""\n` +
    `[[lanes]]\nname = "tiny"\ncommand = ["${harness.strataBin}", "serve", "-m", "${harness.model('qwen3')}", "--name", "strata-tiny", "--ctx", "${window}", "--parallel", "2", "--kv-mib", "128"]\nmodels = ["strata-tiny"]\n`);
  const gw = await harness.startGateway(['--config', cfg], { logName: `gateway-babilong-${tag}` });
  await harness.waitFor('the lane', async () => (await (await fetch(`${gw.base}/health`)).json()).lanes.every((l) => l.healthy), 120000);
  return gw;
}
