// What one CUDA device does, measured: the figures `lucid bench --device cuda` normalizes by
// (bench/device_benchmark.h's DeviceProbes), taken in the same run as the model's steps.
//   read_gbs     a kernel that reads a buffer of 2 GiB (or a quarter of the free memory, if less)
//                with 16-byte loads, far beyond any L2; median of 7 passes, cudaEvent-timed.
//   bf16_tflops  cublasGemmEx 8192^3, bf16 inputs and output, f32 accumulation (the tensor cores);
//                median of 9 calls.
//   f32_tflops   cublasSgemm 4096^3 with the default math mode (no TF32): what cuda-reference's
//                matmuls call; median of 5.
// Never run on a GPU yet (no device was lent to the session that wrote it).
// Thread-safety: uses device `index` from the calling thread; one probe at a time.
#pragma once

#include "core/status.h"

namespace lucid::cuda {

struct CudaProbe {
  double read_gbs = 0, bf16_tflops = 0, f32_tflops = 0;
};

// Internal naming the CUDA or cuBLAS call that failed (no device, out of memory, ...).
StatusOr<CudaProbe> ProbeCudaDevice(int index);

}  // namespace lucid::cuda
