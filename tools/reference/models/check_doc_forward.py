#!/usr/bin/env python3
"""Independent float64 re-implementation of shared/docs/MODEL-GLM-DSA.md, checked against the goldens.

It reads only config.json + model.safetensors (no transformers), runs the forward exactly as the doc
describes (per-token causal loop for the indexer top-k, in-place interleaved RoPE pairs, etc.), and
compares with tests/fixtures/golden/<name>.safetensors. A pass means the doc's description and
transformers' numbers agree on these fixtures; it is also a readable reference for the C++ engine.

    .venv/bin/python tools/reference/models/check_doc_forward.py
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

REPO = Path(__file__).resolve().parents[3]
FIX = ["tiny_glm_moe_dsa", "tiny_deepseek_v32", "tiny_deepseek_v3"]
D = torch.float64


def rmsnorm(x, w, eps):
    return w * (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps))


def layernorm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) * torch.rsqrt(var + eps) * w + b


def yarn_mscale(scale, m):
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def rope_tables(cfg, T):
    rp = cfg["rope_parameters"]
    dr = cfg["qk_rope_head_dim"]
    base = rp["rope_theta"]
    i = torch.arange(dr // 2, dtype=D)
    pos_freq = base ** (2 * i / dr)
    inv = 1.0 / pos_freq
    att = 1.0
    if rp["rope_type"] == "yarn":
        f = rp["factor"]
        omax = rp["original_max_position_embeddings"]

        def corr(n):
            return dr * math.log(omax / (n * 2 * math.pi)) / (2 * math.log(base))

        low = max(math.floor(corr(rp.get("beta_fast", 32))), 0)
        high = min(math.ceil(corr(rp.get("beta_slow", 1))), dr - 1)
        if low == high:
            high += 0.001
        ramp = ((i - low) / (high - low)).clamp(0, 1)
        inv = inv / f * ramp + inv * (1 - ramp)
        att = yarn_mscale(f, rp["mscale"]) / yarn_mscale(f, rp["mscale_all_dim"])
    ang = torch.arange(T, dtype=D)[:, None] * inv[None]
    return torch.cos(ang) * att, torch.sin(ang) * att  # [T, dr/2]


def rope_interleaved(x, c, s):  # x [T, ..., dr]; pairs (2i, 2i+1), rotated in place
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = b * c + a * s
    return out


def rope_half(x, c, s):  # pairs (i, i + dr/2)
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return torch.cat([a * c - b * s, b * c + a * s], -1)


def swiglu(x, wg, wu, wd):
    g = x @ wg.T
    return (g * torch.sigmoid(g) * (x @ wu.T)) @ wd.T


def forward(cfg, W, ids, kind):
    T = ids.numel()
    H, dn, dr, dv = cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    Rkv = cfg["kv_lora_rank"]
    dq = dn + dr
    eps = cfg["rms_norm_eps"]
    c, s = rope_tables(cfg, T)
    cH, sH = c[:, None, :], s[:, None, :]
    scale = dq**-0.5
    rp = cfg["rope_parameters"]
    if rp["rope_type"] != "default" and rp.get("mscale_all_dim"):
        m = yarn_mscale(rp["factor"], rp["mscale_all_dim"])
        scale *= m * m
    dsa = kind != "deepseek_v3"
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    n_dense = cfg["first_k_dense_replace"]

    x = W["model.embed_tokens.weight"][ids]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        a_ = p + "self_attn."
        h = rmsnorm(x, W[p + "input_layernorm.weight"], eps)
        cq = rmsnorm(h @ W[a_ + "q_a_proj.weight"].T, W[a_ + "q_a_layernorm.weight"], 1e-6)
        q = (cq @ W[a_ + "q_b_proj.weight"].T).view(T, H, dq)
        q_nope, q_pe = q[..., :dn], rope_interleaved(q[..., dn:], cH, sH)
        kva = h @ W[a_ + "kv_a_proj_with_mqa.weight"].T
        ckv = rmsnorm(kva[:, :Rkv], W[a_ + "kv_a_layernorm.weight"], 1e-6)
        k_pe = rope_interleaved(kva[:, Rkv:], c, s)  # [T, dr]
        kv = (ckv @ W[a_ + "kv_b_proj.weight"].T).view(T, H, dn + dv)
        k_nope, V = kv[..., :dn], kv[..., dn:]
        A = scale * (torch.einsum("thd,uhd->htu", q_nope, k_nope) + torch.einsum("thd,ud->htu", q_pe, k_pe))
        allowed = causal.clone()
        if dsa:
            i_ = a_ + "indexer."
            nI, dI = cfg["index_n_heads"], cfg["index_head_dim"]
            qI = (cq @ W[i_ + "wq_b.weight"].T).view(T, nI, dI)
            kI = layernorm(h @ W[i_ + "wk.weight"].T, W[i_ + "k_norm.weight"], W[i_ + "k_norm.bias"], 1e-6)
            rope = rope_interleaved if kind == "glm_moe_dsa" else rope_half
            qI = torch.cat([rope(qI[..., :dr], cH, sH), qI[..., dr:]], -1)
            kI = torch.cat([rope(kI[..., :dr], c, s), kI[..., dr:]], -1)
            w = (h @ W[i_ + "weights_proj.weight"].T) * nI**-0.5  # [T, nI]
            Sc = torch.einsum("tj,tju->tu", w, torch.relu(dI**-0.5 * torch.einsum("tjd,ud->tju", qI, kI)))
            allowed = torch.zeros(T, T, dtype=torch.bool)
            for t in range(T):
                k = min(cfg["index_topk"], t + 1)
                allowed[t, torch.topk(Sc[t, : t + 1], k).indices] = True
        A = A.masked_fill(~allowed[None], float("-inf"))
        P = torch.softmax(A, -1)
        O = torch.einsum("htu,uhd->thd", P, V).reshape(T, H * dv)
        x = x + O @ W[a_ + "o_proj.weight"].T

        g = rmsnorm(x, W[p + "post_attention_layernorm.weight"], eps)
        m_ = p + "mlp."
        if l < n_dense:
            y = swiglu(g, W[m_ + "gate_proj.weight"], W[m_ + "up_proj.weight"], W[m_ + "down_proj.weight"])
        else:
            E, K = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
            G, TG = cfg["n_group"], cfg["topk_group"]
            sc = torch.sigmoid(g @ W[m_ + "gate.weight"].T)
            sfc = sc + W[m_ + "gate.e_score_correction_bias"]
            gs = sfc.view(T, G, E // G).topk(2, -1).values.sum(-1)
            keep = torch.zeros(T, G, dtype=torch.bool)
            keep.scatter_(1, gs.topk(TG, -1).indices, True)
            sfc = sfc.masked_fill(~keep.repeat_interleave(E // G, 1), float("-inf"))
            idx = sfc.topk(K, -1).indices
            wt = sc.gather(1, idx)
            if cfg["norm_topk_prob"]:
                wt = wt / (wt.sum(-1, keepdim=True) + 1e-20)
            wt = wt * cfg["routed_scaling_factor"]
            y = swiglu(g, W[m_ + "shared_experts.gate_proj.weight"], W[m_ + "shared_experts.up_proj.weight"],
                       W[m_ + "shared_experts.down_proj.weight"])
            for t in range(T):
                for j in range(K):
                    e = int(idx[t, j])
                    ep = f"{m_}experts.{e}."
                    y[t] += wt[t, j] * swiglu(g[t : t + 1], W[ep + "gate_proj.weight"], W[ep + "up_proj.weight"],
                                              W[ep + "down_proj.weight"])[0]
        x = x + y
    x = rmsnorm(x, W["model.norm.weight"], eps)
    return x @ W["lm_head.weight"].T


def main() -> int:
    ok = True
    for name in FIX:
        mdir = REPO / "tests/fixtures/models" / name
        cfg = json.loads((mdir / "config.json").read_text())
        W = {k: v.to(D) for k, v in load_file(mdir / "model.safetensors").items()}
        g = load_file(REPO / "tests/fixtures/golden" / f"{name}.safetensors")
        full_ids = torch.cat([g["prompt_ids"], g["continuation"]])
        with torch.no_grad():
            lp = forward(cfg, W, g["prompt_ids"], cfg["model_type"])
            lf = forward(cfg, W, full_ids, cfg["model_type"])
        ref = g["logits"].to(D).abs().max()
        e1 = float((lp - g["logits"].to(D)).abs().max() / ref)
        e2 = float((lf - g["full_logits"].to(D)).abs().max() / ref)
        greedy = torch.equal(lf[47:63].argmax(-1), g["continuation"])
        good = e1 < 1e-4 and e2 < 1e-4 and greedy
        ok &= good
        print(f"{name}: max rel err prompt {e1:.2e}, full {e2:.2e}, greedy match {greedy} -> {'OK' if good else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
