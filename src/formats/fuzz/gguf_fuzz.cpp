// libFuzzer target: GgufFile::Parse on arbitrary bytes. For any input: no crash, no read outside
// the input (ASan), and when the file is accepted every tensor it lists lies inside the input, so
// reading and decoding each one's first and last row (for the types lucid decodes) stays in bounds.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "core/ggml_types.h"
#include "formats/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy of exactly `size` bytes, so ASan sees any read past the end.
  auto* copy = static_cast<uint8_t*>(std::malloc(size ? size : 1));
  std::copy(data, data + size, copy);
  auto f = lucid::GgufFile::Parse("fuzz.gguf", copy, size, nullptr);
  if (f.ok()) {
    const lucid::GgufFile& g = **f;
    for (const auto& key : {"general.architecture", "general.alignment", "tokenizer.ggml.tokens"}) {
      (void)g.GetString(key);
      (void)g.GetUint(key);
      (void)g.GetStringArray(key);
      (void)g.GetIntArray(key);
      (void)g.GetFloatArray(key);
    }
    for (const auto& [name, ti] : g.tensors()) {
      if (ti.offset + ti.bytes > size - g.data_start()) std::abort();  // validation promised this
      auto t = g.Get(name);
      if (!t.ok() || ti.dims[0] > (1 << 16)) continue;
      const int64_t row_bytes = lucid::GgmlRowBytes(ti.type, ti.dims[0]);
      const int64_t rows = static_cast<int64_t>(ti.bytes) / (row_bytes ? row_bytes : 1);
      std::vector<float> out(ti.dims[0]);
      const uint8_t* base = g.TensorData(ti);
      lucid::DequantizeGgmlRowSpan(ti.type, base, 0, ti.dims[0], out.data());
      lucid::DequantizeGgmlRowSpan(ti.type, base + (rows - 1) * row_bytes, 0, ti.dims[0],
                                   out.data());
    }
  }
  std::free(copy);
  return 0;
}
