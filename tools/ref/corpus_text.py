# -*- coding: utf-8 -*-
"""Hand-written seed text for the tokenizer corpus (tools/ref/make_tokenizer_corpus.py).

Each pool is a list of lines in one script or style; the generator mixes and varies them.
"""

LATIN = [
    "The quick brown fox jumps over the lazy dog.",
    "It's a truth universally acknowledged that a single man in possession of a good fortune must be in want of a wife.",
    "I'm sure you'll agree: we've seen this before, and they'd rather not repeat it.",
    "SHE'S GONE. HE'LL BE BACK. WE'RE DONE. THEY'VE LEFT. I'M HERE. YOU'D KNOW. DON'T.",
    "She's gone; he'll be back; we're done; they've left; I'm here; you'd know; don't.",
    "Rock 'n' roll isn't dead — it's just sleeping, isn't it?",
    "O'Brien's dog's bowl wasn't where the Smiths' cat had left it.",
    "'Tis the season; 'twas the night before; ma'am, y'all'd've known.",
    "Mixed Case Contractions: It'S, iT's, WE'Re, they'Ve, I'M, she'LL, he'D.",
    "Le cœur a ses raisons que la raison ne connaît point.",
    "Où est la bibliothèque ? Elle est à côté de l'église, près du château.",
    "L'été dernier, j'ai lu « Les Misérables » d'une traite ; c'était long !",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein.",
    "Die Straße ist naß, weil es geregnet hat; Grüße aus Köln und Düsseldorf.",
    "Donaudampfschifffahrtsgesellschaftskapitänsmützenabzeichen ist ein langes Wort.",
    "¿Dónde está la estación? ¡Está allí, señor! Mañana llegaremos a Cádiz.",
    "El niño comió piña y jamón en el año dos mil veintitrés.",
    "A criança não quer comer pão; ela prefere maçã e açaí.",
    "Perché l'acqua è così fredda? Perché è già inverno, caro mio.",
    "Zażółć gęślą jaźń. Pchnąć w tę łódź jeża lub ośm skrzyń fig.",
    "Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "Pijamalı hasta yağız şoföre çabucak güvendi. İstanbul'da ılık bir gün.",
    "Tiếng Việt có rất nhiều dấu: ả, ã, ạ, ẩ, ẫ, ậ, ở, ỡ, ợ, ữ, ự.",
    "Þú ert ágætur, en ég hef séð betri daga á Íslandi.",
    "Høyt oppe i fjellet ligger en liten hytte; ærlig talt, åpenbart.",
    "Årets första snö föll över Göteborg och Malmö i natt.",
    "Hyvää huomenta! Pöydällä on kahvia ja pullaa.",
    "Egy hűtlen vejét fülöncsípő, dühös mexikói úr Wesselényinél mázol.",
    "Dzień dobry, proszę pana. Ile kosztuje ten chleb?",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.",
    "Naïve café owners in Zürich serve crème brûlée to résumé-bearing protégés.",
    "The year 1984 wasn't like '1984'; prices rose 3.5% to $1,299.99 (approx.).",
    "Email me at jane.doe+test@example.co.uk or visit https://example.org/path?q=1&r=two#frag.",
    "Mr. and Mrs. Dursley, of number four, Privet Drive, were proud to say that they were perfectly normal.",
    "In 1492, Columbus sailed the ocean blue; in 1969, Armstrong walked on the Moon.",
    "Wait... what?! No way!!! Are you serious???",
    "He said, \"It's over,\" and she replied, 'Is it, though?'",
    "Tabs\tseparate\tthese\twords, and  double  spaces  separate  those.",
    "ALL CAPS SENTENCES SHOUT; lowercase ones whisper; CamelCaseWordsJoin; snake_case_words_too.",
    "Kubernetes, PostgreSQL, JavaScript, macOS, iPhone, eBay, YouTube and GitHub are brand names.",
]

CJK = [
    "我们今天去公园散步，天气非常好。",
    "人工智能正在改变世界，但我们仍需谨慎对待它带来的风险。",
    "這是一個繁體中文的句子，用來測試分詞器。",
    "北京欢迎你！上海、广州和深圳也都是大城市。",
    "他说：“明天见。”我回答：‘好的，不见不散。’",
    "《红楼梦》是中国古典小说的巅峰之作，共一百二十回。",
    "价格是￥1,280元，折扣后只要９９９元（含税）。",
    "学而时习之，不亦说乎？有朋自远方来，不亦乐乎？",
    "床前明月光，疑是地上霜。举头望明月，低头思故乡。",
    "今日は良い天気ですね。散歩に行きましょう。",
    "私の名前は田中です。東京に住んでいます。よろしくお願いします。",
    "カタカナとひらがなと漢字が混ざった文章を書きます。",
    "ｶﾀｶﾅ半角とカタカナ全角の違いを確認してください。",
    "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。",
    "東京タワーの高さは３３３メートルです。",
    "안녕하세요! 저는 한국어를 공부하고 있습니다.",
    "서울은 대한민국의 수도이며 인구가 약 천만 명입니다.",
    "오늘 날씨가 정말 좋네요. 같이 커피 한잔 할까요?",
    "한글은 세종대왕이 1443년에 창제하였다.",
    "中文English混合mixed文本text测试test。",
    "第３章：ＡＢＣ株式会社の２０２４年度決算報告",
    "【重要】お知らせ：システムメンテナンスのため、サービスを一時停止します。",
    "「こんにちは」と彼女は言った。『さようなら』と彼は答えた。",
    "粤语：你食咗饭未呀？我哋一齐去饮茶啦。",
    "𠮷野家の牛丼と𩸽の塩焼き定食。",
    "一二三四五六七八九十百千万亿",
]

RTL = [
    "مرحبا بالعالم! كيف حالك اليوم؟",
    "اللغة العربية جميلة جداً، وهي لغة القرآن الكريم.",
    "بِسْمِ ٱللَّٰهِ ٱلرَّحْمَٰنِ ٱلرَّحِيمِ",
    "العدد ١٢٣٤٥٦٧٨٩٠ مكتوب بالأرقام العربية الهندية.",
    "ذهبتُ إلى المكتبة يوم الأحد، واشتريتُ ثلاثة كتب.",
    "שלום עולם! מה שלומך היום?",
    "בְּרֵאשִׁית בָּרָא אֱלֹהִים אֵת הַשָּׁמַיִם וְאֵת הָאָרֶץ.",
    "העברית נכתבת מימין לשמאל, כמו הערבית.",
    "ירושלים היא עיר עתיקה מאוד; יש בה 900,000 תושבים.",
    "سلام دنیا! امروز هوا خیلی خوب است.",
    "من به دانشگاه تهران می‌روم و زبان فارسی می‌خوانم.",
    "یہ اردو زبان کا ایک جملہ ہے۔",
    "Mixed: العربية and English in one line, שלום too.",
    "\u200fRLM mark then text: مرحبا \u200eLRM mark: hello",
]

INDIC_SEA = [
    "नमस्ते दुनिया! आप कैसे हैं?",
    "भारत एक विशाल देश है जिसमें अनेक भाषाएँ बोली जाती हैं।",
    "हिन्दी देवनागरी लिपि में लिखी जाती है। संख्याएँ: १२३४५६७८९०",
    "क्षत्रिय, ज्ञान, श्रद्धा, द्वार, प्रकृति — संयुक्ताक्षर।",
    "আমি বাংলায় গান গাই। বাংলাদেশ আমার দেশ।",
    "தமிழ் ஒரு பழமையான மொழி. வணக்கம்!",
    "తెలుగు భాష చాలా అందమైనది.",
    "ಕನ್ನಡ ಸಾಹಿತ್ಯ ಬಹಳ ಶ್ರೀಮಂತವಾಗಿದೆ.",
    "മലയാളം ഒരു ദ്രാവിഡ ഭാഷയാണ്.",
    "ਪੰਜਾਬੀ ਗੁਰਮੁਖੀ ਲਿਪੀ ਵਿੱਚ ਲਿਖੀ ਜਾਂਦੀ ਹੈ।",
    "ગુજરાતી ભાષા સુંદર છે.",
    "สวัสดีครับ วันนี้อากาศดีมาก",
    "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ ทำให้การตัดคำเป็นเรื่องยาก",
    "กรุงเทพมหานคร อมรรัตนโกสินทร์ มหินทรายุธยา",
    "ตัวเลขไทย: ๑๒๓๔๕๖๗๘๙๐",
    "ພາສາລາວມີຄວາມງາມ.",
    "ភាសាខ្មែរគឺជាភាសាផ្លូវការរបស់ប្រទេសកម្ពុជា។",
    "မြန်မာဘာသာစကား လှပသည်။",
    "བོད་ཡིག་ནི་སྐད་ཡིག་ཅིག་ཡིན།",
    "සිංහල භාෂාව ලස්සනයි.",
    "ქართული ენა ძალიან ლამაზია.",
    "Հայերենը հին լեզու է։",
    "አማርኛ የኢትዮጵያ ቋንቋ ነው።",
]

CYRILLIC_GREEK = [
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Москва — столица России; население около 13 миллионов человек.",
    "Привет, мир! Как дела? Всё хорошо, спасибо.",
    "В чащах юга жил бы цитрус? Да, но фальшивый экземпляр!",
    "Ґава, їжак, єнот і Україна — українські літери.",
    "Љубав, њива, ђак, ћерка, џеп — српска ћирилица.",
    "Български език: щастие, юнак, ябълка, ъгъл.",
    "ЗАГЛАВНЫЕ БУКВЫ И строчные буквы В ОДНОЙ строке.",
    "Τάχιστη αλώπηξ βαφής ψημένη γη, δρασκελίζει υπέρ νωθρού κυνός.",
    "Καλημέρα! Πώς είστε σήμερα; Είμαι καλά, ευχαριστώ.",
    "Η Αθήνα είναι η πρωτεύουσα της Ελλάδας.",
    "Ἐν ἀρχῇ ἦν ὁ λόγος, καὶ ὁ λόγος ἦν πρὸς τὸν θεόν.",
    "ΑΛΦΑΒΗΤΟ: Α Β Γ Δ Ε Ζ Η Θ Ι Κ Λ Μ Ν Ξ Ο Π Ρ Σ Τ Υ Φ Χ Ψ Ω; σίγμα τελικό: ς.",
    "Математика: π ≈ 3.14159, e ≈ 2.71828, φ ≈ 1.618.",
    "Қазақ тілі, Тоҷикӣ, Монгол хэл — other Cyrillic alphabets.",
]

CODE_PY = '''def fibonacci(n: int) -> list[int]:
    """Return the first n Fibonacci numbers."""
    a, b = 0, 1
    result = []
    for _ in range(n):
        result.append(a)
        a, b = b, a + b
    return result


class Tokenizer:
    def __init__(self, vocab: dict[str, int], merges: list[tuple[str, str]]):
        self.vocab = vocab
        self.ranks = {pair: i for i, pair in enumerate(merges)}

    def __repr__(self):
        return f"Tokenizer(vocab={len(self.vocab)}, merges={len(self.ranks)})"


if __name__ == "__main__":
    import sys, json
    print(json.dumps({"fib": fibonacci(10)}, indent=2), file=sys.stderr)
    xs = [x ** 2 for x in range(10) if x % 2 == 0]
    lambda_fn = lambda x, *args, **kwargs: (x, args, kwargs)
    assert xs == [0, 4, 16, 36, 64], f"unexpected: {xs!r}"
'''

CODE_CPP = '''#include <algorithm>
#include <iostream>
#include <vector>

template <typename T>
std::vector<T> sorted_copy(std::vector<T> v) {
    std::sort(v.begin(), v.end(), [](const T& a, const T& b) { return a < b; });
    return v;
}

namespace strata::detail {
struct Point { int x = 0, y = 0; };
constexpr int kMaxTokens = 1 << 20;
}  // namespace strata::detail

int main(int argc, char** argv) {
    std::vector<int> xs{5, 3, 1, 4, 2};
    for (auto& x : sorted_copy(xs)) std::cout << x << ' ';
    if (argc > 1 && argv[1][0] == '-') return -1;
    auto* p = new strata::detail::Point{1, 2};
    delete p; // not ideal, use std::unique_ptr<Point>
    return xs.size() >= 5 ? 0 : 1;
}
'''

CODE_JSON = '''{
  "name": "strata",
  "version": "0.1.0",
  "tokens": [151644, 872, 198, 3838, 374],
  "nested": {"a": [1, 2.5, -3e10, true, false, null], "b": {"c": "d\\u00e9\\n\\t"}},
  "empty": {}, "list": [], "unicode": "日本語 ✓ émoji 🎉",
  "escaped": "quote \\" backslash \\\\ slash \\/ tab \\t"
}
'''

CODE_JS_MIN = '''!function(e,t){"object"==typeof exports&&"undefined"!=typeof module?module.exports=t():"function"==typeof define&&define.amd?define(t):(e=e||self).Lib=t()}(this,function(){"use strict";var e=function(e,t){return e+t},t={a:1,b:[2,3],c:{d:"x"}};function n(n){for(var r=0,o=0;o<n.length;o++)r+=n.charCodeAt(o)<<o%8;return r>>>0}return{add:e,hash:n,cfg:t,v:"1.2.3"}});
const f=async(a,b=2,...c)=>{const{x,y:[z]}=await g?.(a)??{};return`${a}-${b}:${c.join(",")}`;};let r=/^(?:[a-z0-9!#$%&'*+/=?^_`{|}~-]+)@\\w+\\.[a-z]{2,}$/i;
'''

CODE_SQL = '''SELECT u.id, u.name, COUNT(o.id) AS orders, SUM(o.total) AS revenue
FROM users u
LEFT JOIN orders o ON o.user_id = u.id AND o.status <> 'cancelled'
WHERE u.created_at >= '2024-01-01' AND u.email LIKE '%@example.com'
GROUP BY u.id, u.name
HAVING COUNT(o.id) > 3
ORDER BY revenue DESC NULLS LAST
LIMIT 50 OFFSET 100;
INSERT INTO logs (level, msg) VALUES ('WARN', 'it''s late'), ('ERROR', E'line1\\nline2');
CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_orders_user ON orders(user_id);
'''

CODE_MISC = '''#!/usr/bin/env bash
set -euo pipefail
for f in *.gguf; do echo "${f%.gguf}: $(stat -c %s "$f") bytes"; done | sort -k2 -n
fn main() { let v: Vec<u32> = (0..10).map(|x| x * x).collect(); println!("{:?}", v); }
<div class="card" id="main"><a href="/x?y=1&amp;z=2">Link &lt;here&gt;</a></div>
key: value
list:
  - item one
  - "item: two"
--- a/src/main.cpp
+++ b/src/main.cpp
@@ -1,3 +1,4 @@
+#include <cstdio>
 int main() {}
\\begin{equation} E = mc^2 \\quad \\sum_{i=0}^{n} x_i^2 \\end{equation}
id,name,price
1,"Widget, large",9.99
0x7fffffff 0b1010 0o777 1e-9 3.14f 1_000_000 -0.0 +inf NaN
'''

EMOJI = [
    "👍 👍🏻 👍🏼 👍🏽 👍🏾 👍🏿",
    "👨‍👩‍👧‍👦 family, 👩‍❤️‍💋‍👨 kiss, 🧑‍🤝‍🧑 people holding hands",
    "🏳️‍🌈 🏳️‍⚧️ 🏴‍☠️ flags with ZWJ",
    "🇺🇸 🇬🇧 🇯🇵 🇩🇪 🇫🇷 🇨🇳 🇮🇳 🇧🇷 regional indicators",
    "🏴󠁧󠁢󠁥󠁮󠁧󠁿 🏴󠁧󠁢󠁳󠁣󠁴󠁿 tag sequences",
    "1️⃣ 2️⃣ #️⃣ *️⃣ keycaps",
    "❤️ ♥️ ☺️ ✌️ ✌🏽 variation selectors",
    "👩🏽‍💻 👨🏿‍🚀 🧑🏼‍🍳 👩🏻‍⚕️ professions with tones",
    "🤦‍♂️🤷‍♀️🙋🏾‍♂️ gestures joined",
    "😀😃😄😁😆😅😂🤣🥲☺️😊😇🙂🙃😉😌😍🥰😘",
    "Great job!!! 🎉🎉🎉 See you at 5pm 🕔 — don't be late 😅",
    "🐶🐱🐭🐹🐰🦊🐻🐼🐨🐯🦁🐮🐷🐸🐵",
    "Emoji inside words: co🔥ol, ✨magic✨, rock🎸n🎸roll",
    "🧔🏻‍♂️ 👯‍♀️ 🫱🏼‍🫲🏿 handshake with two tones",
    "Text emoji :) :( :D ;-) <3 ¯\\_(ツ)_/¯ (╯°□°)╯︵ ┻━┻",
]

EDGE = [
    "Decomposed: e\u0301 a\u0300 o\u0308 n\u0303 c\u0327 u\u030a A\u030a",
    "Stacked marks: a\u0301\u0302\u0303\u0304 z\u0335\u0336 Z\u0338 q\u0323\u0307",
    "Mark order: s\u0323\u0307 vs s\u0307\u0323 and d\u0307\u0323",
    "Zalgo: T\u0337h\u0334e\u0336 \u0335q\u0338u\u0337i\u0334c\u0336k",
    "Hangul jamo: \u1100\u1161\u11a8 \u1112\u1161\u11ab \u1100\u1173\u11af",
    "Full-width: ＡＢＣ ａｂｃ ０１２３ ！＂＃＄％＆（）＊＋，－．／：；＜＝＞？＠",
    "Full-width sentence: Ｈｅｌｌｏ，　Ｗｏｒｌｄ！　１２３４５",
    "Math: 𝐀𝐁𝐂 𝑎𝑏𝑐 𝔸𝔹ℂ 𝟘𝟙𝟚 ∀x∈ℝ: x²≥0, ∑ᵢ aᵢ, ∫₀^∞ e^{-x} dx = 1",
    "Superscripts and fractions: x² y³ ½ ¼ ¾ ⅓ ⅔ ⁰¹²³⁴⁵⁶⁷⁸⁹ ₀₁₂₃",
    "Roman numerals: Ⅰ Ⅱ Ⅲ Ⅳ Ⅻ ⅰ ⅱ ⅲ ↀ ↁ",
    "Circled: ① ② ③ ⑩ ⑳ Ⓐ ⓑ ㉑ ㊿",
    "Ligatures: ﬁ ﬂ ﬀ ﬃ ﬄ ﬅ ﬆ Ĳ ĳ Œ œ Æ æ ß ẞ",
    "Long s contractions: I'ſ it'ſt ſo? HE'ſ ſure",
    "Spaces: a\u00a0b a\u2009b a\u200ab a\u2002b a\u3000b a\u202fb a\u205fb a\u1680b",
    "Zero width: a\u200bb a\u200cb a\u200db a\u2060b \ufeffBOM inside",
    "Separators: line\u2028separator and paragraph\u2029separator",
    "NEL: next\u0085line and  \u0085  spaced",
    "BOM then punct: \ufeff!! \ufeff\ufeff?? x\ufeff.",
    "Soft hyphen: hy\u00adphen\u00adation, non\u2011breaking hyphen",
    "Quotes: ‘single’ “double” „low“ ‹angle› «guillemets» 「corner」",
    "Dashes: - ‐ ‑ ‒ – — ― ⁓ − and ellipsis …",
    "Arrows and symbols: → ← ↑ ↓ ⇒ ⇔ ∞ ≠ ≤ ≥ ± × ÷ ° ™ © ® § ¶ † ‡ • ‰",
    "Currency: $ € £ ¥ ₹ ₽ ₩ ₪ ₫ ₿ ¢ ₴ ₺",
    "Box drawing: ┌─┬─┐ │ │ │ ├─┼─┤ └─┴─┘ ░▒▓█",
    "Braille: ⠓⠑⠇⠇⠕ ⠺⠕⠗⠇⠙",
    "Private use: \ue000\ue001 and noncharacter-free text",
    "Combining on digits and spaces: 1\u20e3 \u0301 x \u0308!",
    "Cherokee: ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ, Ogham: ᚛ᚁᚂᚃ᚜, Runic: ᚠᚢᚦᚨᚱᚲ",
    "Vietnamese decomposed: Vie\u0302\u0323t Nam, Tie\u0302\u0301ng Vie\u0302\u0323t",
    "Compatibility (not changed by NFC): ﬁ ① ² ㎏ ㍻ Ⅷ ｶ",
    "Singletons changed by NFC: \u212b (Angstrom) \u2126 (Ohm) \u212a (Kelvin) \u0340\u0341 \u037e",
]

SPECIAL = [
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>",
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\nHi there!<|im_end|>",
    "<think>\nLet me think step by step.\n</think>\n\nThe answer is 42.",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
    "<tool_response>\n{\"temp\": 21}\n</tool_response>",
    "Text<|endoftext|>More text<|endoftext|><|endoftext|>",
    "<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>\n    return c<|fim_middle|>c = a + b",
    "<|repo_name|>strata<|file_sep|>src/main.cpp",
    "Partial tokens: <|im_start <im_start|> <|im_end| <think <think> </think </tool_call <|endoftext|",
    "Nested-looking: <<|im_start|>> <|<|im_end|>|> <think><think></think></think>",
    "Adjacent: <|im_start|><|im_end|><|endoftext|><think></think>",
    "<|vision_start|><|image_pad|><|vision_end|> describe the image",
    "<|object_ref_start|>the red car<|object_ref_end|><|box_start|>(10,20),(30,40)<|box_end|>",
    "Spaces around: <|im_start|> user <|im_end|> \n <think> x </think> ",
    "Case variants are plain text: <|IM_START|> <Think> <TOOL_CALL>",
    "[PAD151669] is not an added token in the tokenizer, it's plain text",
    "<|quad_start|><|quad_end|><|video_pad|><|vision_pad|><|fim_pad|>",
]
