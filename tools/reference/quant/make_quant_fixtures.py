#!/usr/bin/env python3
"""Quantized tiny fixtures and their transformers goldens (tests/fixtures/quant/).

Run from the repository root with the reference venv (tools/reference/requirements-quant.txt):

    python tools/reference/quant/make_quant_fixtures.py modelopt   # NVFP4 by NVIDIA ModelOpt
    python tools/reference/quant/make_quant_fixtures.py fp8        # FP8 block by quant_ref.py
    python tools/reference/quant/make_quant_fixtures.py kvfp8      # FP8 KV-cache golden
    python tools/reference/quant/make_quant_fixtures.py golden DIR # golden for any quantized dir
    python tools/reference/quant/make_quant_fixtures.py roundtrip  # dequant hashes of lucid's output

Goldens: the checkpoint is dequantized by quant_ref.py (never by lucid), loaded into transformers'
own model class in fp32 (eager attention), and a prompt is chosen with the same tie/margin rules as
tools/reference/models/make_fixtures.py (every top-k decision and every greedy step has a clear
gap), so lucid's fp32-accumulation differences cannot flip a discrete choice.
"""

from __future__ import annotations

import copy
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tools" / "reference" / "models"))

import make_fixtures as mf  # noqa: E402
import quant_ref as qr  # noqa: E402

BASE = REPO / "tests" / "fixtures" / "models"
OUT = REPO / "tests" / "fixtures" / "quant"
GOLD = OUT / "golden"
PROMPT_LEN, GEN_LEN = mf.PROMPT_LEN, mf.GEN_LEN


def model_cls_for(cfg: dict):
    return getattr(transformers, cfg["architectures"][0])


# ---------------------------------------------------------------------------------------------
# fixtures


def make_modelopt(base: str = "tiny_glm_moe_dsa") -> Path:
    """NVFP4 with ModelOpt's own quantize + export (CPU), from the bf16 tiny GLM fixture."""
    import modelopt
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_hf_checkpoint

    src = BASE / base
    cls = model_cls_for(json.loads((src / "config.json").read_text()))
    model = cls.from_pretrained(src, dtype=torch.bfloat16, attn_implementation="eager").eval()
    orig = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def calib(m):
        g = torch.Generator().manual_seed(0)
        for _ in range(4):
            m(input_ids=torch.randint(0, 256, (1, 32), generator=g))

    torch.manual_seed(0)
    model = mtq.quantize(model, mtq.NVFP4_DEFAULT_CFG, forward_loop=calib)
    out = OUT / f"{base}_nvfp4_modelopt"
    if out.exists():
        shutil.rmtree(out)
    with torch.no_grad():
        export_hf_checkpoint(model, export_dir=out)
    # Check ModelOpt's packed tensors against quant_ref's re-quantization of the original weights
    # with ModelOpt's own weight_scale_2 (ties into the documented formula, bit for bit).
    state = qr.read_state(out)
    checked = 0
    for k, t in state.items():
        if not k.endswith(".weight_scale_2"):
            continue
        m = k[: -len(".weight_scale_2")]
        w = orig_weight(orig, m)
        packed, s8, _ = qr.nvfp4_quantize(w, t)
        assert torch.equal(packed, state[m + ".weight"]), m
        assert torch.equal(s8.view(torch.uint8), state[m + ".weight_scale"].view(torch.uint8)), m
        checked += 1
    note = {
        "producer": f"nvidia-modelopt {modelopt.__version__} mtq.NVFP4_DEFAULT_CFG, export_hf_checkpoint, CPU",
        "base": f"tests/fixtures/models/{base} loaded in bf16",
        "calibration": "4 random prompts of 32 tokens (torch.Generator seed 0)",
        "tensors_matching_quant_ref_bit_for_bit": checked,
    }
    (out / "FIXTURE.json").write_text(json.dumps(note, indent=2) + "\n")
    print(json.dumps(note, indent=1))
    return out


def orig_weight(orig: dict, module: str) -> torch.Tensor:
    """The pre-quantization weight of `module` (transformers keeps experts fused in memory)."""
    if module + ".weight" in orig:
        return orig[module + ".weight"]
    pre, e, proj = module.rsplit(".", 2)  # model.layers.L.mlp.experts, e, gate_proj
    e = int(e)
    if proj == "down_proj":
        return orig[pre + ".down_proj"][e]
    gu = orig[pre + ".gate_up_proj"][e]
    half = gu.shape[0] // 2
    return gu[:half] if proj == "gate_proj" else gu[half:]


FP8_KEEP = ("lm_head", "*.mlp.gate", "*.indexer.weights_proj", "model.embed_tokens")


def make_fp8(base: str = "tiny_deepseek_v32", ue8m0: bool = True) -> Path:
    """DeepSeek-style FP8 block checkpoint written by quant_ref.py."""
    src = BASE / base
    cfg = json.loads((src / "config.json").read_text())
    state = qr.read_state(src)
    out = OUT / f"{base}_fp8"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    new = {}
    for k in sorted(state):
        t = state[k]
        m = k[: -len(".weight")] if k.endswith(".weight") else None
        if m is None or t.dim() != 2 or any(qr.matches(p, m) for p in FP8_KEEP):
            new[k] = t.contiguous()
            continue
        q, s = qr.fp8_block_quantize(t, ue8m0)
        new[k] = q.contiguous()
        new[m + ".weight_scale_inv"] = s.contiguous()
    save_file(new, str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                  "weight_block_size": [128, 128]}
    if ue8m0:
        cfg["quantization_config"]["scale_fmt"] = "ue8m0"
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    shutil.copy(src / "generation_config.json", out / "generation_config.json")
    (out / "FIXTURE.json").write_text(json.dumps({
        "producer": "tools/reference/quant/quant_ref.py fp8_block_quantize",
        "base": f"tests/fixtures/models/{base}", "scale_fmt": "ue8m0" if ue8m0 else None,
        "kept_high_precision": list(FP8_KEEP)}, indent=2) + "\n")
    return out


# ---------------------------------------------------------------------------------------------
# goldens


def dequantized_model(qdir: Path):
    state, meta = qr.dequantize_state(qdir)
    cfg = json.loads((qdir / "config.json").read_text())
    cfg.pop("quantization_config", None)
    tmp = Path(tempfile.mkdtemp())
    (tmp / "config.json").write_text(json.dumps(cfg))
    save_file({k: v.float().contiguous() for k, v in state.items()}, str(tmp / "model.safetensors"),
              metadata={"format": "pt"})
    model = mf.load_fp32(tmp, model_cls_for(cfg))
    shutil.rmtree(tmp)
    return model, meta, cfg


class KvFp8Sim:
    """Patches transformers' Cache so that what is cached is what lucid's fp8 KV cache stores:
    MLA latent per-128 e4m3 with amax/448 scales, RoPE part bf16, indexer keys e4m3 per key."""

    def __enter__(self):
        C = transformers.cache_utils.Cache
        self._u, self._ui = C.update, C.update_indexer
        u, ui = self._u, self._ui

        def update(cache, k, v, layer_idx, *a, **kw):
            return u(cache, qr.kv_fp8_blocks(k, 128), v.to(torch.bfloat16).to(v.dtype), layer_idx, *a, **kw)

        def update_indexer(cache, k, layer_idx):
            return ui(cache, qr.kv_fp8_blocks(k, k.shape[-1]), layer_idx)

        C.update, C.update_indexer = update, update_indexer
        return self

    def __exit__(self, *exc):
        C = transformers.cache_utils.Cache
        C.update, C.update_indexer = self._u, self._ui
        return False


@torch.no_grad()
def forward_cached(model, ids):
    cache = transformers.DynamicCache(config=model.config)
    return model(input_ids=ids[None], cache=cache, use_cache=True).logits[0].float()


def choose_prompt(model, fwd):
    vocab = model.config.vocab_size
    passing, rejected, tries = [], {"topk": 0, "greedy": 0, "eos": 0, "disagree": 0}, 0
    for seed in range(mf.MAX_PROMPT_TRIES):
        if len(passing) >= mf.PASSES_WANTED:
            break
        tries += 1
        prompt = torch.randint(0, vocab, (PROMPT_LEN,), generator=torch.Generator().manual_seed(seed))
        cont, step_logits = mf.greedy_loop(model, prompt, GEN_LEN)
        if 1 in cont.tolist():
            rejected["eos"] += 1
            continue
        full_ids = torch.cat([prompt, cont])
        with mf.TopkSpy() as spy:
            full = fwd(model, full_ids)
        tk = mf.topk_min_gap(spy.calls)
        gr = mf.greedy_min_gap(full[PROMPT_LEN - 1:PROMPT_LEN - 1 + GEN_LEN])
        grl = mf.greedy_min_gap(step_logits)
        if tk["rel_gap"] < mf.TOPK_REL_GAP:
            rejected["topk"] += 1
            continue
        if min(gr["rel_gap"], grl["rel_gap"]) < mf.GREEDY_REL_GAP:
            rejected["greedy"] += 1
            continue
        if not torch.equal(torch.argmax(full[PROMPT_LEN - 1:PROMPT_LEN - 1 + GEN_LEN], -1), cont):
            rejected["disagree"] += 1
            continue
        margin = min(tk["rel_gap"] / mf.TOPK_REL_GAP, gr["rel_gap"] / mf.GREEDY_REL_GAP,
                     grl["rel_gap"] / mf.GREEDY_REL_GAP)
        passing.append(dict(seed=seed, prompt=prompt, cont=cont, full=full, topk=tk, greedy=gr,
                            greedy_cached=grl, margin=margin))
    if not passing:
        raise RuntimeError(f"no prompt passed: {rejected}")
    best = max(passing, key=lambda c: c["margin"])
    best["selection"] = {"tried": tries, "passing_seeds": [c["seed"] for c in passing],
                         "rejected": rejected}
    return best


def write_golden(name: str, model, fwd, extra: dict):
    torch.set_num_threads(1)
    best = choose_prompt(model, fwd)
    prompt, cont = best["prompt"], best["cont"]
    gen = mf.greedy_generate(model, prompt, GEN_LEN)
    assert torch.equal(gen, cont), (gen, cont)
    logits = fwd(model, prompt)
    GOLD.mkdir(parents=True, exist_ok=True)
    save_file({"prompt_ids": prompt.to(torch.int64).contiguous(), "logits": logits.contiguous(),
               "continuation": cont.to(torch.int64).contiguous(), "full_logits": best["full"].contiguous()},
              str(GOLD / f"{name}.safetensors"), metadata={"format": "pt", "fixture": name})
    meta = {
        "fixture": name,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "seed": best["seed"],
        "seed_meaning": "prompt_ids = torch.randint(0, vocab, (48,), generator=torch.Generator().manual_seed(seed))",
        "prompt_ids": prompt.tolist(),
        "continuation": cont.tolist(),
        "max_abs_logit": float(max(logits.abs().max(), best["full"].abs().max())),
        "min_topk_gap": best["topk"],
        "min_greedy_gap": best["greedy"],
        "min_greedy_gap_cached_decode": best["greedy_cached"],
        "thresholds": f"topk gap >= {mf.TOPK_REL_GAP} x row max, greedy gap >= {mf.GREEDY_REL_GAP} x max|logit|",
        "prompt_selection": best["selection"],
        "compute": "fp32, CPU, eager attention; weights dequantized by tools/reference/quant/quant_ref.py",
    }
    meta.update(extra)
    (GOLD / f"{name}.json").write_text(json.dumps(mf.json_clean(meta), indent=2) + "\n")
    print(name, json.dumps({k: meta[k] for k in ("seed", "max_abs_logit", "min_topk_gap", "min_greedy_gap")}))


def golden_for(qdir: Path):
    model, meta, cfg = dequantized_model(qdir)
    write_golden(qdir.name, model, mf.forward_logits,
                 {"model_dir": str(qdir.relative_to(REPO)), "quantization": meta})


def golden_kvfp8(base: str = "tiny_glm_moe_dsa"):
    cfg = json.loads((BASE / base / "config.json").read_text())
    model = mf.load_fp32(BASE / base, model_cls_for(cfg))
    with KvFp8Sim():
        write_golden(f"{base}_kvfp8", model, forward_cached, {
            "model_dir": f"tests/fixtures/models/{base}",
            "kv_cache": "fp8_e4m3 simulated: every cached MLA latent quantize-dequantized per 128 values "
                        "(e4m3, scale amax/448), the RoPE part rounded to bf16, every indexer key "
                        "quantize-dequantized with one amax/448 scale; all attention reads the cached values",
        })
    plain = mf.forward_logits(model, torch.tensor(json.loads((GOLD / f"{base}_kvfp8.json").read_text())["prompt_ids"]))
    with KvFp8Sim():
        sim = forward_cached(model, torch.tensor(json.loads((GOLD / f"{base}_kvfp8.json").read_text())["prompt_ids"]))
    meta = json.loads((GOLD / f"{base}_kvfp8.json").read_text())
    meta["fp8_vs_unquantized_kv_max_abs_diff"] = float((plain - sim).abs().max())
    (GOLD / f"{base}_kvfp8.json").write_text(json.dumps(meta, indent=2) + "\n")
    print("fp8 KV changes the prompt logits by", meta["fp8_vs_unquantized_kv_max_abs_diff"])


def roundtrip():
    """Dequantize lucid's quantized checkpoints with quant_ref and record per-tensor hashes."""
    for scheme in ("nvfp4", "fp8"):
        qdir = OUT / f"roundtrip_{scheme}"
        state, meta = qr.dequantize_state(qdir)
        hashes = {}
        for k in sorted(state):
            t = state[k]
            if t.dtype != torch.float32 and t.dim() == 2 and k.endswith(".weight"):
                pass
            if k.endswith(".weight") and t.dim() == 2:
                hashes[k] = {"shape": list(t.shape), "fnv1a64_f32": qr.fnv1a64(t.float().contiguous().numpy().tobytes())}
        (qdir.parent / f"roundtrip_{scheme}.dequant.json").write_text(json.dumps({
            "checkpoint": str(qdir.relative_to(REPO)),
            "dequantizer": "tools/reference/quant/quant_ref.py dequantize_state",
            "hash": "64-bit FNV-1a over the little-endian float32 bytes of each dequantized [out, in] weight",
            "quantization": meta, "tensors": hashes}, indent=1) + "\n")
        print(scheme, len(hashes), "tensors")


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    what = sys.argv[1]
    if what == "modelopt":
        golden_for(make_modelopt())
    elif what == "fp8":
        golden_for(make_fp8())
    elif what == "kvfp8":
        golden_kvfp8()
    elif what == "golden":
        golden_for(Path(sys.argv[2]).resolve())
    elif what == "roundtrip":
        roundtrip()
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
