#!/usr/bin/env python3
"""Tokenizer conformance goldens: a fixed test corpus and the token ids Hugging Face
produces for it, for every tokenizer kvprobe must match.

    tools/.venv/bin/python tools/make_tokenizer_goldens.py      (needs `make models` first)

Corpus (tests/golden/tokenizer/corpus.jsonl.gz, one JSON object per line):
  {"i": n, "src": tag, "text": s}     a valid UTF-8 string
  {"i": n, "src": tag, "hex": h}      raw bytes (src "invalid-utf8", or "nul" for valid
                                      UTF-8 holding U+0000, kept out of "text" because C
                                      JSON readers stop strings at NUL)
  Built from /work/shared/datasets (first N rows of each file, file order), hand-picked
  hard cases and seeded random mixtures. No randomness without a fixed seed.

Reference input of a line: `text`, or for `hex` lines
`bytes.fromhex(hex).decode("utf-8", errors="replace")` (Python's maximal-subpart U+FFFD
replacement; kvprobe applies the same replacement before tokenizing).

Tokenizers (TOKENIZERS below):
  qwen3, gemma3, llama3       tokenizers.Tokenizer.from_file(/work/shared/tokenizers/<x>/tokenizer.json)
  gemma3-270m-gguf,           transformers AutoTokenizer.from_pretrained("models", gguf_file=...)
  smollm2-gguf                (the fast tokenizer transformers builds from the GGUF; its backend
                              tokenizers.Tokenizer is used)
Modes, both with add_special_tokens=False (no BOS/EOS added):
  special  HF default: added tokens written in the text match as single tokens
  plain    Tokenizer.encode_special_tokens = True: tokens flagged special=True are NOT matched
           (non-special added tokens, e.g. Qwen3 <think>, Gemma "\\n\\n" / "<table>", still are)

Outputs in tests/golden/tokenizer/ (gzip files written with mtime 0, level 9):
  corpus.jsonl.gz
  <tok>.special.ids.gz   line i: ids of corpus line i, space-separated ("" if none)
  <tok>.plain.ids.gz
  <tok>.decode.gz        line i: json.dumps(decode(plain ids, skip_special_tokens=False),
                         ensure_ascii=False), decoded by the tokenizers.Tokenizer itself
                         (no transformers clean_up_tokenization_spaces)
  meta.json              per tokenizer: source, pipeline JSON, bos/eos, add_bos, added tokens,
                         statistics; plus corpus counts per source
Deterministic: a rerun writes byte-identical files.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import importlib.metadata
import io
import json
import os
import random
import sys
import unicodedata
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
SHARED_TOK = Path("/work/shared/tokenizers")
DATASETS = Path("/work/shared/datasets")
MODELS = ROOT / "models"
OUT = ROOT / "tests" / "golden" / "tokenizer"

SHARED = ["qwen3", "gemma3", "llama3"]
GGUF = {"gemma3-270m-gguf": "gemma-3-270m-q4_k_m.gguf", "smollm2-gguf": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "qwen2.5-gguf": "qwen2.5-coder-0.5b-instruct.gguf"}
# Derived variant, not a Hugging Face artifact: smollm2-gguf with a Digits(individual_digits=True)
# pre-tokenizer in front of its ByteLevel one. transformers' GGUF converter ignores
# tokenizer.ggml.pre = "smollm" and builds a plain GPT-2 ByteLevel pre-tokenizer, so digit runs
# stay together; llama.cpp's "smollm" pre-tokenizer splits every \p{N} first (as, we believe,
# the upstream SmolLM2 tokenizer.json does: VERIFY). This variant is the reference for that.
# qwen2.5-gguf-nfc: qwen2.5-gguf with the NFC normalizer of the Qwen family's tokenizer.json
# (Qwen2.5's, like the shared Qwen3 one, normalizes NFC; transformers' GGUF converter drops it).
# Checked below: its ids equal the shared Qwen3 tokenizer.json's (same vocabulary, merges and
# regex) on every corpus string that holds no added token the two files do not share.
DERIVED = {"smollm2-gguf-digits": "smollm2-gguf", "qwen2.5-gguf-nfc": "qwen2.5-gguf"}
TOKENIZERS = SHARED + list(GGUF) + list(DERIVED)


# --------------------------------------------------------------------------------------------
# corpus
# --------------------------------------------------------------------------------------------

def _datasets() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    # GSM8K: questions, then worked answers (with <<calc>> annotations and "#### n")
    rows = [json.loads(line) for line in open(DATASETS / "gsm8k/test.jsonl", encoding="utf-8")]
    out += [("gsm8k-q", r["question"]) for r in rows[:150]]
    out += [("gsm8k-a", r["answer"]) for r in rows[:100]]
    # BoolQ: passages (quoted CSV fields with commas) and questions
    for part, n in (("dev_part1.csv", 100), ("dev_part2.csv", 50)):
        with open(DATASETS / "boolq" / part, encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
        out += [("boolq-passage", r["passage"]) for r in rows[:n]]
        if part == "dev_part1.csv":
            out += [("boolq-q", r["question"]) for r in rows[:30]]
    # ARC: stem plus lettered choices, the way an eval prompt shows them
    for name in ("arc_easy", "arc_challenge"):
        rows = [json.loads(line) for line in open(DATASETS / name / "test.jsonl", encoding="utf-8")]
        for r in rows[:100]:
            q = r["question"]
            text = q["stem"] + "\n" + "\n".join(f"{c['label']}. {c['text']}" for c in q["choices"])
            out.append((name.replace("_", "-"), text))
    # SST-2: tokenized lowercase sentences with " 's", " --", trailing space
    with open(DATASETS / "sst2/dev.tsv", encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")
    assert lines[0] == "text\tlabel"
    sents = [ln.rsplit("\t", 1)[0] for ln in lines[1:] if ln]
    out += [("sst2", s) for s in sents[:200]]
    # BBH: first 8 inputs of each of the 27 tasks, tasks in file-name order
    for p in sorted((DATASETS / "bbh").glob("*.json")):
        ex = json.load(open(p, encoding="utf-8"))["examples"]
        out += [("bbh", e["input"]) for e in ex[:8]]
    # MBPP: prompts, reference code, asserts
    rows = json.load(open(DATASETS / "mbpp/sanitized-mbpp.json", encoding="utf-8"))
    out += [("mbpp-prompt", r["prompt"]) for r in rows[:150]]
    out += [("mbpp-code", r["code"]) for r in rows[:150]]
    out += [("mbpp-test", "\n".join(r["test_imports"] + r["test_list"])) for r in rows[:100]]
    # HumanEval: prompts (docstrings, 4-space indents), solutions, test code
    with gzip.open(DATASETS / "humaneval/HumanEval.jsonl.gz", "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    out += [("humaneval-prompt", r["prompt"]) for r in rows]
    out += [("humaneval-solution", r["canonical_solution"]) for r in rows]
    out += [("humaneval-test", r["test"]) for r in rows[:60]]
    return out


HARD_TEXT: dict[str, list[str]] = {
    "cjk": [
        "你好，世界！", "我爱北京天安门。", "机器学习是人工智能的一个分支。", "繁體中文測試：臺灣、香港。",
        "こんにちは、世界！", "カタカナとひらがなと漢字の混在テキストです。", "東京タワーは333メートルです。",
        "ｶﾀｶﾅ ﾊﾝｶｸ", "「引用」『二重』（括弧）【強調】", "안녕하세요 세계", "한국어 텍스트 토크나이저 테스트입니다.",
        "\u1112\u1161\u11ab\u1100\u1173\u11af", "한글", "ＡＢＣ１２３ｘｙｚ", "全角　スペース　区切り",
        "中文English混合Text测试", "𠀀𠀁𪚥 (CJK Ext B)", "丽 丽 (U+F900 vs U+4E3D)", "豈更車",
    ],
    "emoji": [
        "😀", "Hello 🌍!", "👍🏽", "👍🏻👍🏼👍🏽👍🏾👍🏿", "👨‍👩‍👧‍👦", "👩‍❤️‍💋‍👨", "🧑🏿‍💻 coding", "🏳️‍🌈",
        "🏳️‍⚧️", "🇺🇸🇯🇵🇩🇪🇫🇷", "🇺", "❤️ ❤ ♥", "1️⃣ 2️⃣ #️⃣ *️⃣", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "🤖🤖🤖🤖🤖", "🏽",
        "I❤️NY", "emoji at end 🎉", "🎉 emoji at start", "😀😃😄😁😆😅😂🤣", "👁️‍🗨️", "☺️☺︎",
    ],
    "combining": [
        "é", "e\u0301", "café", "cafe\u0301", "ñ n\u0303", "Å A\u030a \u212b", "\u2126 Ω", "o\u0308\u0304",
        "a\u0323\u0302 a\u0302\u0323 ậ", "Tiếng Việt có dấu", unicodedata.normalize("NFD", "Tiếng Việt có dấu"),
        "Z\u0337\u0322\u031ba\u0334l\u0338g\u0335o\u0336", "\u0301 leading combining", " \u0301", "x\u0301\u0301\u0301\u0301\u0301",
        "\u037e \u0387 \u1fef \u2000\u2001", "\u0958\u0959 \u0915\u093c", "\ufb1d \ufb2a", "\u0340\u0341 a\u0340",
        unicodedata.normalize("NFD", "Ελληνικά ΆΈΉ"), unicodedata.normalize("NFD", "Ångström naïve coöperate résumé"),
        "naïve café résumé coöperate", "ﬁ ﬂ ﬀ (ligatures)", "\u00c7\u0327 C\u0327\u0327",
    ],
    "rtl": [
        "مرحبا بالعالم", "العربية: ١٢٣٤٥", "مُحَمَّد", "שלום עולם", "The word שלום means peace",
        "\u200fright-to-left mark\u200e", "فارسی: سلام دنیا ۱۲۳", "עִבְרִית עם ניקוד", "اردو میں خوش آمدید",
        "mixed: abc مرحبا 123 שלום",
    ],
    "scripts": [
        "नमस्ते दुनिया", "स्वागत है।", "สวัสดีชาวโลก", "Γειά σου Κόσμε", "Привет, мир! ЁЖИК ёжик", "გამარჯობა",
        "Բարեւ", "வணக்கம் உலகம்", "হ্যালো ওয়ার্ল্ড", "ሰላም ዓለም", "བཀྲ་ཤིས་བདེ་ལེགས།", "សួស្តី​ពិភពលោក",
        "İstanbul ıi Iİ", "Straße STRASSE ß ẞ", "Hello世界مرحبا🌍Привет", "abc中文123def", "日本語とEnglishのmix",
        "ΑΒΓ abc αβγ", "ǅ ǈ ǋ (titlecase)", "ⰀⰁ Glagolitic", "ᚠᚢᚦᚨᚱᚲ runes", "ꦲꦏ꧀ꦱꦫ Javanese",
    ],
    "contractions": [
        "I'M", "I'm", "i'm", "don't", "DON'T", "Don'T", "it's", "IT'S", "'S", "'s", "'t", "'re", "'RE", "'ve", "'VE",
        "'m", "'ll", "'LL", "'d", "'D", "we'VE they'Re you'LL she'D he'S", "''s", "'", "''", "'''", "rock 'n' roll",
        "it’s (curly)", "y'all o'clock 'twas", "He'ſ here", "'sup", "'s'", "can't've", "dogs' bones", "'  s",
        "x'S", "1's 2's", "'ab'cd'ef'", " 's", "\n's", "Ｉ＇Ｍ",
    ],
    "crlf": [
        "line1\r\nline2\r\n", "a\rb", "\r\r\r", "\r\n\r\n", "text \r\n  indented", "trailing\r", "\r\nleading",
        "mixed\n\r\n\r", "a \r\n b", "x\t\r\n\ty", "!!!\r\n", "end.\r\n\r\n\r\nnext",
    ],
    "special-lookalike": [
        "<|im_start|>", "<|im_end|>", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "<start_of_turn>",
        "<end_of_turn>", "<start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\n", "<bos>", "<eos>", "<pad>",
        "<unk>", "<mask>", "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>user<|end_header_id|>\n\n",
        "<|endoftext|>", "<think>", "</think>", "<think>\nreasoning here\n</think>\n\nanswer", "<tool_call>", "</tool_call>",
        "<|im_", "<start_of", "<|eot", "<|im_end", "|im_end|>", "<<|im_end|>>", "<|im_end|><|im_end|>", "< |im_end| >",
        "<|IM_END|>", "<|im_end|> trailing", " <|im_end|>", "text<|im_end|>text", "<unused0>", "<unused99>", "<unused6241>",
        "<image_soft_token>", "<start_of_image>", "[multimodal]", "<table><tr><td>x</td></tr></table>", "<h1>Title</h1>",
        "<b>bold</b> <i>it</i>", "<s>", "</s>", "<|reserved_special_token_0|>", "<|python_tag|>", "<|eom_id|>",
        "<|finetune_right_pad_id|>", "<repo_name>", "<file_sep>", "<|fim_prefix|>", "<jupyter_code>", "<|vision_start|>",
        "<bos><bos>", "<<bos>>", "<bos >", "< bos>", "<eos>x<bos>", "<think></think>", "<think>\n\n</think>\n\n",
        "<start_of_turn><start_of_turn>", "<end_of_turn>\n", "\n<end_of_turn>", "<|eot_id|><|start_header_id|>",
        "x<|begin_of_text|>y", "<|begin_of_text|><|begin_of_text|>",
    ],
    "byte-fallback": [
        "\ufffd", "a\ufffdb", "▁", "▁▁", "▁▁▁▁", "▁hello", " ▁ ", "x▁▁y", "\ue000\uf8ff", "\U000f0000\U0010fffd",
        "\ufffe\uffff\ufdd0", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟘𝟙𝟚𝟛 𝟎𝟏", "𓀀𓀁𓀂", "🀄🃏", "∀x∈ℝ: ∑_{i=1}^{n} x_i² ≤ ∞", "√2 ≈ 1.414",
        "∮ E⋅da = Q", "⊕⊗⊢⊨ →⇒⟹", "┌─┐\n│x│\n└─┘", "⠓⠑⠇⠇⠕", "zero\u200bwidth", "zw\u200cnj zw\u200dj \u200d",
        "\ufeffBOM at start", "soft\u00adhyphen", "\ufe0f alone", "\U000e0001\U000e0041 tags", "\u00a0nbsp\u00a0",
        "\u2028line sep\u2029para sep", "next\u0085line", "\x7f", "\u0080\u0085\u009f", "\u061c\u2066\u2069",
        "\U0001d400\U0001d7ff", "☃★☆♠♣♥♦", "©®™℠", "°C ±5 µm ‰", "€£¥₹₽₿", "\u3000ideographic\u3000space",
    ],
    "whitespace": [
        " ", "  ", "\t", "\n", "\n\n", " \n ", "a \n b", "x \t\n y", "hello   world", "hello   ", "   hello",
        "\t\thello", "\n\nhello", " \u00a0hello", "\v\f", "a\vb\fc", " \t \t \t", "\t \t \t ", "\n \n \n",
        "end with newline\n", "end with spaces   ", "    def f():\n        return 1\n", "\u2003em\u2002en\u2009thin",
    ],
    "digits": [
        "1,234,567", "3.14159265358979", "-42", "1e-10", "6.022e23", "0x1F 0o17 0b1010", "2024-07-26", "12:30:45",
        "$1,000.00", "١٢٣", "۱۲۳", "５６７", "²³¹ ⁴", "½ ⅓ Ⅻ ⅻ", "①②③", "१२३", "๑๒๓", "v1.2.3-rc.4", "192.168.0.1",
        "+1 (555) 123-4567", "3/4 = 0.75", "100%", "1st 2nd 3rd 4th", "10,000,000,000.000001", "0000000",
    ],
    "url-md-json": [
        "https://www.example.com/path/to/page?query=1&b=2#frag", "http://例子.测试/路径", "mailto:user@example.com",
        "ftp://user:pass@host:21/file.txt", "www.github.com/huggingface/tokenizers/issues/1234",
        "C:\\Users\\name\\file.txt", "/usr/local/bin/python3", "file:///tmp/x y.txt", "user@domain.co.uk",
        "# Title\n\n## Subtitle\n\n- item 1\n- item 2\n\n```python\nprint('hi')\n```\n",
        "**bold** _italic_ `code` [link](http://x.y)", "| a | b |\n|---|---|\n| 1 | 2 |", "> quote\n>> nested",
        "1. first\n2. second\n   - sub", "---\n", "$$\\frac{a}{b} = \\sqrt{x^2+y^2}$$",
        "\\begin{equation} E = mc^2 \\end{equation}", '{"name": "John", "age": 30, "cars": ["Ford", "BMW"]}',
        '{\n    "a": {\n        "b": [1, 2, 3, {"d": null}]\n    },\n    "e": "\\u00e9\\n\\t"\n}',
        '{"a":{"b":{"c":[1,2,3,{"d":null}]}}}', '[{"role": "user", "content": "héllo 🌍"}]',
        "<html>\n  <body class=\"x\">&amp; &lt;tag&gt; &#x1F600;</body>\n</html>",
        "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
        "all:\n\t$(CC) -O2 -o $@ $^\n\nclean:\n\trm -f *.o\n", "key: value\nlist:\n  - a\n  - b\n",
        "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
        "fn main() {\n    let v: Vec<i32> = (0..10).collect();\n    println!(\"{:?}\", v);\n}\n",
        "const f = (x) => x ** 2; // arrow\nconsole.log(`t=${f(3)}`);", "for i in $(seq 1 10); do echo \"$i\"; done",
        "^(?:[a-z0-9!#$%&'*+/=?^_`{|}~-]+)@\\w+\\.\\w{2,}$", "...\n\n", "?!\n", ")\n\n\n", "};\n", "--------",
        "===\n", "!!!???!!!", "a.b.c.d", "foo_bar_baz fooBarBaz FooBarBaz", "__init__", "i++; j--; k += 1;",
    ],
    "long-words": [
        "supercalifragilisticexpialidocious", "Pneumonoultramicroscopicsilicovolcanoconiosis",
        "Donaudampfschifffahrtselektrizitätenhauptbetriebswerkbauunterbeamtengesellschaft",
        "x" * 1000, "ab" * 300, "🙂" * 50, "中" * 200, "deadbeef" * 20, "=" * 80, "-" * 120, "." * 50, "a" * 257,
        "ñ" * 100, "▁" * 40, "<" * 30 + ">" * 30, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa bbbbbbbbbbbbbbbbbbbbb",
    ],
    "single-char": [
        "a", "A", "z", ".", ",", "'", '"', "0", "9", "é", "中", "😀", "<", ">", "|", "$", "#", "\\", "_", "ß", "Ω",
        "\r", "\u00a0", "\u3000", "~", "`", "@", "!", "?", "ı",
    ],
    "empty": [""],
}

INVALID_UTF8: list[bytes] = [
    b"\x80", b"\xbf", b"abc\x80def", b"\xc3", b"\xc3abc", b"\xe4\xbd", b"\xe4\xbd abc", b"\xf0\x9f\x98",
    b"\xf0\x9f", b"\xf0", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf0\x80\x80\xaf", b"\xc1\xbf", b"\xc0\x80",
    b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xed\xa0\xbd\xed\xb8\x80", b"\xf5\x80\x80\x80", b"\xf8\x88\x80\x80\x80",
    b"\xfc\x84\x80\x80\x80\x80", b"\xfe", b"\xff", b"\xfe\xff", b"\xff\xfeh\x00i\x00", b"Hello \xff world",
    b"caf\xe9", b"\xf4\x90\x80\x80", b"\xe2\x82\xe2\x82\xac", b"\x80\x80\x80\x80", b"\xc3\xa9\x80\xc3\xa9",
    b"valid \xe4\xb8\xad\xe6\x96 text", b"\xe0\xa0", b"\xf0\x90\x80abc", b"<|im_end\xff|>", b"\xe4\xbd\xa0\xe5",
    b"  \x80  ", b"\n\xc3\n", b"don\x92t",
]
NUL_BYTES: list[bytes] = [b"a\x00b", b"\x00", b"h\x00i\x00", b"<|im_end|>\x00"]


def _generated(rng: random.Random) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    lengths = [1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 100, 127, 128, 199, 200]
    for n in lengths:
        out.append(("ws-run", " " * n))
        out.append(("ws-run", "a" + " " * n + "b"))
        out.append(("ws-run", "\t" * n))
        out.append(("ws-run", "x" + "\t" * n + "y"))
        mixed = "".join(rng.choice(" \t") for _ in range(n))
        out.append(("ws-run", mixed + "lead"))
        out.append(("ws-run", "trail" + mixed))
        out.append(("ws-run", "\n" * n))
        if n <= 64:
            out.append(("ws-run", "p" + "\r\n" * n + "q"))
            out.append(("ws-run", "k" + "".join(rng.choice([" ", "\t", "\n", "\r\n", "\u00a0", "\u3000"]) for _ in range(n)) + "m"))
    for n in range(1, 41):
        digits = "".join(rng.choice("0123456789") for _ in range(n))
        out.append(("digit-run", digits))
        if n % 3 == 0:
            out.append(("digit-run", f"x{digits}y {digits}.{digits[: 1 + n // 4]}"))
        if n % 4 == 0:
            out.append(("digit-run", f"{int(digits):,}"))
    # seeded mixtures of everything above: pieces joined without separators
    pools = [
        ["hello", "World", " the", "don't", "I'M", "ñ", "naïve", "e\u0301", "Straße"],
        ["你好", "世界", "カタカナ", "한국어", "中"],
        ["😀", "👍🏽", "👨‍👩‍👧", "🇯🇵", "❤️"],
        [" ", "  ", "\t", "\n", "\r\n", "\n\n", "   \n", "\u00a0"],
        ["0", "42", "3.14", "1,000", "١٢", "2024"],
        [".", ",", "!?", "...", "()", "{}", "'", "\"", "->", "==", "<", ">"],
        ["<|im_end|>", "<bos>", "<start_of_turn>", "<|eot_id|>", "<think>", "<|im_", "▁", "\ufffd", "\x01", "\ue000"],
        ["مرحبا", "שלום", "नमस्ते", "Привет", "Γειά"],
    ]
    for _ in range(120):
        k = rng.randint(2, 14)
        out.append(("fuzz-mix", "".join(rng.choice(rng.choice(pools)) for _ in range(k))))
    return out


def build_corpus() -> list[dict]:
    """Ordered list of {"src", "text"} or {"src", "raw"} (bytes) entries, duplicates removed."""
    rng = random.Random(20240726)
    entries: list[dict] = []
    seen_text: set[str] = set()
    seen_raw: set[bytes] = set()

    def add_text(src: str, text: str) -> None:
        assert "\x00" not in text and not any(0xD800 <= ord(c) <= 0xDFFF for c in text), (src, text)
        if text in seen_text:
            return
        seen_text.add(text)
        entries.append({"src": src, "text": text})

    def add_raw(src: str, raw: bytes) -> None:
        if raw in seen_raw:
            return
        seen_raw.add(raw)
        entries.append({"src": src, "raw": raw})

    for src, text in _datasets():
        add_text(src, text)
    for tag, texts in HARD_TEXT.items():
        for t in texts:
            add_text("hard-" + tag, t)
    for c in list(range(1, 32)) + [0x7F]:
        add_text("hard-control", f"x{chr(c)}y")
    for src, text in _generated(rng):
        add_text(src, text)
    for raw in INVALID_UTF8:
        try:
            raw.decode("utf-8")
            raise AssertionError(f"not invalid: {raw!r}")
        except UnicodeDecodeError:
            pass
        add_raw("invalid-utf8", raw)
    for raw in NUL_BYTES:
        raw.decode("utf-8")
        add_raw("nul", raw)
    return entries


def reference_input(e: dict) -> str:
    if "raw" in e:
        return e["raw"].decode("utf-8", errors="replace")
    return e["text"]


def read_corpus(path: Path = OUT / "corpus.jsonl.gz") -> list[dict]:
    """Read corpus.jsonl.gz back into build_corpus() form."""
    out = []
    with gzip.open(path, "rt", encoding="utf-8", newline="\n") as f:
        for i, line in enumerate(f.read().split("\n")[:-1]):
            d = json.loads(line)
            assert d["i"] == i
            if "hex" in d:
                out.append({"src": d["src"], "raw": bytes.fromhex(d["hex"])})
            else:
                out.append({"src": d["src"], "text": d["text"]})
    return out


# --------------------------------------------------------------------------------------------
# output helpers
# --------------------------------------------------------------------------------------------

def gz_bytes(text: str) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as g:
        g.write(text.encode("utf-8"))
    return buf.getvalue()


def write(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def jdump(x) -> str:
    return json.dumps(x, ensure_ascii=False)


def compact_json(x) -> str:
    """json.dumps(indent=1), but lists of scalars (added-token triples, line numbers) on one line."""
    import re
    s = json.dumps(x, ensure_ascii=False, indent=1)
    scalar = r'(?:-?\d+|true|false|null|"(?:[^"\\]|\\.)*")'
    pat = re.compile(r"\[\n\s*(" + scalar + r"(?:,\n\s*" + scalar + r")*)\n\s*\]")
    s = pat.sub(lambda m: "[" + re.sub(r",\n\s*", ", ", m.group(1)) + "]", s)
    assert json.loads(s) == x
    return s


# --------------------------------------------------------------------------------------------
# tokenizers
# --------------------------------------------------------------------------------------------

def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_tokenizers() -> dict[str, dict]:
    """name -> {"tok": tokenizers.Tokenizer, "hf": transformers tokenizer or None, "info": {...}}"""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    res: dict[str, dict] = {}
    for name in SHARED:
        path = SHARED_TOK / name / "tokenizer.json"
        cfg = json.load(open(SHARED_TOK / name / "tokenizer_config.json", encoding="utf-8"))
        tok = Tokenizer.from_file(str(path))

        def tok_of(key):
            v = cfg.get(key)
            if isinstance(v, dict):
                v = v.get("content")
            return v

        bos, eos = tok_of("bos_token"), tok_of("eos_token")
        info = {
            "source": str(path),
            "source_sha256": sha256(path),
            "loader": "tokenizers.Tokenizer.from_file",
            "bos_token": bos, "bos_id": tok.token_to_id(bos) if bos else None,
            "eos_token": eos, "eos_id": tok.token_to_id(eos) if eos else None,
            "tokenizer_config_add_bos_token": cfg.get("add_bos_token"),
            "tokenizer_class": cfg.get("tokenizer_class"),
            "clean_up_tokenization_spaces": cfg.get("clean_up_tokenization_spaces"),
        }
        # transformers' own class for the folder, only to report whether it agrees
        hf = AutoTokenizer.from_pretrained(str(SHARED_TOK / name))
        info["transformers_class"] = type(hf).__name__
        res[name] = {"tok": tok, "hf_check": hf, "info": info}
    for name, fname in GGUF.items():
        path = MODELS / fname
        if not path.exists():
            sys.exit(f"missing {path}: run `make models` first")
        from gguf import GGUFReader
        r = GGUFReader(str(path))

        def kv(key):
            f = r.fields.get(key)
            return None if f is None else f.contents()

        hf = AutoTokenizer.from_pretrained(str(MODELS), gguf_file=fname)
        tok = Tokenizer.from_str(hf.backend_tokenizer.to_str())
        info = {
            "source": "models/" + fname,
            "source_sha256": sha256(path),
            "loader": f"transformers AutoTokenizer.from_pretrained('models', gguf_file=...) ({type(hf).__name__}), backend_tokenizer",
            "bos_token": hf.bos_token, "bos_id": hf.bos_token_id,
            "eos_token": hf.eos_token, "eos_id": hf.eos_token_id,
            "gguf": {k: kv(k) for k in (
                "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.bos_token_id",
                "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
                "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token", "tokenizer.ggml.add_space_prefix")
                if kv(k) is not None},
            "tokenizer_class": type(hf).__name__,
        }
        res[name] = {"tok": tok, "hf": hf, "info": info}
    from tokenizers import normalizers, pre_tokenizers
    for name, base in DERIVED.items():
        tok = Tokenizer.from_str(res[base]["tok"].to_str())
        info = dict(res[base]["info"])
        d = json.loads(tok.to_str())
        if base == "smollm2-gguf":
            pre = d["pre_tokenizer"]
            assert pre == {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}, pre
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
            info["loader"] = (f"DERIVED (not a Hugging Face artifact): {base} with pre_tokenizer = "
                              "Sequence[Digits(individual_digits=True), its ByteLevel], i.e. llama.cpp's 'smollm' split")
        else:
            q3 = json.loads(res["qwen3"]["tok"].to_str())
            assert d["normalizer"] is None and q3["normalizer"] == {"type": "NFC"}, d["normalizer"]
            assert d["pre_tokenizer"]["pretokenizers"][0] == q3["pre_tokenizer"]["pretokenizers"][0]
            tok.normalizer = normalizers.NFC()
            info["loader"] = (f"DERIVED (not a Hugging Face artifact): {base} with normalizer = NFC, as the "
                              "Qwen family's tokenizer.json (the shared Qwen3 one: same regex, vocabulary, merges)")
        res[name] = {"tok": tok, "info": info}
    return res


def check_qwen25_vs_qwen3(res, inputs: list[str]) -> dict:
    """qwen2.5-gguf-nfc must tokenize like the shared Qwen3 tokenizer.json wherever no added
    token differs between the two, by id or special flag (Qwen3 adds <think>, <tool_response>, ...;
    the GGUF's token types make <|fim_prefix|> and the like special, Qwen3's file does not)."""
    a, b = res["qwen2.5-gguf-nfc"]["tok"], res["qwen3"]["tok"]
    added = lambda t: {x["content"]: (x["id"], x["special"]) for x in json.loads(t.to_str())["added_tokens"]}
    aa, ab = added(a), added(b)
    differ = sorted(k for k in set(aa) | set(ab) if aa.get(k) != ab.get(k))
    compared = skipped = 0
    for plain in (True, False):
        for s, ia, ib in zip(inputs, encode_all(a, inputs, plain), encode_all(b, inputs, plain)):
            if any(k in s for k in differ):
                skipped += 1
                continue
            compared += 1
            assert ia == ib, (s, ia, ib)
    print(f"qwen2.5-gguf-nfc == qwen3 tokenizer.json on {compared} (string, mode) pairs; "
          f"{skipped} skipped for added tokens only one has ({', '.join(differ)})", file=sys.stderr)
    return {"compared": compared, "skipped": skipped, "differing_added_tokens": differ}


def pipeline_summary(tok) -> dict:
    d = json.loads(tok.to_str())
    m = d["model"]
    model = {k: v for k, v in m.items() if k not in ("vocab", "merges")}
    model["n_vocab_model"] = len(m.get("vocab", {}))
    model["n_merges"] = len(m.get("merges", []))
    return {
        "model": model,
        "normalizer": d.get("normalizer"),
        "pre_tokenizer": d.get("pre_tokenizer"),
        "post_processor": d.get("post_processor"),
        "decoder": d.get("decoder"),
        "added_tokens": [[a["id"], a["content"], a["special"]] for a in d["added_tokens"]],
        "added_token_flags_all_false": all(
            not (a["lstrip"] or a["rstrip"] or a["single_word"] or a["normalized"]) for a in d["added_tokens"]),
    }


# Feature-sensitivity checks recorded in meta.json: how many corpus lines change (special mode)
# when one pipeline feature is switched off, i.e. how much of the corpus exercises it.
def _no_normalizer(d):
    d["normalizer"] = None


def _no_pre_tokenizer(d):
    d["pre_tokenizer"] = None


def _merges_not_ignored(d):
    d["model"]["ignore_merges"] = False


ABLATIONS = {
    "qwen3": ("normalizer NFC removed", _no_normalizer),
    "gemma3": ("pre_tokenizer Split(' ', MergedWithPrevious) removed", _no_pre_tokenizer),
    "llama3": ("model.ignore_merges set to false", _merges_not_ignored),
}


def encode_all(tok, inputs: list[str], plain: bool) -> list[list[int]]:
    tok.encode_special_tokens = plain
    try:
        return [tok.encode(s, add_special_tokens=False).ids for s in inputs]
    finally:
        tok.encode_special_tokens = False


def main() -> None:
    import tokenizers
    import transformers

    OUT.mkdir(parents=True, exist_ok=True)
    corpus = build_corpus()
    inputs = [reference_input(e) for e in corpus]
    lines = []
    for i, e in enumerate(corpus):
        if "raw" in e:
            lines.append(jdump({"i": i, "src": e["src"], "hex": e["raw"].hex()}))
        else:
            lines.append(jdump({"i": i, "src": e["src"], "text": e["text"]}))
    write(OUT / "corpus.jsonl.gz", gz_bytes("\n".join(lines) + "\n"))
    counts: dict[str, int] = {}
    for e in corpus:
        counts[e["src"]] = counts.get(e["src"], 0) + 1
    print(f"corpus: {len(corpus)} strings", file=sys.stderr)
    assert read_corpus() == corpus

    toks = load_tokenizers()
    meta = {
        "generator": "tools/make_tokenizer_goldens.py",
        "versions": {p: importlib.metadata.version(p) for p in ("tokenizers", "transformers", "gguf")},
        "corpus": {"n": len(corpus), "per_src": counts,
                   "reference_input": "text, or bytes.fromhex(hex).decode('utf-8', errors='replace')"},
        "tokenizers": {},
    }
    assert meta["versions"]["tokenizers"] == tokenizers.__version__
    assert meta["versions"]["transformers"] == transformers.__version__
    meta["qwen2.5-gguf-nfc_vs_qwen3"] = check_qwen25_vs_qwen3(toks, inputs)

    for name in TOKENIZERS:
        t = toks[name]
        tok = t["tok"]
        special = encode_all(tok, inputs, plain=False)
        plain = encode_all(tok, inputs, plain=True)
        # plain mode really stops matching special tokens: every special token's text splits
        d = json.loads(tok.to_str())
        n_special_checked = 0
        for a in d["added_tokens"]:
            if a["special"] and a["content"]:
                tok.encode_special_tokens = True
                ids_plain = tok.encode(a["content"], add_special_tokens=False).ids
                tok.encode_special_tokens = False
                ids_spec = tok.encode(a["content"], add_special_tokens=False).ids
                assert ids_spec == [a["id"]], (name, a)
                assert ids_plain != [a["id"]], (name, a, ids_plain)
                n_special_checked += 1
        decoded = [tok.decode(ids, skip_special_tokens=False) for ids in plain]
        # transformers' own encode agrees (GGUF tokenizers: default and split_special_tokens=True)
        if "hf" in t:
            hf = t["hf"]
            for s, a, b in zip(inputs, special, plain):
                assert hf.encode(s, add_special_tokens=False) == a, (name, s)
                assert hf(s, add_special_tokens=False, split_special_tokens=True)["input_ids"] == b, (name, s)
        if "hf_check" in t:
            hf = t["hf_check"]
            info_x = t["info"]
            info_x["transformers_autotokenizer_mismatch_lines"] = {
                "special": sum(hf.encode(s, add_special_tokens=False) != a for s, a in zip(inputs, special)),
                "plain": sum(hf(s, add_special_tokens=False, split_special_tokens=True)["input_ids"] != b
                             for s, b in zip(inputs, plain)),
            }
        # add_bos default: what the post-processor does with add_special_tokens=True
        with_sp = tok.encode("a", add_special_tokens=True).ids
        no_sp = tok.encode("a", add_special_tokens=False).ids
        info = dict(t["info"])
        info["add_bos_default"] = len(with_sp) > len(no_sp) and with_sp[0] == info.get("bos_id")
        info["add_eos_default"] = len(with_sp) > len(no_sp) and with_sp[-1] == info.get("eos_id") and not info["add_bos_default"]
        info["vocab_size"] = tok.get_vocab_size(with_added_tokens=True)
        info.update(pipeline_summary(tok))
        n_diff = sum(a != b for a, b in zip(special, plain))
        dec_ne = [i for i, (s, d_) in enumerate(zip(inputs, decoded)) if s != d_]
        nfc_ne = [i for i in dec_ne if unicodedata.normalize("NFC", inputs[i]) == decoded[i]]
        info["stats"] = {
            "n_tokens_special": sum(map(len, special)),
            "n_tokens_plain": sum(map(len, plain)),
            "special_tokens_checked_split_in_plain_mode": n_special_checked,
            "lines_plain_ne_special": n_diff,
            "lines_decode_ne_input": len(dec_ne),
            "lines_decode_eq_nfc_input": len(nfc_ne),
            "decode_ne_input_lines": dec_ne,
        }
        abl = ABLATIONS.get(name)
        if abl:
            what, edit = abl
            d2 = json.loads(tok.to_str())
            edit(d2)
            from tokenizers import Tokenizer
            t2 = Tokenizer.from_str(json.dumps(d2))
            changed = [i for i, (s_, a) in enumerate(zip(inputs, special))
                       if t2.encode(s_, add_special_tokens=False).ids != a]
            info["stats"]["ablation"] = {"change": what, "lines_changed_special_mode": len(changed),
                                         "lines": changed}
        meta["tokenizers"][name] = info
        write(OUT / f"{name}.special.ids.gz", gz_bytes("".join(" ".join(map(str, ids)) + "\n" for ids in special)))
        write(OUT / f"{name}.plain.ids.gz", gz_bytes("".join(" ".join(map(str, ids)) + "\n" for ids in plain)))
        write(OUT / f"{name}.decode.gz", gz_bytes("".join(jdump(s) + "\n" for s in decoded)))
        print(f"{name}: {info['stats']['n_tokens_special']} tokens, plain!=special on {n_diff} lines, "
              f"decode!=input on {len(dec_ne)} lines ({len(nfc_ne)} = NFC(input))", file=sys.stderr)
    write(OUT / "meta.json", (compact_json(meta) + "\n").encode("utf-8"))
    total = sum(p.stat().st_size for p in OUT.iterdir() if p.is_file())
    print(f"wrote {OUT} ({total / 1e6:.2f} MB)", file=sys.stderr)


if __name__ == "__main__":
    main()
