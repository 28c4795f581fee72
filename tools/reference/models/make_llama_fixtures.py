#!/usr/bin/env python3
"""Tiny random-weight Llama-family checkpoints and their transformers logits, for
models/llama_family_test.cpp (HF safetensors loading through the Llama family).

    .venv/bin/python tools/reference/models/make_llama_fixtures.py

Writes tests/fixtures/models/<name>/ (config.json + model.safetensors via save_pretrained, bf16
weights) and tests/fixtures/golden/<name>_logits.json ({"prompt_ids", "logits" [T][V],
"greedy_ids"}): the float32 eager forward of the model whose weights are the saved bf16 values
upcast (what from_pretrained(dtype=float32) gives), and its 8-token greedy continuation.
- tiny_llama3: LlamaForCausalLM, GQA (4 heads / 2 KV heads), llama3 rope scaling, tied embeddings.
- tiny_qwen3: Qwen3ForCausalLM, qk-norm, head_dim 24 != hidden / heads, untied lm_head.
Pins: tools/reference/requirements-models.txt.
"""
import json
import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")

COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
              rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)


def build(name, cls, cfg):
    torch.manual_seed(0)
    model = cls(cfg).to(torch.bfloat16)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))
    out = os.path.join(ROOT, "tests", "fixtures", "models", name)
    model.save_pretrained(out)
    ref = cls.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
    prompt = [1] + [int(x) for x in torch.randint(3, 256, (11,), generator=g)]
    with torch.no_grad():
        logits = ref(torch.tensor([prompt])).logits[0]
        gen = ref.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False,
                           attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    golden = {"prompt_ids": prompt, "logits": logits.tolist(),
              "greedy_ids": gen[0, len(prompt):].tolist()}
    dst = os.path.join(ROOT, "tests", "fixtures", "golden", name + "_logits.json")
    with open(dst, "w") as f:
        json.dump(golden, f)
        f.write("\n")
    print("wrote", out, dst)


def main():
    build("tiny_llama3", LlamaForCausalLM, LlamaConfig(
        **COMMON, tie_word_embeddings=True,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8}))
    build("tiny_qwen3", Qwen3ForCausalLM, Qwen3Config(
        **COMMON, head_dim=24, tie_word_embeddings=False, rope_theta=10000.0))


if __name__ == "__main__":
    main()
