#!/usr/bin/env python3
"""Builds tests/fixtures/tokenizers/*/tokenizer.json from the vocab-only GGUF files that the
llama-cpp-python sdist (PyPI, llama-cpp-python==0.3.36) ships under vendor/llama.cpp/models/, and
copies the chat templates it ships under vendor/llama.cpp/models/templates/.

    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36   # then untar
    python make_fixtures.py /path/to/llama_cpp_python-0.3.36/vendor/llama.cpp/models

The vocabulary, merges, scores and special tokens come from the GGUF (converted by transformers'
GGUF tokenizer converter). The converter does not carry the pre-tokenizer regexes or the
normalizer, so the edits below restore the ones the original model's tokenizer.json has (the same
regexes llama.cpp's src/llama-vocab.cpp reproduces). Each edit is listed in SOURCES.md.
torch is not needed: the converter only reads metadata, so a stub module stands in for it.
"""
import json
import os
import shutil
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
TOK_DIR = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
TPL_DIR = os.path.join(ROOT, "tests", "fixtures", "chat_templates")

TEMPLATES = [
    "GLM-4.6.jinja",
    "GLM-4.7-Flash.jinja",
    "deepseek-ai-DeepSeek-V3.1.jinja",
    "deepseek-ai-DeepSeek-V3.2.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    "Qwen-Qwen3-0.6B.jinja",
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "google-gemma-2-2b-it.jinja",
]


def deepseek_coder_pre():
    splits = ["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"]
    pts = [{"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False}
           for r in splits]
    pts.append({"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                "use_regex": False})
    return {"type": "Sequence", "pretokenizers": pts}


def fix_deepseek_coder(j):
    j["pre_tokenizer"] = deepseek_coder_pre()
    j["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True}


def fix_qwen2(j):
    # Qwen2's tokenizer.json normalizes with NFC; the converter drops it.
    j["normalizer"] = {"type": "NFC"}


def fix_llama_spm(j):
    # Llama's tokenizer.json names <unk> as unk_token.
    j["model"]["unk_token"] = "<unk>"


def fix_none(j):
    pass


FIXES = {
    "deepseek-coder": fix_deepseek_coder,
    "qwen2": fix_qwen2,
    "llama-spm": fix_llama_spm,
    "gpt-2": fix_none,
}


def convert(models_dir, name):
    class _Stub(types.ModuleType):
        def __getattr__(self, k):
            return type(k, (), {})

    from transformers import PreTrainedTokenizerFast  # noqa: import before stubbing torch
    sys.modules.setdefault("torch", _Stub("torch"))
    tok = PreTrainedTokenizerFast.from_pretrained(models_dir, gguf_file=f"ggml-vocab-{name}.gguf")
    j = json.loads(tok.backend_tokenizer.to_str())
    FIXES[name](j)
    out = os.path.join(TOK_DIR, name)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, separators=(",", ":"))
    # Verify the edited file loads in HF tokenizers.
    from tokenizers import Tokenizer
    Tokenizer.from_file(os.path.join(out, "tokenizer.json"))


def main():
    models_dir = sys.argv[1]
    for name in FIXES:
        convert(models_dir, name)
    os.makedirs(TPL_DIR, exist_ok=True)
    for t in TEMPLATES:
        shutil.copy(os.path.join(models_dir, "templates", t), os.path.join(TPL_DIR, t))


if __name__ == "__main__":
    main()
