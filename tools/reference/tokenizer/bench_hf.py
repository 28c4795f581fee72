#!/usr/bin/env python3
"""HF `tokenizers` encode throughput on the same text as src/tokenizer/tokenizer_bench.cpp.
Single call on the whole text, one thread (RAYON_NUM_THREADS=1), best of 5 runs after a warm-up.
Also prints the token count so it can be checked against the C++ benchmark's `tokens` counter."""
import glob
import json
import os
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
from tokenizers import Tokenizer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.abspath(os.path.join(HERE, "..", "..", "..", "tests", "fixtures"))


def bench_text():
    corpus = json.load(open(os.path.join(FIX, "tokenizers", "corpus.json"), encoding="utf-8"))
    base = "\n".join(corpus)
    for name in sorted(glob.glob(os.path.join(FIX, "chat_templates", "*.jinja"))):
        base += open(name, encoding="utf-8", newline="").read()
    return base * 8


def main():
    text = bench_text()
    nbytes = len(text.encode("utf-8"))
    for name in ["qwen2", "deepseek-coder", "gpt-2", "llama-spm"]:
        tok = Tokenizer.from_file(os.path.join(FIX, "tokenizers", name, "tokenizer.json"))
        ids = tok.encode(text, add_special_tokens=False).ids
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            tok.encode(text, add_special_tokens=False)
            best = min(best, time.perf_counter() - t0)
        print(f"{name:15s} {nbytes / best / 1e6:8.2f} MB/s  tokens={len(ids)}  text={nbytes / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
