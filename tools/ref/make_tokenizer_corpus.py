#!/usr/bin/env python3
"""Writes the tokenizer test corpus: tests/tokenizer/corpus/*.txt and multiline.jsonl.

Deterministic (fixed seed): rerunning it reproduces the committed files byte for byte.
The seed text is in corpus_text.py; this script varies and mixes it into thousands of lines
covering every category the tokenizer must get right. Reference ids come from
tokenizer_refs.mjs / tokenizer_refs.py, never from this script.

usage: tools/ref/make_tokenizer_corpus.py [OUT_DIR]   (default tests/tokenizer/corpus)
"""
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus_text import (CJK, CODE_CPP, CODE_JS_MIN, CODE_JSON, CODE_MISC, CODE_PY, CODE_SQL,  # noqa: E402
                         CYRILLIC_GREEK, EDGE, EMOJI, INDIC_SEA, LATIN, RTL, SPECIAL)

rng = random.Random(20240611)

PREFIXES = ["", "", "", " ", "  ", "\t", "- ", "* ", "> ", "1. ", "(", "\"", "«", "'", "— ", "    ", "# ", "// "]
SUFFIXES = ["", "", "", " ", "  ", "!", "?!", "...", " :)", " 🎉", ".", ";", ",", " —", "\t", "   ", "\"", ")", "!!!", "…"]
EMOJI_BITS = ["😀", "👍🏽", "🎉", "❤️", "🇯🇵", "👨‍👩‍👧", "✨", "🔥", "🤷🏻‍♀️", "1️⃣"]


def number():
    k = rng.randrange(9)
    if k == 0:
        return str(rng.randrange(10))
    if k == 1:
        return str(rng.randrange(10 ** rng.randint(2, 12)))
    if k == 2:
        return f"{rng.uniform(-1000, 1000):.{rng.randint(1, 6)}f}"
    if k == 3:
        return f"{rng.randint(1900, 2099)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if k == 4:
        return f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
    if k == 5:
        return f"{rng.randrange(100)}%"
    if k == 6:
        return f"${rng.randrange(10 ** 6):,}.{rng.randrange(100):02d}"
    if k == 7:
        return f"{rng.uniform(0, 10):.3e}"
    return f"v{rng.randrange(10)}.{rng.randrange(30)}.{rng.randrange(100)}"


def insert_at_space(s, piece):
    spaces = [i for i, c in enumerate(s) if c == " "]
    if not spaces:
        return s + " " + piece
    i = rng.choice(spaces)
    return s[:i] + " " + piece + s[i:]


def vary(line, pool, cased=True):
    s = line
    if cased:
        r = rng.random()
        if r < 0.08:
            s = s.upper()
        elif r < 0.14:
            s = s.lower()
        elif r < 0.18:
            s = s.title()
    if rng.random() < 0.3:
        s = insert_at_space(s, number())
    if rng.random() < 0.15:
        s = insert_at_space(s, rng.choice(EMOJI_BITS))
    if rng.random() < 0.35:
        s = s + rng.choice([" ", "", "  ", " — ", " | ", "\t"]) + rng.choice(pool)
    return rng.choice(PREFIXES) + s + rng.choice(SUFFIXES)


def prose_file(pool, n, cased=True):
    lines = list(pool)
    while len(lines) < n:
        lines.append(vary(rng.choice(pool), pool, cased))
    return lines


def code_lines(n):
    blocks = [CODE_PY, CODE_CPP, CODE_JSON, CODE_JS_MIN, CODE_SQL, CODE_MISC]
    lines = []
    for b in blocks:
        lines += b.rstrip("\n").split("\n")
    idents = ["x", "value", "userId", "tmp_buf", "kMaxLen", "self", "i", "j", "ctx", "HTTPServer", "_private", "__dunder__"]
    ops = [" + ", " - ", " * ", " / ", " == ", " != ", " <= ", " >= ", " && ", " || ", " << ", " >> ", "->", ".", "::", " ?? ", " ** "]
    while len(lines) < n:
        k = rng.randrange(10)
        ind = rng.choice(["", "    ", "        ", "\t", "\t\t", "  "])
        a, b, c = rng.choice(idents), rng.choice(idents), rng.choice(idents)
        if k == 0:
            lines.append(f"{ind}{a} = {b}{rng.choice(ops)}{c}({number()});")
        elif k == 1:
            lines.append(f"{ind}if ({a}{rng.choice(ops)}{number()}) {{ return {b}[{c}]; }}")
        elif k == 2:
            lines.append(f"{ind}for (size_t {a} = 0; {a} < {b}.size(); ++{a}) {c} += {b}[{a}];")
        elif k == 3:
            lines.append(f"{ind}def {a}_{b}({c}, *args, **kw): return {{'{a}': {c}, \"n\": {number()}}}")
        elif k == 4:
            lines.append(f"{ind}SELECT {a}, {b} FROM t_{c} WHERE {a} = '{number()}' AND {b} IS NOT NULL;")
        elif k == 5:
            lines.append(f"{ind}{{\"{a}\":{number()},\"{b}\":[{number()},{number()}],\"{c}\":null}}")
        elif k == 6:
            lines.append(f"{ind}// TODO({a}): handle {b} when {c} overflows; see #{rng.randrange(10000)}")
        elif k == 7:
            lines.append(f"{ind}console.log(`${{{a}}}:${{{b}?.{c} ?? 0}}`);let {a}2=({b})=>{b}*{number()};")
        elif k == 8:
            lines.append(f"{ind}#define {a.upper()}_{b.upper()}(x) ((x) {rng.choice(ops).strip()} {number()})")
        else:
            lines.append(f"{ind}std::unordered_map<std::string, std::vector<{rng.choice(['int', 'float', 'uint8_t'])}>> {a}_{b};")
    # Long pieces: one long letter run, a base64 blob, a long hex string, a long minified line.
    lines.append("a" * 3000)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    lines.append("data:image/png;base64," + "".join(rng.choice(alphabet) for _ in range(4000)) + "==")
    lines.append("0x" + "".join(rng.choice("0123456789abcdef") for _ in range(2000)))
    lines.append(";".join(CODE_JS_MIN.split("\n")) * 3)
    lines.append("=" * 500 + "-" * 500 + "_" * 300)
    return lines


def whitespace_lines(n):
    ws = [" ", "  ", "   ", "\t", "\t\t", " \t", "\t ", "\u00a0", "\u3000", "\u2003", "\u2009", "\x0b", "\x0c", "    ", "        "]
    words = ["word", "x", "Hello", "世界", "مرحبا", "123", "!", "--", "()", "'s", "ĉu", "🎉", "über", "a.b", "\"q\""]
    lines = []
    while len(lines) < n:
        k = rng.randrange(8)
        if k == 0:
            lines.append("")
        elif k == 1:
            lines.append("".join(rng.choice(ws) for _ in range(rng.randint(1, 6))))
        elif k == 2:
            lines.append(" " * rng.randint(1, 300) + rng.choice(words) + " " * rng.randint(0, 50))
        elif k == 3:
            lines.append("\t" * rng.randint(1, 40) + rng.choice(words))
        else:
            parts = []
            for _ in range(rng.randint(1, 8)):
                parts.append(rng.choice(ws) * rng.randint(1, 4))
                parts.append(rng.choice(words))
            if rng.random() < 0.5:
                parts.append(rng.choice(ws))
            lines.append("".join(parts))
        if rng.random() < 0.25:
            lines[-1] += "\r"  # the file gets CRLF line ends here and there
    return lines


def numbers_punct_lines(n):
    lines = [
        "0 1 2 3 4 5 6 7 8 9 10 11 100 1000 10000 100000 1000000",
        "3.14159265358979323846264338327950288419716939937510582097494459230781640628620899",
        "٠١٢٣٤٥٦٧٨٩ ۰۱۲۳۴۵۶۷۸۹ ०१२३४५६७८९ ০১২৩৪৫৬৭৮৯ ๐๑๒๓๔๕๖๗๘๙ ０１２３４５６７８９",
        "!!! ??? ... ;;; ::: ,,, --- === +++ *** ### @@@ $$$ %%% ^^^ &&& ||| ~~~ ``` ''' \"\"\"",
        "(((nested))) [[[brackets]]] {{{braces}}} <<<angles>>> /\\/\\/\\ \\\\server\\share",
        "+1 (555) 123-4567, +44 20 7946 0958, +86 10 1234 5678",
        "192.168.0.1 10.0.0.255 ::1 fe80::1ff:fe23:4567:890a 2001:db8::/32",
        "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "ISBN 978-3-16-148410-0; DOI 10.1000/182; ORCID 0000-0002-1825-0097",
        "1st 2nd 3rd 4th 21st 22nd 101st 1,000,000 1.000.000 1 000 000 1'000'000",
        "½ + ¼ = ¾; 2² + 3³ = 31; 10⁻³ = 0.001; H₂O; CO₂",
        "Ⅰ. Ⅱ. Ⅲ. Ⅳ. ① ② ③ ⑴ ⑵ ⒈ ⒉ 🄀 🄁",
    ]
    puncts = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + ["…", "—", "–", "·", "•", "※", "。", "、", "！", "？", "：", "；"]
    while len(lines) < n:
        k = rng.randrange(6)
        if k == 0:
            lines.append(" ".join(number() for _ in range(rng.randint(1, 10))))
        elif k == 1:
            lines.append("".join(rng.choice(puncts) for _ in range(rng.randint(1, 40))))
        elif k == 2:
            lines.append(f"{number()} {rng.choice(['+', '-', '*', '/', '^', '%', '=='])} {number()} = {number()}")
        elif k == 3:
            lines.append("".join(rng.choice("0123456789") for _ in range(rng.randint(10, 120))))
        elif k == 4:
            lines.append(rng.choice(["Total", "Sum", "合计", "Итого", "المجموع", "Σ"]) + ": " + number() + rng.choice(puncts) * rng.randint(1, 3))
        else:
            lines.append("|" + "|".join(f" {number()} " for _ in range(rng.randint(2, 6))) + "|")
    return lines


def chat_message(pool):
    return rng.choice(pool) + (" " + rng.choice(pool) if rng.random() < 0.4 else "")


def special_lines(n):
    lines = []
    for s in SPECIAL:
        lines += s.split("\n")
    all_pools = LATIN + CJK + RTL + CYRILLIC_GREEK + EMOJI
    tokens = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
              "<tool_response>", "</tool_response>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
              "<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|im_start", "im_end|>", "<|", "|>", "<", ">"]
    while len(lines) < n:
        k = rng.randrange(4)
        if k == 0:
            role = rng.choice(["system", "user", "assistant", "tool"])
            lines.append(f"<|im_start|>{role}")
            lines.append(chat_message(all_pools) + "<|im_end|>")
        elif k == 1:
            parts = [rng.choice(all_pools)[: rng.randint(0, 40)] for _ in range(rng.randint(2, 5))]
            s = ""
            for p in parts:
                s += p + rng.choice(tokens) + rng.choice(["", " ", "  "])
            lines.append(s)
        elif k == 2:
            lines.append(rng.choice(["<think>", "</think>", "<think> ", " </think>"]) + chat_message(all_pools))
        else:
            lines.append("<tool_call>{\"name\": \"f" + str(rng.randrange(100)) + "\", \"arguments\": {\"q\": " +
                         json.dumps(chat_message(all_pools), ensure_ascii=rng.random() < 0.3) + "}}</tool_call>")
    return lines


def mixed_lines(n):
    pools = [LATIN, CJK, RTL, INDIC_SEA, CYRILLIC_GREEK, EMOJI, EDGE]
    lines = []
    while len(lines) < n:
        parts = []
        for _ in range(rng.randint(2, 5)):
            pool = rng.choice(pools)
            s = rng.choice(pool)
            if rng.random() < 0.5:
                a = rng.randrange(len(s))
                s = s[a:a + rng.randint(3, 40)]
            parts.append(s)
        sep = rng.choice(["", " ", "  ", "\t", " / ", "、", "—", "'", "'s ", "\u00a0"])
        lines.append(sep.join(parts))
    return lines


CONTROLS = ["\x00", "\x01", "\x07", "\x08", "\x1b[31m", "\x1b[0m", "\x7f", "\u0080", "\u0085", "\u009f", "\x0b", "\x0c",
            "\x1c", "\x1d\x1e\x1f", "\x00\x00", "\u200b", "\ufeff", "\u2028", "\u2029"]
NEWLINES = ["\n", "\n", "\n\n", "\r\n", "\r\n\r\n", " \n", "\n  ", "\t\n", "\n\t", "\r", "\n\n\n\n", "  \r\n  ",
            "\n \n", " \n\n ", "\r\r\n", "\n\r", "\u3000\n", "\n\u00a0", "\u2028", "\u0085"]


def multiline_entries(n):
    pools = [LATIN, CJK, RTL, INDIC_SEA, CYRILLIC_GREEK, EMOJI, EDGE, SPECIAL]
    code = [CODE_PY, CODE_CPP, CODE_JSON, CODE_JS_MIN, CODE_SQL, CODE_MISC]
    out = [
        "", " ", "\n", "\r\n", "\n\n\n", "   \n   ", "\t\t\n\t", "x", "\x00", "a\x00b", "\ufeff", "\u0301",
        " \u0301", "\n\u0301", "'s", "'S", "'ſ", "'ſa", "'stuff", "'ll'LL'Ll", "''s", "e\u0301'd",
        "   leading spaces", "trailing spaces   ", "trailing newline\n", "\n\nleading newlines",
    ] + code
    while len(out) < n:
        k = rng.randrange(5)
        if k == 4:
            s = rng.choice(code)
            a = rng.randrange(len(s))
            out.append(s[a:a + rng.randint(20, 400)])
            continue
        parts = []
        for _ in range(rng.randint(1, 6)):
            s = rng.choice(rng.choice(pools))
            if rng.random() < 0.3:
                a = rng.randrange(len(s))
                s = s[a:a + rng.randint(1, 30)]
            parts.append(s)
            parts.append(rng.choice(NEWLINES))
            if rng.random() < 0.25:
                parts.append(rng.choice(CONTROLS))
        if rng.random() < 0.5:
            parts.pop()
        out.append("".join(parts))
    return out


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "tests", "tokenizer", "corpus")
    os.makedirs(out_dir, exist_ok=True)
    files = {
        "prose_latin": prose_file(LATIN, 700),
        "prose_cjk": prose_file(CJK, 500, cased=False),
        "prose_rtl": prose_file(RTL, 350, cased=False),
        "prose_indic_sea": prose_file(INDIC_SEA, 350, cased=False),
        "prose_cyrillic_greek": prose_file(CYRILLIC_GREEK, 400),
        "code": code_lines(700),
        "emoji": prose_file(EMOJI, 300, cased=False),
        "unicode_edge": prose_file(EDGE, 400),
        "whitespace": whitespace_lines(500),
        "numbers_punct": numbers_punct_lines(400),
        "special_tokens": special_lines(400),
        "mixed": mixed_lines(600),
    }
    for name, lines in files.items():
        with open(os.path.join(out_dir, name + ".txt"), "w", encoding="utf-8", newline="") as f:
            f.write("\n".join(lines) + "\n")
    with open(os.path.join(out_dir, "multiline.jsonl"), "w", encoding="utf-8", newline="") as f:
        for s in multiline_entries(1500):
            f.write(json.dumps(s, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
