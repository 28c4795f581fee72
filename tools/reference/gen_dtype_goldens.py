#!/usr/bin/env python3
"""Writes the golden fixtures for src/core/dtype_test.cpp into tests/fixtures/dtypes/.

The oracle is ml_dtypes (bf16, fp8 e4m3fn / e5m2, fp4 e2m1fn, ue8m0 = float8_e8m0fnu) and numpy
(float16, which ml_dtypes does not provide). Pinned versions: tools/reference/requirements-dtypes.txt.

    python3 -m venv /work/dtvenv
    /work/dtvenv/bin/pip install -r tools/reference/requirements-dtypes.txt
    /work/dtvenv/bin/python tools/reference/gen_dtype_goldens.py

Files (all little-endian, no padding):
  decode_<t>.bin    for t in f8_e4m3, f8_e5m2, ue8m0 (256 codes), f4_e2m1 (16 codes): one uint32
                    per code, in code order: the float32 bit pattern of the decode.
  decode_f16.bin    32768 uint32: the same for the non-negative codes 0..0x7FFF only; the script
                    asserts that code c | 0x8000 decodes to decode(c) | 0x80000000 for every c.
  decode_bf16.bin   32768 uint16: the UPPER 16 bits of the float32 decode of bf16 codes 0..0x7FFF
                    (same sign assertion; the script also asserts the lower 16 bits are zero).
  encode_<t>.bin    uint32 N; N uint32 float32 input bit patterns; N outputs of the type's width
                    (uint16 for f16/bf16, uint8 otherwise; fp4 codes in the low nibble); and for
                    f8_e4m3 / f8_e5m2 another N uint8: the saturating encode (clip to +-max, then
                    cast; NaN stays NaN).
The script is deterministic (fixed seed); rerunning it with the pinned versions reproduces the files.
"""

import os
import sys

import ml_dtypes
import numpy as np

SEED = 20240607
N_RANDOM_BITS = 1536  # uniformly random float32 bit patterns per type
N_RANDOM_RANGE = 1536  # random float32 values spread log-uniformly over the type's range
N_RANDOM_PAIRS_16 = 400  # randomly chosen adjacent pairs (midpoint probes) for f16/bf16

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures",
                       "dtypes")

# name -> (numpy dtype, code bits, has saturating variant)
TYPES = {
    "f16": (np.dtype(np.float16), 16, False),
    "bf16": (np.dtype(ml_dtypes.bfloat16), 16, False),
    "f8_e4m3": (np.dtype(ml_dtypes.float8_e4m3fn), 8, True),
    "f8_e5m2": (np.dtype(ml_dtypes.float8_e5m2), 8, True),
    "f4_e2m1": (np.dtype(ml_dtypes.float4_e2m1fn), 4, False),
    "ue8m0": (np.dtype(ml_dtypes.float8_e8m0fnu), 8, False),
}

SPECIAL_BITS = [
    0x00000000, 0x80000000,  # +-0
    0x7F800000, 0xFF800000,  # +-Inf
    0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FA00000,  # NaNs
    0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00400000, 0x00200000,  # f32 subnormals
    0x00800000, 0x80800000,  # f32 min normal
    0x7F7FFFFF, 0xFF7FFFFF,  # f32 max
    0x3F800000, 0xBF800000,  # +-1
]


def codes(name):
    _, bits, _ = TYPES[name]
    return np.arange(1 << bits, dtype=np.uint16 if bits == 16 else np.uint8)


def decode(name, c):
    """float32 decode of the codes `c` (array of uint8/uint16)."""
    dt = TYPES[name][0]
    with np.errstate(invalid="ignore"):
        return c.view(dt).astype(np.float32)


def encode(name, x):
    """Encoded codes of float32 array `x` (as uint8/uint16)."""
    dt, bits, _ = TYPES[name]
    with np.errstate(invalid="ignore", over="ignore"):
        y = x.astype(dt)
    out = y.view(np.uint16 if bits == 16 else np.uint8)
    if bits == 4:
        out = out & 0xF
    return out


def f32_bits(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def f32(v):
    r = np.float32(v)
    assert float(r) == float(v), f"{v!r} is not exactly representable in float32"
    return r


def positive_grid(name):
    """Sorted distinct positive finite values of the type (as float64)."""
    with np.errstate(invalid="ignore"):  # widening signaling NaNs
        v = decode(name, codes(name)).astype(np.float64)
    v = v[np.isfinite(v) & (v > 0)]
    return np.unique(v)


def neighbours(x):
    """x and the adjacent float32 values on either side."""
    x = np.float32(x)
    return [np.nextafter(x, np.float32(-np.inf)), x, np.nextafter(x, np.float32(np.inf))]


def encode_inputs(name, rng):
    grid = positive_grid(name)
    bits = TYPES[name][1]
    # Adjacent pairs (lo, hi) whose midpoint gets probed. The lower edge pairs 0 with the smallest
    # value; the upper edge pairs max with the value the next code would have had (max + one ulp).
    lo = np.concatenate([[0.0], grid[:-1]])
    hi = grid.copy()
    top_step = grid[-1] - grid[-2]
    lo = np.append(lo, grid[-1])
    hi = np.append(hi, grid[-1] + top_step)
    idx = np.arange(len(lo))
    if bits == 16:
        # Too many pairs to take all: both ends of the subnormal range, the normal range's both
        # ends, the binade boundary at 1.0, and a random sample of the rest.
        n_sub = int(np.sum(grid < float(ml_dtypes.finfo(TYPES[name][0]).smallest_normal)))
        one = int(np.searchsorted(grid, 1.0))
        keep = set(range(0, 64)) | set(range(n_sub - 64, n_sub + 64))
        keep |= set(range(one - 64, one + 64))
        keep |= set(range(len(lo) - 64, len(lo)))
        keep |= set(rng.choice(len(lo), size=N_RANDOM_PAIRS_16, replace=False).tolist())
        idx = np.array(sorted(keep))
    vals = []
    for i in idx:
        mid = f32((lo[i] + hi[i]) / 2)
        vals += neighbours(mid)
        if lo[i] > 0 and bits != 16:
            vals += neighbours(f32(lo[i]))
    top = f32(grid[-1])
    with np.errstate(over="ignore"):
        vals += [top * np.float32(2), top * np.float32(1.25), f32(grid[0] / 4), f32(grid[0] / 2)]
    vals = np.array(vals, dtype=np.float32)
    vals = np.concatenate([vals, -vals])

    random_bits = rng.integers(0, 1 << 32, size=N_RANDOM_BITS, dtype=np.uint64).astype(np.uint32)
    log_lo = np.log2(grid[0]) - 3
    log_hi = np.log2(grid[-1]) + 2
    mags = np.exp2(rng.uniform(log_lo, log_hi, size=N_RANDOM_RANGE))
    signs = rng.choice([-1.0, 1.0], size=N_RANDOM_RANGE)
    with np.errstate(over="ignore"):
        ranged = (signs * mags).astype(np.float32)
    all_bits = np.concatenate([
        np.array(SPECIAL_BITS, dtype=np.uint32),
        f32_bits(vals),
        random_bits,
        f32_bits(ranged),
    ])
    return np.unique(all_bits)  # sorted, deduplicated bit patterns


def write_decode(name):
    c = codes(name)
    d = f32_bits(decode(name, c))
    if TYPES[name][1] == 16:
        # Only the non-negative half is stored: the negative codes decode to the same bits with the
        # float32 sign bit set (checked here, for NaNs too).
        half = 1 << 15
        assert np.all(d[half:] == (d[:half] | np.uint32(0x80000000))), f"{name}: sign asymmetry"
        d = d[:half]
    if name == "bf16":
        assert np.all((d & 0xFFFF) == 0), "bf16 decode has nonzero low bits"
        payload = (d >> 16).astype("<u2").tobytes()
    else:
        payload = d.astype("<u4").tobytes()
    path = os.path.join(OUT_DIR, f"decode_{name}.bin")
    with open(path, "wb") as f:
        f.write(payload)
    return path


def write_encode(name, rng):
    dt, bits, has_sat = TYPES[name]
    inputs = encode_inputs(name, rng)
    x = inputs.view(np.float32)
    out_dtype = "<u2" if bits == 16 else "u1"
    parts = [np.array([len(inputs)], dtype="<u4").tobytes(), inputs.astype("<u4").tobytes(),
             encode(name, x).astype(out_dtype).tobytes()]
    if has_sat:
        mx = np.float32(float(ml_dtypes.finfo(dt).max))
        parts.append(encode(name, np.clip(x, -mx, mx)).astype("u1").tobytes())
    path = os.path.join(OUT_DIR, f"encode_{name}.bin")
    with open(path, "wb") as f:
        f.write(b"".join(parts))
    return path, len(inputs)


README = """# dtype golden fixtures

Generated by `tools/reference/gen_dtype_goldens.py` (do not edit by hand) with
ml_dtypes {mld} and numpy {np} (pinned in `tools/reference/requirements-dtypes.txt`).
Read by `src/core/dtype_test.cpp`. The oracle is ml_dtypes for bf16, f8_e4m3 (float8_e4m3fn),
f8_e5m2 (float8_e5m2), f4_e2m1 (float4_e2m1fn) and ue8m0 (float8_e8m0fnu); numpy for f16.

All files are little-endian, without padding:

- `decode_<t>.bin` for `f8_e4m3`, `f8_e5m2`, `ue8m0` (256 codes) and `f4_e2m1` (16 codes): one
  uint32 per code, in code order: the float32 bit pattern of its decode.
- `decode_f16.bin`: 32768 uint32, the same for the non-negative codes 0..0x7FFF only. The generator
  asserts that code `c | 0x8000` decodes to `decode(c) | 0x80000000` for every c (NaNs included), so
  the test checks all 65536 codes.
- `decode_bf16.bin`: 32768 uint16, the upper 16 bits of the float32 decode of bf16 codes 0..0x7FFF
  (same sign assertion; the generator also asserts that the lower 16 bits are zero).
- `encode_<t>.bin`: uint32 N; N uint32 float32 input bit patterns; N encoded codes (uint16 for
  f16/bf16, uint8 otherwise; fp4 codes in the low nibble); for `f8_e4m3` and `f8_e5m2` another N
  uint8 with the saturating encode (np.clip to +-max, then cast).

Encode inputs, per type, with both signs:
- every float32 at and one ulp either side of each midpoint between adjacent representable values,
  the smallest value paired with 0 and the largest with the value one more code would have had (so
  the overflow threshold is probed); for f16/bf16 only the pairs at both ends of the subnormal
  range, at both ends of the normal range, around 1.0, and {pairs} random pairs;
- for the 8- and 4-bit types also every representable value and its float32 neighbours;
- 2 x max, 1.25 x max, min/2, min/4, and float32 specials (zeros, Inf, NaNs with payloads,
  subnormals, max);
- {rb} random float32 bit patterns and {rr} random values spread log-uniformly over the type's
  range. Seed {seed}.

| file | inputs |
|---|---|
{rows}
"""


def main():
    if ml_dtypes.__version__ != "0.6.0" or np.__version__ != "2.4.6":
        print(f"warning: expected ml_dtypes 0.6.0 / numpy 2.4.6, have {ml_dtypes.__version__} / "
              f"{np.__version__}", file=sys.stderr)
    os.makedirs(OUT_DIR, exist_ok=True)
    rng = np.random.default_rng(SEED)
    rows = []
    for name in TYPES:
        write_decode(name)
        _, n = write_encode(name, rng)
        rows.append(f"| encode_{name}.bin | {n} |")
    with open(os.path.join(OUT_DIR, "README.md"), "w") as f:
        f.write(README.format(mld=ml_dtypes.__version__, np=np.__version__, pairs=N_RANDOM_PAIRS_16,
                              rb=N_RANDOM_BITS, rr=N_RANDOM_RANGE, seed=SEED,
                              rows="\n".join(rows)))
    total = sum(os.path.getsize(os.path.join(OUT_DIR, f)) for f in os.listdir(OUT_DIR))
    print(f"wrote {OUT_DIR} ({total} bytes)")


if __name__ == "__main__":
    main()
