// The CUDA part of `lucid backends [--self-test]`: what this build carries, what device it found,
// and the ops conformance suite (backends/cpu/ops_conformance.h) run on device 0 through
// HostBridgeOps for every CUDA op set (cuda_ops.h) at its precision, one result per set, op and
// format, measured on this device, not declared.
// Thread-safety: call from one thread (it creates a backend on device 0).
#pragma once

#include <string>
#include <vector>

namespace lucid::cuda {

struct CudaOpResult {
  std::string set;  // the op set's kernel name, "cuda-reference"
  std::string op, format;
  int cases = 0;
  double worst = 0.0;  // worst case's error / its tolerance (exact cases: 0, or failed)
  bool passed = false;
  std::string failures;  // the first failing cases, "T=129 N=33 K=300 nan; ..."
};

struct CudaSelfTest {
  std::string device;          // DescribeDevice of device 0; empty without one
  int sm = 0;                  // its compute capability, major*10+minor
  std::string skipped_reason;  // "no CUDA device: ..." when nothing could run
  std::vector<CudaOpResult> ops;
  std::vector<std::string> not_implemented;  // ops/ops.h methods with no CUDA kernel yet
};

// "cuda: built for sm_90a, sm_100a, sm_120a; cuda:0 NVIDIA H200 (...)" or "...; no CUDA device:
// <why>".
std::string CudaStatusLine();

CudaSelfTest RunCudaSelfTest();

}  // namespace lucid::cuda
