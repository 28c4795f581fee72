#!/usr/bin/env python3
"""Writes the tokenizer corpus and HF `tokenizers` goldens used by src/tokenizer/tokenizer_test.cpp.

    python gen_goldens.py      # with the pinned requirements.txt installed

Outputs, under tests/fixtures/tokenizers/:
  corpus.json            list of strings (deterministic: fixed seed, no dependence on the clock)
  variants.json          {name: {"base": dir, "replace": {top-level key: value}}}: derived
                         tokenizers = base tokenizer.json with those top-level keys replaced
  goldens/NAME.jsonl     one line per corpus string, in order:
                         {"ids": [...]}                       encode(text, add_special_tokens=False)
                         "ids_sp": [...]  only when add_special_tokens=True differs
                         "dec": "..."     only when decode(ids) != text
                         "dec_skip": "..." only when decode(ids, skip_special_tokens=True) != dec
"""
import copy
import json
import os
import random

from tokenizers import AddedToken, Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
TOK_DIR = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
BASES = ["deepseek-coder", "qwen2", "llama-spm", "gpt-2"]

SEEDS = [
    "", " ", "  ", "\n", "\n\n", "\t", " \t\n", "a", "Hello world", "Hello, world!",
    " Hello world", "Hello  world", "Hello   world  ", "hello\nworld", "hello\r\nworld\r\n",
    "I'm here, you're there, they've gone, we'll see, he'd say, it's", "I'M HERE YOU'RE THERE 'LL 'S",
    "1", "12", "123", "1234", "12345", "3.14159", "1,000,000", "0x1F600", "2024-01-31T12:00:00Z",
    "你好世界", "你好，世界！", "日本語のテキストです。カタカナ", "한국어 텍스트", "中文English混合123",
    "😀", "😀😃😄", "👨‍👩‍👧‍👦", "👩🏽‍💻 codes", "🏳️‍🌈", "🇺🇸🇯🇵", "❤️", "✊🏿",
    "e\u0301", "cafe\u0301", "café", "n\u0303", "Z\u0351\u0360\u036b\u0343\u036a\u0302", "ﬁ ﬂ ﬃ",
    "ＡＢＣ１２３", "①②③", "²³", "Ⅻ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟏𝟐𝟑", "ℌℑ", "Å Å", "ǅ",
    "नमस्ते दुनिया", "مرحبا بالعالم", "שלום עולם", "สวัสดีชาวโลก", "Привет мир", "Γειά σου κόσμε",
    "\u00a0", "a\u00a0b", "a\u3000b", "a\u2028b", "a\u2029b", "a\u0085b", "a\u180eb", "a\u200bb",
    "a\u200db", "a\ufeffb", "\u000b\u000c", "a \u00a0 b", "\ufffd", "\ufffd\ufffd abc",
    "ÿþ", "Ã©tÃ©", "Ġhello Ċ", "âĢĻ", "<0xFF>", "<0x0A><0x41>", "<unk>", "<s>", "</s>", "<s>hi</s>",
    "<|endoftext|>", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<|im_start",
    "im_start|>", "<|im_end|><|im_end|>", "a<|endoftext|>b", " <|endoftext|> ", "<<|endoftext|>>",
    "<｜begin▁of▁sentence｜>Hi", "<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence", "▁hello", "▁▁",
    "<|fim_prefix|>", "õ÷Á", "x õ y", "def f(x):\n    return x + 1\n", "if (a && b) { c++; }",
    "    indented\n\tTabbed\n", "\n\n\n\n", "   \n   ", "trailing   ", "   leading", "a\n\nb",
    "!!!", "...", "?!", "--", "''", "\"quoted\"", "'s", "'t", "a's", "don't", "DON'T",
    "https://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Windows\\System32",
    "<html><body>Hi</body></html>", "{\"key\": [1, 2, 3]}", "$100 €50 £20 ¥1000",
    "αβγ δεζ", "∀x∈ℝ: x²≥0", "→←↑↓", "™©®", "½¼¾", "ｶﾀｶﾅ", "ᄀᄁ", "Ǆ", "İstanbul", "ß",
]

POOLS = {
    "ascii": ["the", "quick", "brown", "fox", "Hello", "WORLD", "tokenizer", "x", "I", "a", "z9",
              "foo_bar", "camelCase", "snake_case", "HTTP", "json"],
    "num": ["0", "7", "42", "123", "2024", "3.14", "1e10", "99999", "0001", "١٢٣", "٣"],
    "space": [" ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", " \n", "\u00a0", "\u3000", "\u2028",
              "\u180e", "\u0085", "\u200b", "\u2003", "\u202f", "\u205f", "\x0b", "\x0c"],
    "cjk": ["你好", "世界", "中文", "日本", "語", "漢字", "ひらがな", "カタカナ", "한국", "어",
            "龥", "㐀", "𠀀", "﨑"],
    "emoji": ["😀", "👍", "👍🏽", "👨‍👩‍👧", "👩‍🚀", "🏳️‍⚧️", "🇩🇪", "❤️‍🔥", "🫠", "🧑🏿‍🤝‍🧑🏻",
              "#️⃣", "☺", "✨", "🤖"],
    "comb": ["e\u0301", "a\u0300\u0301", "o\u0308", "\u0301", "\u0327c", "\u20dd", "ñ", "é",
             "ṩ", "ệ", "g\u0303\u0304"],
    "punct": [".", ",", "!", "?", ";", ":", "'", "\"", "(", ")", "[", "]", "{", "}", "<", ">",
              "...", "—", "–", "«", "»", "“", "”", "‘", "’", "¿", "¡", "@", "#", "$", "%", "&",
              "*", "+", "=", "/", "\\", "|", "~", "`", "^", "_", "-", "'s", "'ll", "'VE"],
    "other": ["Привет", "κόσμε", "नमस्ते", "مرحبا", "שלום", "สวัสดี", "ꙮ", "ǅ", "ﬀ", "Ⅷ",
              "ＡＢ", "１２", "𝔘", "ÿ", "Ã", "Ġ", "Ċ", "▁", "<0x", "0xFF>", "\ufffd", "İ", "ẞ"],
    "special": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>", "</s>", "<unk>",
                "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<|fim_prefix|>", "õ", "÷",
                "<|im_start", "|>", "<|", "<mask>", "[SEP]", "hello", "ＡＢＣ"],
}


def make_corpus():
    rng = random.Random(20240531)
    corpus = list(SEEDS)
    names = list(POOLS)
    while len(corpus) < 2400:
        n = rng.randint(1, 8)
        parts = []
        for _ in range(n):
            pool = POOLS[rng.choice(names)]
            parts.append(rng.choice(pool))
            if rng.random() < 0.4:
                parts.append(rng.choice(POOLS["space"][:3] + [""]))
        corpus.append("".join(parts))
    for k in range(20):  # a few long mixed strings
        corpus.append("".join(rng.choice(POOLS[rng.choice(names)]) for _ in range(300)))
    return corpus


def variants():
    spm = json.load(open(os.path.join(TOK_DIR, "llama-spm", "tokenizer.json"), encoding="utf-8"))
    qwen = json.load(open(os.path.join(TOK_DIR, "qwen2", "tokenizer.json"), encoding="utf-8"))
    v = {}
    # The Llama-2 style tokenizer.json: normalizer does the metaspace work, no pre-tokenizer.
    v["llama-spm-legacy"] = {"base": "llama-spm", "replace": {
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": None}}
    # Metaspace(always, split) + NFKC + added tokens with every flag.
    t = Tokenizer.from_str(json.dumps(spm))
    from tokenizers import normalizers, pre_tokenizers
    t.normalizer = normalizers.NFKC()
    t.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always", split=True)
    t.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, normalized=False)])
    t.add_tokens([AddedToken("[SEP]", rstrip=True, normalized=False, special=False),
                  AddedToken("hello", single_word=True, normalized=True, special=False),
                  AddedToken("ＡＢＣ", normalized=True, special=False)])
    j = json.loads(t.to_str())
    v["llama-spm-flags"] = {"base": "llama-spm", "replace": {
        k: j[k] for k in ["normalizer", "pre_tokenizer", "added_tokens", "decoder"]}}
    # Byte-level with lstrip/rstrip specials and a single_word non-special token.
    added = copy.deepcopy(qwen["added_tokens"])
    for a in added:
        if a["content"] == "<|im_start|>":
            a["lstrip"] = True
        if a["content"] == "<|im_end|>":
            a["rstrip"] = True
    t = Tokenizer.from_str(json.dumps(dict(qwen, added_tokens=added)))
    t.add_tokens([AddedToken("hello", single_word=True, normalized=True, special=False),
                  AddedToken("<tool>", lstrip=True, rstrip=True, normalized=False, special=False)])
    j = json.loads(t.to_str())
    v["qwen2-flags"] = {"base": "qwen2", "replace": {"added_tokens": j["added_tokens"]}}
    return v


def load(name, vs):
    if name in vs:
        base = json.load(open(os.path.join(TOK_DIR, vs[name]["base"], "tokenizer.json"),
                              encoding="utf-8"))
        base.update(vs[name]["replace"])
        return Tokenizer.from_str(json.dumps(base))
    return Tokenizer.from_file(os.path.join(TOK_DIR, name, "tokenizer.json"))


def main():
    corpus = make_corpus()
    with open(os.path.join(TOK_DIR, "corpus.json"), "w", encoding="utf-8") as f:
        json.dump(corpus, f, ensure_ascii=True, indent=0)
    vs = variants()
    with open(os.path.join(TOK_DIR, "variants.json"), "w", encoding="utf-8") as f:
        json.dump(vs, f, ensure_ascii=False, indent=1)
    os.makedirs(os.path.join(TOK_DIR, "goldens"), exist_ok=True)
    for name in BASES + list(vs):
        tok = load(name, vs)
        with open(os.path.join(TOK_DIR, "goldens", name + ".jsonl"), "w", encoding="utf-8") as f:
            for text in corpus:
                ids = tok.encode(text, add_special_tokens=False).ids
                rec = {"ids": ids}
                ids_sp = tok.encode(text, add_special_tokens=True).ids
                if ids_sp != ids:
                    rec["ids_sp"] = ids_sp
                dec = tok.decode(ids, skip_special_tokens=False)
                if dec != text:
                    rec["dec"] = dec
                dec_skip = tok.decode(ids, skip_special_tokens=True)
                if dec_skip != dec:
                    rec["dec_skip"] = dec_skip
                f.write(json.dumps(rec, ensure_ascii=True, separators=(",", ":")) + "\n")
        print(name, "ok")


if __name__ == "__main__":
    main()
