// The CUDA conformance run (backends/cuda/cuda_conformance_report.h) as a self-test record
// (cli/kernel_gate.h), and the runner the gate uses on a CUDA build. CUDA builds only.
// Thread-safety: the runner creates a backend on device 0; call it from one thread.
#pragma once

#ifdef LUCID_HAVE_CUDA
#include "backends/cuda/cuda_conformance_report.h"
#include "cli/kernel_gate.h"

namespace lucid::cli {

// The record of `r` for `build` (ran_at: now). FailedPrecondition with the run's reason when it
// was skipped (no device).
StatusOr<SelfTestRecord> CudaRecord(const cuda::CudaSelfTest& r, const std::string& build);

// Runs cuda::RunCudaSelfTest() on device 0 and returns its record for this binary.
StatusOr<SelfTestRecord> RunCudaSelfTestRecord();

}  // namespace lucid::cli
#endif
