#!/usr/bin/env python3
"""Block-quantized variants of tests/fixtures/gguf/tiny_deepseek_v3.f32.gguf (from
convert_tiny_deepseek.py), for the loader's ggml-type paths of the DeepSeek family:

  tiny_deepseek_v3.quant.gguf    routed experts ffn_gate_exps / ffn_up_exps Q4_0, ffn_down_exps
                                 Q4_1, attn_v_b Q8_0, attn_k_b F16 (its rows are 16 long, under
                                 one 32-block), everything else as in the f32 file
  tiny_deepseek_v3.dequant.gguf  the same tensors decoded back to F32 by gguf.quants.dequantize
                                 (the oracle: a model of the decoded values)

Quantization by gguf.quants.quantize (the `gguf` package, pinned in requirements.txt); the K-quants
have no Python quantizer there, and the fixture's rows (64 / 32 values) are shorter than their
256-value blocks anyway. Usage: python quantize_tiny_deepseek.py [REPO_ROOT]"""
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T, quants

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[3])
DIR = ROOT / "tests/fixtures/gguf"
PLAN = {"ffn_gate_exps": T.Q4_0, "ffn_up_exps": T.Q4_0, "ffn_down_exps": T.Q4_1,
        "attn_v_b": T.Q8_0, "attn_k_b": T.F16}


def type_for(name: str):
    for k, t in PLAN.items():
        if f".{k}." in name:
            return t
    return None


def write(reader: gguf.GGUFReader, out: Path, dequant: bool) -> None:
    arch = reader.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(str(out), arch)
    for name, f in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, f.contents(), vtype, sub_type=sub)
    for t in reader.tensors:
        data = np.array(t.data, dtype=np.float32)  # numpy shape: dims reversed
        qt = type_for(t.name)
        if qt is None:
            w.add_tensor(t.name, data)
        elif qt == T.F16:
            h = data.astype(np.float16)
            w.add_tensor(t.name, h.astype(np.float32) if dequant else h)
        else:
            q = quants.quantize(data, qt)
            if dequant:
                w.add_tensor(t.name, quants.dequantize(q, qt).astype(np.float32))
            else:
                w.add_tensor(t.name, q, raw_shape=q.shape, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(out, out.stat().st_size, "bytes")


def main() -> None:
    r = gguf.GGUFReader(str(DIR / "tiny_deepseek_v3.f32.gguf"))
    write(r, DIR / "tiny_deepseek_v3.quant.gguf", dequant=False)
    write(r, DIR / "tiny_deepseek_v3.dequant.gguf", dequant=True)


if __name__ == "__main__":
    main()
