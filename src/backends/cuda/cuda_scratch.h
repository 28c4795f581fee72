// ScratchPool: CudaOps' per-op temporaries (a weight dequantized for a GEMM, rounded activations,
// uploaded metadata, attention partials, sort words), one device buffer per use, each grown to
// the largest request seen and kept.
//
// Contract:
// - Get(buffer, bytes) returns memory for at least `bytes` bytes, valid until the next Get of
//   the same buffer. Growing one waits for the stream first (kernels already issued may still
//   read the old memory), frees it, then allocates the new size.
// - A failed allocation is not fatal: Get returns nullptr, the buffer is left empty, and the
//   failure is kept (the first one only) until TakeError. The op that asked launches nothing;
//   CudaOps::Synchronize reports the failure as ResourceExhausted naming the buffer and the
//   bytes, so the step fails, its requests get that error, and the server keeps serving (a later
//   step asks again and may fit).
// - Upload(buffer, host, bytes) puts a copy of host bytes (an op's metadata) in a buffer, and
//   issues nothing when the buffer already holds those bytes: a step's layers repeat their KV
//   pool rows, top-k lengths and positions, which are then copied once per step. Content derived
//   from host data (Rope's cos and sin of the positions) is keyed by that data instead: Holding
//   says whether the buffer holds what a key made. Any failure forgets what the buffer held.
// - held_bytes is what the pool holds now (the buffers' sizes).
// The device calls are a ScratchMemory so the growth, upload and failure rules run in host tests.
// Thread-safety: none (one per CudaOps, the engine thread).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace lucid::cuda {

// The device calls a ScratchPool makes. alloc returns nullptr with a reason in *why on failure.
struct ScratchMemory {
  std::function<void*(size_t bytes, std::string* why)> alloc;
  std::function<void(void* p)> free;
  std::function<void()> wait;  // until every op issued so far has finished
  // Host to device, ordered after the ops issued so far; `host` may be reused once it returns.
  // False with a reason in *why on failure.
  std::function<bool(void* dst, const void* host, size_t bytes, std::string* why)> copy;
};

// cudaMalloc, cudaFree and a wait on `stream` (a cudaStream_t; void* keeps this header free of
// the CUDA runtime).
ScratchMemory CudaScratchMemory(void* stream);

class ScratchPool {
 public:
  enum class Buffer {
    kWeight,          // a weight dequantized for a GEMM (at most kDequantChunkBytes per chunk)
    kActivations,     // activations rounded or quantized for a GEMM
    kMetadata,        // host metadata uploaded for one op (token ids, rows, lengths)
    kAttention,       // attention partials (cuda_attention.h, cuda_mla_split.cuh)
    kRouting,         // MoeRoute's group scores
    kMoeActivations,  // MoeExperts' per-expert rows
    kMoeMetadata,     // MoeExperts' combine rows and weights
    kFp8Scales,       // cuda-fp8act: a weight's scales in cuBLASLt's layout
    kTopK,            // top-k sort words past shared memory
    kRope,            // Rope's cos and sin of a step's positions
    kKvRows,          // WriteKvRows' pool rows
    kLengths,         // TopKRows' row lengths
    kCount,
  };

  explicit ScratchPool(ScratchMemory memory) : memory_(std::move(memory)) {}
  ~ScratchPool();
  ScratchPool(const ScratchPool&) = delete;
  ScratchPool& operator=(const ScratchPool&) = delete;

  // At least `bytes` bytes (at least one, so a zero-byte request is a valid pointer), or nullptr
  // after a failed growth (kept for TakeError). What the buffer held is forgotten.
  void* Get(Buffer buffer, size_t bytes);
  // The buffer holding a copy of `bytes` bytes at `host`, remembered under `key` (the bytes
  // themselves when empty); nothing is copied when the buffer holds what that key made. nullptr
  // on failure (kept for TakeError).
  void* Upload(Buffer buffer, const void* host, size_t bytes, std::span<const uint8_t> key = {});
  // The buffer when it holds what `key` made (Upload's), else nullptr.
  void* Holding(Buffer buffer, std::span<const uint8_t> key) const;
  // The first failure since the last call (OK if none), cleared.
  Status TakeError();
  // Whether a failure waits for TakeError.
  bool failed() const { return !error_.ok(); }
  int64_t held_bytes() const;

  static const char* Name(Buffer buffer);

 private:
  struct Slot {
    void* p = nullptr;
    size_t bytes = 0;
    bool keyed = false;  // key is what the memory holds
    std::vector<uint8_t> key;
  };
  ScratchMemory memory_;
  std::array<Slot, static_cast<size_t>(Buffer::kCount)> slots_{};
  Status error_;
};

// The most bytes of one weight CudaOps dequantizes at once: a larger weight's GEMM runs in row
// chunks of at most this many bytes (a vocabulary-sized f32 copy would be gigabytes).
inline constexpr size_t kDequantChunkBytes = size_t{64} << 20;

// Rows per chunk for a weight of `cols` columns dequantized to `element_bytes`-byte values:
// as many as fit in kDequantChunkBytes (a multiple of 128 where that is at least 128), at least
// one, at most `rows`.
int64_t DequantChunkRows(int64_t rows, int64_t cols, size_t element_bytes);

}  // namespace lucid::cuda
