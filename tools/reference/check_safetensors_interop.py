#!/usr/bin/env python3
"""Cross-checks lucid's safetensors reader/writer against the official Python `safetensors`.

  write OUT   writes the interop tensor set (below) with Python safetensors; this is how
              tests/fixtures/safetensors/py_written.safetensors was made (see the README there).
  check IN    reads a file written by lucid (the C++ test SafetensorsInterop.WritesCppFile leaves
              one at <build dir>/formats_test_out/cpp_written.safetensors) with the strict Rust
              deserializer and the numpy API, and compares every tensor with the same set.

The tensor set must stay in sync with kInterop in src/formats/safetensors_test.cpp.
Needs: pip install safetensors==0.8.0 numpy==2.4.6 (newer versions should work too).
"""
import sys

import numpy as np
import safetensors
import safetensors.numpy as stnp

METADATA = {"format": "interop", "writer": "check_safetensors_interop.py"}


def interop_set():
    """name -> (safetensors dtype, TensorSpec dtype, logical shape, storage ndarray)."""
    u8 = lambda *v: np.array(v, dtype=np.uint8)  # noqa: E731
    u16 = lambda *v: np.array(v, dtype=np.uint16)  # noqa: E731
    return {
        "f64": ("F64", "float64", [2, 3], np.arange(6, dtype=np.float64) * 0.25 - 0.5),
        "f32": ("F32", "float32", [3, 2], np.arange(6, dtype=np.float32) * 1.5 - 2.0),
        "f16": ("F16", "float16", [4], np.array([1.0, -2.0, 0.5, 65504.0], dtype=np.float16)),
        "bf16": ("BF16", "bfloat16", [2, 2], u16(0x3F80, 0xC000, 0x4049, 0x0000)),
        "i64": ("I64", "int64", [3], np.array([-1, 1 << 40, 7], dtype=np.int64)),
        "i32": ("I32", "int32", [2, 2], np.array([-5, 0, 5, 2147483647], dtype=np.int32)),
        "i16": ("I16", "int16", [3], np.array([-32768, 1, 32767], dtype=np.int16)),
        "i8": ("I8", "int8", [4], np.array([-128, -1, 0, 127], dtype=np.int8)),
        "u8": ("U8", "uint8", [2, 3], u8(0, 1, 2, 253, 254, 255)),
        "bool": ("BOOL", "bool", [3], np.array([True, False, True])),
        "f8_e4m3": ("F8_E4M3", "float8_e4m3fn", [4], u8(0x38, 0xB8, 0x7E, 0x01)),
        "f8_e5m2": ("F8_E5M2", "float8_e5m2", [2], u8(0x3C, 0x7C)),
        "ue8m0": ("F8_E8M0", "float8_e8m0fnu", [2], u8(127, 130)),
        # Packed fp4, low nibble = even element; logical shape [2, 4] is 4 bytes.
        "f4": ("F4", "float4_e2m1fn_x2", [2, 4], u8(0x21, 0x43, 0x65, 0xF7)),
        "empty": ("F32", "float32", [0, 3], np.zeros((0,), dtype=np.float32)),
    }


def write(path):
    tensors = interop_set()
    specs = {}
    for name, (_, spec_dtype, shape, arr) in tensors.items():
        arr = np.ascontiguousarray(arr)
        # TensorSpec takes the storage shape for float4_e2m1fn_x2 and doubles the last dim.
        spec_shape = shape[:-1] + [shape[-1] // 2] if spec_dtype == "float4_e2m1fn_x2" else shape
        specs[name] = safetensors.TensorSpec(
            dtype=spec_dtype, shape=spec_shape, data_ptr=arr.ctypes.data, data_len=arr.nbytes
        )
        tensors[name] = tensors[name][:3] + (arr,)  # keep the buffer alive
    safetensors.serialize_file(specs, path, metadata=METADATA)
    check(path, expect_metadata=METADATA)  # the Python side must read its own file back


def check(path, expect_metadata=None):
    with open(path, "rb") as f:
        raw = f.read()
    header_len = int.from_bytes(raw[:8], "little")
    assert header_len % 8 == 0, f"header length {header_len} is not a multiple of 8"
    found = {name: info for name, info in safetensors.deserialize(raw)}  # strict Rust validation
    expected = interop_set()
    assert sorted(found) == sorted(expected), f"names differ: {sorted(found)}"
    for name, (st_dtype, _, shape, arr) in expected.items():
        info = found[name]
        assert info["dtype"] == st_dtype, (name, info["dtype"])
        assert list(info["shape"]) == shape, (name, info["shape"])
        assert bytes(info["data"]) == arr.tobytes(), (name, bytes(info["data"]), arr.tobytes())
    with safetensors.safe_open(path, framework="numpy") as f:
        if expect_metadata is not None:
            assert f.metadata() == expect_metadata, f.metadata()
        for name, (st_dtype, _, shape, arr) in expected.items():
            if st_dtype in stnp._TYPES:  # numpy-native dtypes go through the numpy API as well
                got = f.get_tensor(name)
                assert list(got.shape) == shape, (name, got.shape)
                np.testing.assert_array_equal(got.reshape(-1), arr.reshape(-1))
    print(f"OK: {path}: {len(expected)} tensors match "
          f"(safetensors {safetensors.__version__}, numpy {np.__version__})")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        sys.exit(__doc__)
    if sys.argv[1] == "write":
        write(sys.argv[2])
    else:
        check(sys.argv[2], expect_metadata=METADATA)


if __name__ == "__main__":
    main()
