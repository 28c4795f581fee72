#!/usr/bin/env python3
"""Writes tests/fixtures/gguf/smollm2_logits.json: what transformers computes from
SmolLM2-135M-Instruct.Q4_1.gguf (loaded with `gguf_file=`, which dequantizes every tensor to
float32), for lucid's models/llama_family_smollm2_test.cpp to compare against:

- `prompt_ids`: a 64-token English prompt (transformers' tokenizer built from the same file);
- per prompt row: the 16 largest logits (ids and values), max |logit| and logsumexp of the row;
- `greedy_ids`: the 32-token greedy continuation of the prompt (argmax, no sampling);
- `paragraph_ids` / `paragraph_ppl`: tests/fixtures/gguf/paragraph.txt tokenized (BOS-less, as
  the tokenizer adds none) and its perplexity exp(mean NLL of tokens 1..n-1), one forward pass.

Pins: tools/reference/requirements-models.txt (torch, transformers) and gguf/requirements.txt.
Only CPU math is needed. Eager attention in float32.

Usage: .venv/bin/python tools/reference/gguf/smollm2_logits.py .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "..", "..", "tests", "fixtures", "gguf")
PROMPT = ("The history of the city begins with a small settlement on the banks of the river, "
          "where farmers and traders met to exchange grain, cloth and tools. Over the centuries "
          "the market grew into a town, the town into a city, and the city into the capital of a "
          "large and prosperous region whose roads and rivers reached every corner")
TOP = 16


def main():
    path = os.path.abspath(sys.argv[1])
    d, name = os.path.dirname(path), os.path.basename(path)
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    ids = tok(PROMPT, add_special_tokens=False)["input_ids"][:64]
    assert len(ids) == 64, len(ids)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].to(torch.float32)
        rows = []
        for r in range(logits.shape[0]):
            row = logits[r]
            top = torch.topk(row, TOP)
            rows.append({"ids": top.indices.tolist(), "values": top.values.tolist(),
                         "max_abs": row.abs().max().item(),
                         "logsumexp": torch.logsumexp(row.double(), 0).item()})
        gen = model.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False,
                             attention_mask=torch.ones(1, 64, dtype=torch.long))
        greedy = gen[0, 64:].tolist()
        with open(os.path.join(FIXTURES, "paragraph.txt"), encoding="utf-8") as f:
            text = f.read()
        pids = tok(text, add_special_tokens=False)["input_ids"]
        pl = model(torch.tensor([pids])).logits[0].double()
        nll = torch.nn.functional.cross_entropy(pl[:-1], torch.tensor(pids[1:]))
        ppl = torch.exp(nll).item()
    out = {"source": name, "torch": torch.__version__, "transformers": transformers.__version__,
           "prompt_ids": ids, "top": TOP, "rows": rows, "greedy_ids": greedy,
           "paragraph_ids": pids, "paragraph_ppl": ppl}
    dst = os.path.join(FIXTURES, "smollm2_logits.json")
    with open(dst, "w") as f:
        json.dump(out, f)
        f.write("\n")
    print(f"wrote {dst}: greedy {tok.decode(greedy)!r}, paragraph {len(pids)} tokens, ppl {ppl:.4f}")


if __name__ == "__main__":
    main()
