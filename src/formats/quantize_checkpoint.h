// `lucid quantize`: an unquantized (f32/bf16/f16) checkpoint -> a complete quantized checkpoint in
// the public formats, readable by lucid, transformers-style tooling and the Python reference.
//
// Output directory: model-0000i-of-0000N.safetensors shards (tensors in sorted name order, split
// at max_shard_bytes), model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map"}),
// config.json = the input's plus `quantization_config`, hf_quant_config.json for NVFP4, and every
// other file of the input directory copied (tokenizer, generation config, ...).
// Which tensors are quantized: every 2-D `*.weight` except embeddings, lm_head, the MoE routers
// (`*.mlp.gate`), norms (1-D), `*.indexer.weights_proj`, and for NVFP4 also `*.indexer.wk` (the
// indexer's small projections stay in the input precision), and except modules matching an
// --exclude pattern (same matching as quant_config.h; a pattern naming no tensor is an error).
// NVFP4 (ModelOpt): weight u8 + weight_scale e4m3 + weight_scale_2 f32 scalar; modules that share
// an input (gate/up of one MLP or expert; q_a/kv_a; q_b/indexer.wq_b) share weight_scale_2 (the
// max), as ModelOpt's exporter does for fused serving kernels. No input_scale is written: lucid
// does not calibrate activations (docs/QUANTIZATION.md). FP8: weight e4m3 + weight_scale_inv f32,
// 128x128 blocks, ue8m0 scales unless fp8_float_scales.
// Deterministic: the same input and options give byte-identical files.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "formats/quant_config.h"

namespace lucid {

struct QuantizeOptions {
  QuantScheme scheme = QuantScheme::kNvfp4;
  std::vector<std::string> exclude;  // extra module patterns kept in the input precision
  bool fp8_float_scales = false;     // FP8: plain f32 scales instead of powers of two (ue8m0)
  uint64_t max_shard_bytes = uint64_t{4} << 30;
  // Called after each tensor is written: (tensors done, tensors total, name).
  std::function<void(size_t, size_t, const std::string&)> progress;
};

// Errors: NotFound (input), FailedPrecondition (input already quantized, output exists and is not
// an empty directory), InvalidArgument (bad pattern, scheme kNone), I/O errors from the writer.
Status QuantizeCheckpoint(const std::string& in_dir, const std::string& out_dir,
                          const QuantizeOptions& options);

// The scheme QuantizeCheckpoint gives tensor `name` (kNone: copied as is). `pattern` receives the
// exclusion that applied, if any.
QuantScheme QuantizeTarget(const std::string& name, const Shape& shape, QuantScheme scheme,
                           const std::vector<std::string>& exclude, std::string* pattern = nullptr);

}  // namespace lucid
