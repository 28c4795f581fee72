#!/usr/bin/env python3
"""Writes tests/fixtures/gguf/smollm2_rows.gguf: a few rows of SmolLM2-135M-Instruct.Q4_1.gguf's
tensors dequantized by the `gguf` package (gguf.quants.dequantize), as F32 tensors named
"<tensor>#<row>", so the C++ decoders can be checked on the real file bit for bit.

Usage: .venv/bin/python tools/reference/gguf/smollm2_rows.py .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import os
import sys

import numpy as np
import gguf

ROWS = {"token_embd.weight": [0, 1, 28, 49151], "blk.0.attn_q.weight": [0, 575],
        "blk.29.ffn_down.weight": [3], "output_norm.weight": [0]}


def main():
    r = gguf.GGUFReader(sys.argv[1])
    out = os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests", "fixtures", "gguf",
                       "smollm2_rows.gguf")
    w = gguf.GGUFWriter(out, "rows")
    for t in r.tensors:
        if t.name not in ROWS:
            continue
        data = np.asarray(t.data)
        if data.ndim == 1:
            data = data.reshape(1, -1)
        for row in ROWS[t.name]:
            vals = gguf.quants.dequantize(data[row:row + 1], t.tensor_type).astype(np.float32)
            w.add_tensor(f"{t.name}#{row}", vals.reshape(-1))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    main()
