// `lucid align`: a copy of a checkpoint whose weights start on 64-byte lines of the files.
//
// Safetensors files pack tensors without gaps after a header of any length, so a checkpoint from
// a hub usually has every weight off a cache line (the Python library pads the header to 8 bytes
// only). The kernels read weights with 64-byte loads; off a line each load spans two lines, and
// reads are slower (docs/BENCHMARKS.md). lucid memory-maps the files and never copies a weight at
// start-up, so the cure is a one-time rewrite: every *.safetensors file of the input directory is
// written again under the same name by WriteSafetensors (same tensors, dtypes, shapes, bytes and
// metadata; header in the input's data order; data section on a line; tensors whose size is a
// multiple of 64 first), and every other regular file (config, index, tokenizer, ...) is copied.
// The index stays valid: tensor names and shard names do not change.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/status.h"
#include "formats/safetensors.h"

namespace lucid {

// Bytes of `ckpt`'s tensors that could start on a 64-byte line (their size is a multiple of 64)
// but do not. Zero for a checkpoint lucid wrote (synth, quantize, align).
uint64_t MisalignedWeightBytes(const Checkpoint& ckpt);

// What serve, bench and explain say when MisalignedWeightBytes is `bytes` (> 0): the size (MB, or
// GB from 1 GB up), what it costs, and the command that fixes it.
std::string MisalignedWeightsMessage(uint64_t bytes);

struct AlignResult {
  size_t files = 0;                // safetensors files rewritten
  uint64_t misaligned_before = 0;  // MisalignedWeightBytes of the input
};

// Errors: NotFound (input), FailedPrecondition (output exists and is not an empty directory, or
// is the input), the reader's and writer's errors. The input is never modified. On error the
// output directory may hold the files written so far.
// progress(files done, files total, file name) is called after each safetensors file.
StatusOr<AlignResult> AlignCheckpoint(
    const std::string& in_dir, const std::string& out_dir,
    const std::function<void(size_t, size_t, const std::string&)>& progress = {});

}  // namespace lucid
