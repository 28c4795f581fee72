"""Reference (de)quantization for lucid's quantized checkpoints, independent of lucid.

Formats (docs/MODEL-GLM-DSA.md section 4, docs/QUANTIZATION.md):

NVFP4 (NVIDIA ModelOpt), per Linear `m`:
  m.weight          uint8 [out, ceil(in/16)*8]  two e2m1 codes per byte, LOW nibble = even column
  m.weight_scale    float8_e4m3fn [out, ceil(in/16)]
  m.weight_scale_2  float32 scalar
  W[o, i] = (e2m1[code] * float(weight_scale[o, i//16])) * weight_scale_2   (f32, in that order)
Quantization follows ModelOpt 0.47 NVFP4QTensor.quantize: scale_2 = amax(W) / (6 * 448);
per-block scale = block_amax / (6 * scale_2), 0 -> 1, clamped to [2^-9, 448], cast to e4m3 (RNE);
codes = round-to-nearest-even e2m1 of W / (float(scale) * scale_2), saturating at 6, sign bit set
for negative inputs only (so -0.0 gives code 0). ModelOpt's exporter also gives modules that share
an input (gate/up of one MLP, q_a/kv_a of one attention) the same scale_2 (the max); so do we.

FP8 block (DeepSeek), per Linear `m`:
  m.weight            float8_e4m3fn [out, in]
  m.weight_scale_inv  float32 [ceil(out/128), ceil(in/128)]   (multiplies, despite the name)
  W[o, i] = float(weight[o, i]) * weight_scale_inv[o//128, i//128]
Quantization: s = max(block_amax, 1e-4) / 448 (DeepSeek's act_quant clamp), rounded UP to a power
of two when scale_fmt is ue8m0 (exactly, via frexp); codes = e4m3(clamp(W / s, -448, 448)), RNE.

FP8 KV cache simulation (what lucid's --kv-cache-dtype fp8_e4m3 stores):
  MLA latent: per 128 values s = amax / 448 (0 -> values 0), e4m3(x / s) * s; RoPE part: bf16.
  Indexer key: one scale per key, same rule over the whole key.
"""

from __future__ import annotations

import json
import os
import re
from fnmatch import fnmatchcase
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open

E2M1_VALUES = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6],
                           dtype=torch.float32)
E2M1_BOUNDS = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5], dtype=torch.float32)
E4M3_MAX = 448.0
E2M1_MAX = 6.0


# ---------------------------------------------------------------------------------------------
# NVFP4


def nvfp4_global_scale(w: torch.Tensor) -> torch.Tensor:
    return w.abs().amax().float() / (E2M1_MAX * E4M3_MAX)


def nvfp4_quantize(w: torch.Tensor, scale_2: torch.Tensor | None = None, group: int = 16):
    """w [out, in] float -> (packed uint8 [out, ceil(in/16)*8], e4m3 scales, f32 scale_2)."""
    w = w.float()
    out_f, in_f = w.shape
    pad = (-in_f) % group
    if pad:
        w = torch.nn.functional.pad(w, (0, pad))
    if scale_2 is None:
        scale_2 = nvfp4_global_scale(w)
    scale_2 = scale_2.float().reshape(())
    blocks = w.view(out_f, -1, group)
    amax = blocks.abs().amax(-1).float()
    s = amax / (E2M1_MAX * scale_2)
    s[s == 0] = 1.0
    s8 = s.clamp(min=2**-9, max=E4M3_MAX).to(torch.float8_e4m3fn)
    scaled = blocks / (s8.float() * scale_2).unsqueeze(-1)
    scaled = scaled.reshape(out_f, -1)
    sign = (scaled < 0).to(torch.uint8)
    a = scaled.abs()
    ordv = torch.searchsorted(E2M1_BOUNDS, a, out_int32=True).to(torch.uint8)
    odd = torch.any(a.unsqueeze(-1) == E2M1_BOUNDS[[1, 3, 5]], dim=-1).to(torch.uint8)
    codes = (sign << 3) + ordv + odd
    packed = (codes[:, 1::2] << 4) | codes[:, 0::2]
    return packed.contiguous(), s8.contiguous(), scale_2.clone()


def nvfp4_dequantize(packed: torch.Tensor, scale: torch.Tensor, scale_2: torch.Tensor, in_f: int):
    lo = (packed & 0x0F).long()
    hi = (packed >> 4).long()
    codes = torch.stack([lo, hi], dim=-1).reshape(packed.shape[0], -1)[:, :in_f]
    vals = E2M1_VALUES[codes]
    s = scale.float().repeat_interleave(16, dim=1)[:, :in_f]
    return (vals * s) * scale_2.float().reshape(())


# ---------------------------------------------------------------------------------------------
# FP8 block


def pow2_ceil(s: torch.Tensor) -> torch.Tensor:
    m, e = torch.frexp(s)
    return torch.where(m == 0.5, s, torch.ldexp(torch.ones_like(s), e))


def fp8_block_quantize(w: torch.Tensor, ue8m0: bool, block=(128, 128)):
    w = w.float()
    out_f, in_f = w.shape
    br, bc = block
    nr, nc = -(-out_f // br), -(-in_f // bc)
    scales = torch.empty(nr, nc, dtype=torch.float32)
    q = torch.empty(out_f, in_f, dtype=torch.float8_e4m3fn)
    for i in range(nr):
        for j in range(nc):
            blk = w[i * br:(i + 1) * br, j * bc:(j + 1) * bc]
            s = blk.abs().amax().clamp(min=1e-4) / E4M3_MAX
            if ue8m0:
                s = pow2_ceil(s)
            scales[i, j] = s
            q[i * br:(i + 1) * br, j * bc:(j + 1) * bc] = (blk / s).clamp(-E4M3_MAX, E4M3_MAX).to(
                torch.float8_e4m3fn)
    return q, scales


def fp8_block_dequantize(q: torch.Tensor, scale_inv: torch.Tensor, block=(128, 128)):
    out_f, in_f = q.shape
    s = scale_inv.float().repeat_interleave(block[0], 0)[:out_f].repeat_interleave(block[1], 1)[:, :in_f]
    return q.float() * s


# ---------------------------------------------------------------------------------------------
# KV cache simulation


def kv_fp8_blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    """Quantize-dequantize the last dim in blocks of `block` values with s = amax/448."""
    shp = x.shape
    n = shp[-1]
    out = torch.empty_like(x, dtype=torch.float32)
    xf = x.float()
    for b0 in range(0, n, block):
        blk = xf[..., b0:b0 + block]
        s = blk.abs().amax(-1, keepdim=True) / E4M3_MAX
        safe = torch.where(s == 0, torch.ones_like(s), s)
        q = (blk / safe).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float()
        out[..., b0:b0 + block] = torch.where(s == 0, torch.zeros_like(blk), q * s)
    return out.to(x.dtype)


# ---------------------------------------------------------------------------------------------
# checkpoints


def read_state(model_dir: Path) -> dict[str, torch.Tensor]:
    files = sorted(p for p in os.listdir(model_dir) if p.endswith(".safetensors"))
    state = {}
    for f in files:
        with safe_open(model_dir / f, "pt") as h:
            for k in h.keys():
                state[k] = h.get_tensor(k)
    return state


def quant_metadata(model_dir: Path) -> dict:
    cfg = json.loads((model_dir / "config.json").read_text())
    hq = model_dir / "hf_quant_config.json"
    if hq.exists():
        q = json.loads(hq.read_text())["quantization"]
        return {"method": "modelopt", "algo": q["quant_algo"], "group": q.get("group_size", 16)}
    qc = cfg.get("quantization_config")
    if qc is None:
        return {"method": "none"}
    if qc["quant_method"] == "modelopt":
        return {"method": "modelopt", "algo": qc["quant_algo"], "group": qc.get("group_size", 16)}
    if qc["quant_method"] == "fp8":
        return {"method": "fp8", "block": tuple(qc["weight_block_size"])}
    raise ValueError(f"unknown quant_method {qc['quant_method']}")


def dequantize_state(model_dir: Path, shapes: dict[str, tuple[int, int]] | None = None):
    """All tensors of a quantized checkpoint, packed Linears dequantized to f32 (scales dropped).

    `shapes` optionally gives each quantized weight's logical [out, in] (needed only when `in` is
    not a multiple of 16 for NVFP4); by default in = 2 * packed columns.
    """
    meta = quant_metadata(model_dir)
    state = read_state(model_dir)
    out = {}
    for k, t in state.items():
        if k.endswith((".weight_scale", ".weight_scale_2", ".input_scale", ".weight_scale_inv")):
            continue
        m = k[: -len(".weight")] if k.endswith(".weight") else None
        if m is not None and m + ".weight_scale_2" in state:
            in_f = shapes[k][1] if shapes and k in shapes else t.shape[1] * 2
            out[k] = nvfp4_dequantize(t, state[m + ".weight_scale"], state[m + ".weight_scale_2"], in_f)
        elif m is not None and m + ".weight_scale_inv" in state:
            out[k] = fp8_block_dequantize(t, state[m + ".weight_scale_inv"], meta.get("block", (128, 128)))
        else:
            out[k] = t
    return out, meta


def fnv1a64(data: bytes) -> str:
    """64-bit FNV-1a of the bytes, as 16 hex digits (lucid's round-trip test computes the same)."""
    a = np.frombuffer(data, dtype=np.uint8)
    h = np.uint64(0xCBF29CE484222325)
    prime = np.uint64(0x100000001B3)
    with np.errstate(over="ignore"):
        for b in a:  # small tensors only
            h = np.uint64((h ^ np.uint64(b)) * prime)
    return f"{int(h):016x}"


MODULE_RE = re.compile(r"\.weight$")


def matches(pattern: str, module: str) -> bool:
    return fnmatchcase(module, pattern) or fnmatchcase(module, pattern + ".*")
