#!/usr/bin/env python3
"""Writes tests/fixtures/quant/fp8_act_groups.bin for src/ops/fp8_activations_test.cpp.

The oracle is SGLang's per-token-group FP8 quantization (per_token_group_quant_fp8's reference
arithmetic) written in numpy, with ml_dtypes' float8_e4m3fn cast (round to nearest even):
    amax  = max(|x|) over 128 columns of a row (the last group may be shorter)
    scale = float32(max(amax, 1e-10)) / 448
    code  = float8_e4m3fn(clip(x / scale, -448, 448))
Pinned versions: tools/reference/requirements-dtypes.txt.

    python3 -m venv /tmp/dtvenv
    /tmp/dtvenv/bin/pip install -r tools/reference/requirements-dtypes.txt
    /tmp/dtvenv/bin/python tools/reference/gen_fp8_act_golden.py

File (little-endian, no padding): int32 T, int32 K; T*K float32 inputs (row-major); T*K uint8
codes; T*ceil(K/128) float32 scales (row-major). Finite inputs only (the non-finite rule is the
C++ definition's, checked by the ops conformance suite). Deterministic (fixed seed).
"""

import os
import struct

import ml_dtypes
import numpy as np

SEED = 20261206
GROUP = 128
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures",
                   "quant", "fp8_act_groups.bin")


def quantize(x):
    t, k = x.shape
    groups = -(-k // GROUP)
    codes = np.zeros((t, k), dtype=np.uint8)
    scales = np.zeros((t, groups), dtype=np.float32)
    for r in range(t):
        for g in range(groups):
            seg = x[r, g * GROUP:(g + 1) * GROUP]
            amax = np.max(np.abs(seg))
            s = np.float32(np.maximum(amax, np.float32(1e-10))) / np.float32(448.0)
            assert s.dtype == np.float32
            q = np.clip(seg / s, np.float32(-448.0), np.float32(448.0))
            assert q.dtype == np.float32
            codes[r, g * GROUP:(g + 1) * GROUP] = q.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
            scales[r, g] = s
    return codes, scales


def main():
    rng = np.random.default_rng(SEED)
    t, k = 6, 300  # groups of 128, 128 and 44 columns
    x = rng.standard_normal((t, k)).astype(np.float32)
    x[1] *= np.float32(1e3)
    x[2] *= np.float32(1e-3)
    x[3, :GROUP] = 0.0                                   # an all-zero group
    x[3, GROUP:2 * GROUP] *= np.float32(1e-12)           # amax below the 1e-10 floor
    x[4] = rng.uniform(-448, 448, k).astype(np.float32)  # amax near 448: scale near 1
    x[5, ::7] = -x[5, ::7] * np.float32(3e4)             # a few large entries per group
    codes, scales = quantize(x)
    with open(OUT, "wb") as f:
        f.write(struct.pack("<ii", t, k))
        f.write(x.astype("<f4").tobytes())
        f.write(codes.tobytes())
        f.write(scales.astype("<f4").tobytes())
    print(f"wrote {OUT}: T={t} K={k}, {codes.size} codes, {scales.size} scales")


if __name__ == "__main__":
    main()
