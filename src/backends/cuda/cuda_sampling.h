// Ops::SampleRows on the device: one block per logits row runs ops/sampling.h's three steps
// where the logits are, and writes the token, its raw logprob and the top-K raw alternatives.
// The selections are thresholds found by bitwise search over the float bits of the (positive)
// probabilities, each probe one pass over the row, with ties ranked by id through a block scan:
// top_k keeps the k larger-first candidates (ties to the lower id), top_p the shortest
// larger-first prefix whose mass reaches top_p of the kept mass, and the draw walks the kept mass
// in id order. No sort of the row. About 80 passes over V per sampled row: a reference kernel,
// exact in its selections, not a tuned one. The block's phases are in cuda_sampling.cuh, host
// functions too (cuda_sampling_test.cpp runs them on the CPU against the reference).
// ApplyTokenBitmask's kernel (a grammar's allowed tokens) is beside it.
// All pointers are device memory; asynchronous on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/sampling.h"

namespace lucid::cuda {

// R rows of logits [R, V]; rows[R] and edits on the device; scratch [R, V]; tokens [R];
// logprobs [R, 1 + K]; top_ids [R, K].
void LaunchSampleRows(const float* logits, int64_t R, int64_t V, const RowSampling* rows,
                      const LogitEdit* edits, float* scratch, int32_t* tokens, float* logprobs,
                      int32_t* top_ids, int64_t K, cudaStream_t stream);

// Ops::ApplyTokenBitmask: logits [R, V] in place, bitmask [R, ceil(V / 32)] (one thread per entry).
void LaunchApplyTokenBitmask(float* logits, const int32_t* bitmask, int64_t R, int64_t V,
                             cudaStream_t stream);

}  // namespace lucid::cuda
