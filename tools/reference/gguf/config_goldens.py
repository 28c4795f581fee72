#!/usr/bin/env python3
"""Golden for the model config and tensor names lucid derives from a GGUF file's metadata.

- "config": transformers' GGUF config mapping (integrations/ggml.py GGUF_CONFIG_MAPPING, the table
  AutoConfig.from_pretrained(..., gguf_file=...) applies) over the file's `<arch>.*` keys.
- "hf_names": for every tensor of the file, the Hugging Face name that the converter's own table
  (the gguf package's TensorNameMap, which convert_hf_to_gguf.py uses to name tensors) maps to it.

Usage: .venv/bin/python tools/reference/gguf/config_goldens.py GGUF_FILE OUT.json
"""
import json
import sys

import gguf
from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

ARCHS = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2, "qwen3": gguf.MODEL_ARCH.QWEN3}

# Hugging Face names of one Llama-family decoder layer (and the non-layer tensors).
HF_LAYER = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
            "self_attn.q_norm", "self_attn.k_norm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
            "input_layernorm", "post_attention_layernorm"]
HF_TOP = ["model.embed_tokens", "model.norm", "lm_head"]


def field(r, key):
    f = r.fields[key]
    return f.contents()


def main():
    r = gguf.GGUFReader(sys.argv[1])
    arch = field(r, "general.architecture")
    config = {}
    for suffix, hf in GGUF_CONFIG_MAPPING[arch].items():
        key = f"{arch}.{suffix}"
        if hf is not None and key in r.fields:
            config[hf] = field(r, key)
    n_layers = field(r, f"{arch}.block_count")
    names = gguf.get_tensor_name_map(ARCHS[arch], n_layers)
    inverse = {}
    for base in HF_TOP + [f"model.layers.{i}.{t}" for i in range(n_layers) for t in HF_LAYER]:
        for suffix in (".weight", ".bias"):
            g = names.get_name(base + suffix, try_suffixes=(".weight", ".bias"))
            if g is not None:
                inverse[g] = base + suffix
    hf_names = {t.name: inverse.get(t.name) for t in r.tensors}
    json.dump({"architecture": arch, "config": config, "hf_names": hf_names}, open(sys.argv[2], "w"),
              indent=1, sort_keys=True)
    print(json.dumps(config))


if __name__ == "__main__":
    main()
