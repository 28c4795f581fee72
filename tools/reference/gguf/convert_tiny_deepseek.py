#!/usr/bin/env python3
"""Convert the tiny DeepSeek-family fixtures (tests/fixtures/models/tiny_{glm_moe_dsa,deepseek_v32,
deepseek_v3}) to GGUF with llama.cpp's own converter (convert_hf_to_gguf.py, run by
tools/compare/llama_cpp/convert_local.py), into tests/fixtures/gguf/.

The fixtures have no tokenizer; the converter needs one. Each conversion copies the fixture into a
temporary directory and adds a 256-entry byte-level BPE tokenizer.json with no merges (7 GLM
special tokens at ids 0-6, then 249 byte-level symbols), so its vocabulary matches vocab_size 256
exactly. Only the weights and the `<arch>.*` metadata matter to the logits tests.

Usage: LLAMA_CPP_DIR=<llama.cpp source> python convert_tiny_deepseek.py [REPO_ROOT]
(a venv with torch, transformers, tokenizers, numpy: requirements-logits.txt)."""
import json, os, shutil, subprocess, sys, tempfile
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[3])
CONVERT = ROOT / "tools/compare/llama_cpp/convert_local.py"
SPECIALS = ["[gMASK]", "<|endoftext|>", "<sop>", "<|user|>", "<|assistant|>", "<|observation|>",
            "<|system|>"]
FIXTURES = ["tiny_glm_moe_dsa", "tiny_deepseek_v32", "tiny_deepseek_v3"]


def write_tokenizer(out: Path, vocab_size: int) -> None:
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for sym in alphabet[: vocab_size - len(SPECIALS)]:
        vocab[sym] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    tok.save(str(out / "tokenizer.json"))
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "[gMASK]",
               "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "add_bos_token": True,
               "model_max_length": 512}, open(out / "tokenizer_config.json", "w"), indent=1)


def main() -> None:
    for name in FIXTURES:
        src = ROOT / "tests/fixtures/models" / name
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp) / name
            shutil.copytree(src, d)
            write_tokenizer(d, json.load(open(src / "config.json"))["vocab_size"])
            out = ROOT / "tests/fixtures/gguf" / f"{name}.f32.gguf"
            subprocess.run([sys.executable, str(CONVERT), str(d), "--outtype", "f32", "--outfile",
                            str(out)], check=True, env=os.environ)
            print(out, out.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
