"""Writes tests/fixtures/rope/*.json: RoPE inverse frequencies and attention factors computed by
transformers' own rope init functions (the oracle for src/models/rope.cpp).

Usage: python tools/reference/gen_rope_golden.py  (venv from tools/reference/requirements-models.txt)
"""
import json
import os

import transformers
from transformers import DeepseekV32Config, GlmMoeDsaConfig, LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "rope")

CASES = {
    "yarn_deepseek_v32": (DeepseekV32Config, {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                           "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1,
                           "mscale": 1.0, "mscale_all_dim": 1.0}),
    "yarn_no_mscale": (DeepseekV32Config, {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                        "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1}),
    "yarn_small_dim": (DeepseekV32Config, {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0,
                        "original_max_position_embeddings": 256, "beta_fast": 16, "beta_slow": 2,
                        "mscale": 0.707, "mscale_all_dim": 0.707}),
    "default_glm5": (GlmMoeDsaConfig, {"rope_type": "default", "rope_theta": 1000000.0}),
    # Llama 3.1's parameters at head_dim 128: all three bands (high, smoothed, low frequency).
    "llama3_8b": (LlamaConfig, {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192}),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, (cls, params) in CASES.items():
        kw = {"rope_parameters": params}
        if name == "yarn_small_dim":
            kw["qk_rope_head_dim"] = 16
        cfg = cls(**kw)
        rope_type = params["rope_type"]
        if rope_type == "default":
            from transformers.models.glm_moe_dsa.modeling_glm_moe_dsa import GlmMoeDsaRotaryEmbedding
            inv, af = GlmMoeDsaRotaryEmbedding.compute_default_rope_parameters(cfg)
        else:
            inv, af = ROPE_INIT_FUNCTIONS[rope_type](cfg)
        if cls is LlamaConfig:
            kw.update(hidden_size=4096, num_attention_heads=32)
            cfg = cls(**kw)
            inv, af = ROPE_INIT_FUNCTIONS[rope_type](cfg)
        dim = cfg.head_dim if cls is LlamaConfig else cfg.qk_rope_head_dim
        doc = {"transformers_version": transformers.__version__, "dim": dim,
               "rope_parameters": params, "inv_freq": [float(x) for x in inv], "attention_factor": af}
        with open(os.path.join(OUT, name + ".json"), "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
