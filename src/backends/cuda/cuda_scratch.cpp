#include "backends/cuda/cuda_scratch.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

namespace lucid::cuda {

ScratchMemory CudaScratchMemory(void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  ScratchMemory m;
  m.alloc = [](size_t bytes, std::string* why) -> void* {
    const cudaError_t pending = cudaPeekAtLastError();  // an earlier launch's error, if any
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaSuccess) return p;
    (void)cudaGetLastError();  // an allocation failure is not sticky: clear it for later calls
    *why = cudaGetErrorString(e);
    if (pending != cudaSuccess)
      *why += std::string(" (after an earlier error: ") + cudaGetErrorString(pending) + ")";
    return nullptr;
  };
  m.free = [](void* p) { (void)cudaFree(p); };
  m.wait = [s] { (void)cudaStreamSynchronize(s); };
  m.copy = [s](void* dst, const void* host, size_t bytes, std::string* why) {
    const cudaError_t e = cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) return true;
    *why = cudaGetErrorString(e);
    return false;
  };
  return m;
}

ScratchPool::~ScratchPool() {
  bool waited = false;
  for (Slot& s : slots_) {
    if (s.p == nullptr) continue;
    if (!waited) memory_.wait();
    waited = true;
    memory_.free(s.p);
  }
}

void* ScratchPool::Get(Buffer buffer, size_t bytes) {
  Slot& s = slots_[static_cast<size_t>(buffer)];
  s.keyed = false;
  bytes = std::max<size_t>(bytes, 1);
  if (s.p != nullptr && bytes <= s.bytes) return s.p;
  if (s.p != nullptr) {
    memory_.wait();
    memory_.free(s.p);
    s.p = nullptr;
    s.bytes = 0;
  }
  std::string why;
  s.p = memory_.alloc(bytes, &why);
  if (s.p != nullptr) {
    s.bytes = bytes;
    return s.p;
  }
  if (error_.ok())
    error_ = ResourceExhausted(std::string("cuda: no device memory for ") + Name(buffer) + " (" +
                               std::to_string(bytes) + " bytes): " + why);
  return nullptr;
}

void* ScratchPool::Holding(Buffer buffer, std::span<const uint8_t> key) const {
  const Slot& s = slots_[static_cast<size_t>(buffer)];
  const bool same = s.keyed && s.key.size() == key.size() &&
                    (key.empty() || std::memcmp(s.key.data(), key.data(), key.size()) == 0);
  return same ? s.p : nullptr;
}

void* ScratchPool::Upload(Buffer buffer, const void* host, size_t bytes,
                          std::span<const uint8_t> key) {
  if (key.empty()) key = {static_cast<const uint8_t*>(host), bytes};
  if (void* held = Holding(buffer, key)) return held;
  void* d = Get(buffer, bytes);  // forgets the old content
  if (d == nullptr) return nullptr;
  std::string why;
  if (bytes > 0 && !memory_.copy(d, host, bytes, &why)) {
    if (error_.ok())
      error_ = Internal(std::string("cuda: copying ") + Name(buffer) + " to the device (" +
                        std::to_string(bytes) + " bytes): " + why);
    return nullptr;
  }
  Slot& s = slots_[static_cast<size_t>(buffer)];
  s.key.assign(key.begin(), key.end());
  s.keyed = true;
  return d;
}

Status ScratchPool::TakeError() {
  Status e = std::move(error_);
  error_ = OkStatus();
  return e;
}

int64_t ScratchPool::held_bytes() const {
  int64_t n = 0;
  for (const Slot& s : slots_) n += static_cast<int64_t>(s.bytes);
  return n;
}

const char* ScratchPool::Name(Buffer buffer) {
  switch (buffer) {
    case Buffer::kWeight:
      return "a dequantized weight";
    case Buffer::kActivations:
      return "rounded activations";
    case Buffer::kMetadata:
      return "an op's uploaded metadata";
    case Buffer::kAttention:
      return "attention partials";
    case Buffer::kRouting:
      return "MoE routing scores";
    case Buffer::kMoeActivations:
      return "MoE expert activations";
    case Buffer::kMoeMetadata:
      return "MoE combine metadata";
    case Buffer::kFp8Scales:
      return "FP8 weight scales";
    case Buffer::kTopK:
      return "top-k sort words";
    case Buffer::kRope:
      return "RoPE cos and sin";
    case Buffer::kKvRows:
      return "KV pool rows";
    case Buffer::kLengths:
      return "top-k row lengths";
    case Buffer::kCount:
      break;
  }
  return "scratch";
}

int64_t DequantChunkRows(int64_t rows, int64_t cols, size_t element_bytes) {
  const int64_t per_row = std::max<int64_t>(1, cols) * static_cast<int64_t>(element_bytes);
  int64_t fit = static_cast<int64_t>(kDequantChunkBytes) / per_row;
  if (fit >= 128) fit = fit / 128 * 128;  // chunks start on 128-row boundaries
  return std::clamp<int64_t>(fit, 1, std::max<int64_t>(rows, 1));
}

}  // namespace lucid::cuda
