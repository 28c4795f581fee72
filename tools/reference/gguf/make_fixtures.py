#!/usr/bin/env python3
"""Writes tests/fixtures/gguf/types.gguf with the `gguf` package (pinned in requirements.txt).

The file holds, for every ggml type lucid decodes, a tensor `<TYPE>` of that type and a tensor
`<TYPE>.expected` (F32, same shape) that is gguf.quants.dequantize() of its bytes: the oracle the
C++ decoders must equal bit for bit. Q8_0 / Q4_0 / Q4_1 / BF16 / F16 come from gguf's own
quantizers on random data; the K-quants (which gguf cannot quantize) are random bytes with finite
random f16 block scales, which covers every code and scale bit. It also holds one metadata key of
every value type and nested arrays, which the reader test checks against the values below.

Usage: .venv/bin/python tools/reference/gguf/make_fixtures.py [OUT_DIR]
"""
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import GGUFValueType as V

QK_K = 256


def random_f16(rng, n, lo=-8.0, hi=8.0):
    return rng.uniform(lo, hi, n).astype(np.float16)


def k_quant_bytes(rng, qtype, rows, cols):
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = rows * cols // block_elems
    raw = rng.integers(0, 256, (n_blocks, block_bytes), dtype=np.uint8)
    # finite f16 scales (random bytes could be Inf/NaN); tiny ones too (subnormals)
    if qtype in (T.Q4_K, T.Q5_K):
        d = random_f16(rng, 2 * n_blocks, -0.05, 0.05).view(np.uint8).reshape(n_blocks, 4)
        raw[:, 0:4] = d
    elif qtype == T.Q6_K:
        raw[:, 208:210] = random_f16(rng, n_blocks, -0.05, 0.05).view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(rows, cols // block_elems * block_bytes)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "..", "..", "tests", "fixtures", "gguf")
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(25)
    path = os.path.join(out_dir, "types.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.1)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo\nworld")
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**62))
    w.add_float64("test.f64", 1e-300)
    w.add_array("test.arr_str", ["a", "", "ccc"])
    w.add_key_value("test.arr_i32", [1, -2, 3], V.ARRAY, sub_type=V.INT32)
    w.add_key_value("test.arr_f32", [0.5, -1.25], V.ARRAY, sub_type=V.FLOAT32)
    w.add_array("test.arr_nested", [[1, 2], [3]])
    rows = 3
    for qtype, cols in [(T.F32, 64), (T.F16, 64), (T.BF16, 64), (T.Q8_0, 96), (T.Q4_0, 96),
                        (T.Q4_1, 96), (T.Q4_K, 512), (T.Q5_K, 512), (T.Q6_K, 512)]:
        name = qtype.name
        if qtype in (T.Q4_K, T.Q5_K, T.Q6_K):
            data = k_quant_bytes(rng, qtype, rows, cols)
        else:
            x = rng.standard_normal((rows, cols)).astype(np.float32) * 3
            x[0, :7] = 0  # an all-zero start and exact values
            data = gguf.quants.quantize(x, qtype)
        expected = gguf.quants.dequantize(data, qtype).astype(np.float32).reshape(rows, cols)
        w.add_tensor(name, data, raw_dtype=qtype)
        w.add_tensor(name + ".expected", expected)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
