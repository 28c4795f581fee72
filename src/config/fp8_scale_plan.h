// The FP8 block scale format each chosen kernel reads, decided once per target and kernel before
// any weight loads, and the conversion the load does (docs/DESIGN.md, "FP8 block scales").
//
// A checkpoint stores its 128x128 block scales as f32 (DeepSeek-V3's weight_scale_inv; with
// `scale_fmt: ue8m0` every value is a power of two, which the loader checks) or as ue8m0 bytes.
// Readers: the CPU kernels, cuda-reference and cuda-bf16act dequantize either as stored, and
// cuda-fp8act reads either as stored too (it lays the view's scales out as f32 for cuBLASLt per
// call, ue8m0 exactly); cuBLASLt's BLK128x128_32F mode (sm_90), CUTLASS blockwise, Triton and
// DeepGEMM on sm_90 read f32; DeepGEMM on sm_100+ reads ue8m0
// (KernelDecl::requires_ue8m0_on_sm100). Conversions:
// - ue8m0 -> f32: exact (2^(e-127); 255 is NaN).
// - f32 -> ue8m0: exact when every scale is a power of two (scale_fmt ue8m0); otherwise it would
//   round scales up and re-round the block's weights (lossy): refused. The catalog already
//   refuses the ue8m0 readers for such a checkpoint, so the plan never chooses that path.
//   backends/cuda/cuda_fp8_scales.h does the conversions on the host (Fp8ScalesForKernel, which
//   also refuses the lossy case with its counts) for the upload of kernels that read one format.
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "config/kernel_catalog.h"

namespace lucid::config {

enum class ScaleRead { kAsStored, kF32, kUe8m0 };
const char* ScaleReadName(ScaleRead r);  // "as stored", "f32", "ue8m0"

// What `d` reads on compute capability `sm` (see the file comment).
ScaleRead KernelScaleRead(const KernelDecl& d, int sm);

struct Fp8ScaleDecision {
  std::string kernel;  // "matmul cutlass"
  ScaleRead read = ScaleRead::kAsStored;
  std::string checkpoint;  // "f32 (weight_scale_inv)", "f32, scale_fmt ue8m0", "ue8m0 bytes"
  std::string conversion;  // "none: read as stored (exact)", "ue8m0 -> f32 at load (exact) ..."
  bool exact = true;
  bool refused = false;  // a lossy f32 -> ue8m0 conversion
  // For kAsStored: how the kernel reads them ("dequantized as stored"; cuda-fp8act: "laid out as
  // f32 for cuBLASLt per call").
  std::string as_stored_how = "dequantized as stored";
  std::string Line() const;  // "matmul cutlass reads f32 scales; checkpoint ...: <conversion>"
};

// `declared_ue8m0`: scale_fmt ue8m0; `stored_ue8m0`: the scale tensors are ue8m0 bytes.
Fp8ScaleDecision DecideFp8Scales(const KernelDecl& d, int sm, bool declared_ue8m0,
                                 bool stored_ue8m0);

}  // namespace lucid::config
