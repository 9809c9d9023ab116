// The BABILong-style suite at CI size (tests/integration/babilong.mjs; bench/bench_babilong.mjs
// runs it at 1M tokens): bAbI qa1-qa5 stories scattered through ~200K tokens of text installed
// on the machine, each asked at the end of the paste and as its own turn (8 stories per task),
// and the needles (distinct facts, two-hop pairs, a fact in an old chat turn; a #define in C
// headers; a Chinese fact in CJK manual pages) with the question at the end of the paste. A
// real gateway in front of a real lane assembles every sample through
// POST /v1/gateway/assemble; a sample passes when every supporting statement is in the body the
// lane would be sent. Without installed text (licences, copyright files, manual pages, headers)
// the suite is skipped with a message, or fails where STRATA_REQUIRE_INTEGRATION is set.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as harness from './harness.mjs';
import { realText, runSuite, startAssembleGateway, table, TASKS } from './babilong.mjs';

after(harness.stopAll);

const DIVISOR = Number(process.env.STRATA_TEST_DIVISOR ?? 1);
const TOKENS = DIVISOR > 1 ? 60_000 : 200_000;
const WINDOW = 16384;
const corpus = realText({ maxBytesPerKind: 2 << 20 });
const enough = corpus.docs.length >= 20 && corpus.bytes >= TOKENS * 3.6 / 4;
const why = `not enough installed text for haystacks (${corpus.docs.length} documents, ${corpus.bytes} bytes; missing: ${corpus.missing.join(', ') || 'none'}); ` +
  'Debian installs /usr/share/common-licenses, /usr/share/doc/*/copyright, man pages and /usr/include (build-essential)';
if (!enough && process.env.STRATA_REQUIRE_INTEGRATION) throw new Error(`babilong: ${why}`);

let gw;
before(async () => {
  if (enough) gw = await startAssembleGateway(harness, WINDOW, 'test');
});

test('bAbI stories: the generators give what their task asks', { skip: enough ? false : why }, () => {
  for (const [name, gen] of Object.entries(TASKS)) {
    for (let i = 0; i < 8; ++i) {
      const s = gen(1000 * (i + 1) + name.charCodeAt(2));
      assert.ok(s.statements.length >= 2 && s.supporting.length >= 1, name);
      assert.equal(s.supporting.length, { qa1: 1, qa2: 2, qa3: 3, qa4: 1, qa5: 1 }[name], name);
      for (const k of s.supporting) assert.equal(s.statements.filter((t) => t === s.statements[k]).length, 1, `${name}: ambiguous statement`);
      assert.ok(s.question.endsWith('?') && s.answer.length > 0);
    }
  }
  // The supporting statements of qa1/qa2 lead to the answer.
  const a = TASKS.qa1(7);
  assert.ok(a.statements[a.supporting[0]].endsWith(`${a.answer}.`));
  const b = TASKS.qa2(7);
  assert.ok(b.supporting.some((k) => b.statements[k].endsWith(` ${b.answer}.`)));
  const c = TASKS.qa3(7);
  assert.ok(c.statements[c.supporting[1]].endsWith(` ${c.answer}.`) && c.question.includes(c.statements[c.supporting[2]].split(' ').at(-1).slice(0, -1)));
});

test(`every supporting statement reaches the prompt: qa1-qa5 and needles in ~${TOKENS.toLocaleString('en')} tokens of installed text`, { skip: enough ? false : why }, async () => {
  const misses = [];
  const rows = await runSuite({ base: gw.base, model: 'strata-tiny', corpus, bytes: Math.round(TOKENS * 3.6), stories: 8, log: (s) => misses.push(s) });
  console.log(table(rows));
  if (misses.length) console.log(misses.join('\n'));
  for (const r of rows) {
    assert.ok(r.abridged === r.of, `${r.name}: every sample is beyond the window`);
    // Goal of issue #28: >= 95 % of samples per task and format (with 8 stories: all), >= 98 % of needles.
    assert.equal(r.found, r.of, `${r.name}: ${r.found}/${r.of} samples kept every supporting statement`);
  }
});
