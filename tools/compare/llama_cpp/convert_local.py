#!/usr/bin/env python3
"""Run llama.cpp's vendored convert_hf_to_gguf.py unchanged, with one local patch applied in memory:
the BPE pre-tokenizer hash check accepts our synthetic tokenizer (trained locally, unknown hash) as
"gpt-2" (its pre-tokenizer is ByteLevel(use_regex=True) = the GPT-2 regex). And a transformers-5
shim: transformers 5 drops tokenizer_config.json's `add_bos_token` when a tokenizer.json is present,
so the DeepSeek-V3.2 converter's `assert tokenizer.add_bos_token` fails for every tokenizer.json
checkpoint; the tokenizer loaded for the converter gets the value tokenizer_config.json states (what
transformers 4 did). Nothing in the vendored tree is modified."""
import os, runpy, sys
from pathlib import Path
# LLAMA_CPP_DIR: the llama.cpp source tree (vendor/llama.cpp of the llama-cpp-python sdist).
LLAMA = Path(os.environ["LLAMA_CPP_DIR"]).resolve()
sys.path.insert(0, str(LLAMA))
sys.path.insert(1, str(LLAMA / "gguf-py"))
import conversion.base as base

_orig = base.TextModel.get_vocab_base_pre
def _patched(self, tokenizer):
    try:
        return _orig(self, tokenizer)
    except NotImplementedError:
        base.logger.warning("lucid-compare: unknown pre-tokenizer hash (synthetic tokenizer) -> 'gpt-2'")
        return "gpt-2"
base.TextModel.get_vocab_base_pre = _patched

import json
import transformers
_orig_from_pretrained = transformers.AutoTokenizer.from_pretrained.__func__
def _from_pretrained(cls, path, *args, **kwargs):
    tok = _orig_from_pretrained(cls, path, *args, **kwargs)
    cfg = Path(path) / "tokenizer_config.json"
    if cfg.is_file() and "add_bos_token" in (j := json.load(open(cfg))):
        tok.add_bos_token = bool(j["add_bos_token"])
    return tok
transformers.AutoTokenizer.from_pretrained = classmethod(_from_pretrained)
sys.argv[0] = str(LLAMA / "convert_hf_to_gguf.py")
runpy.run_path(str(LLAMA / "convert_hf_to_gguf.py"), run_name="__main__")
