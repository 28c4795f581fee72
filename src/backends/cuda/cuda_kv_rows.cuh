// Paged KV rows (ops/ops.h PagedRows) as the attention kernels read them: the view with device
// pointers (DeviceRows), a token's row located once (RowAt: its page and slot), and its values
// decoded as PagedRows::ReadRow does (ValueAt: f32; bf16; FP8 codes times their block's f32
// scale, read byte by byte since scales may be unaligned, then the bf16 tail). Host functions
// too: cuda_mla_split_test.cpp reads host rows through them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_weight_view.cuh"
#include "ops/ops.h"

namespace lucid::cuda {

// PagedRows as the kernels read it (ops/ops.h).
struct DeviceRows {
  int kind = 0;  // KvRowKind
  const float* base = nullptr;
  const int32_t* page_table = nullptr;
  int64_t page_size = 1, page_stride = 0, row_floats = 0;
  const uint8_t* bytes = nullptr;
  int64_t page_bytes = 0, row_bytes = 0, fp8_values = 0, fp8_block = 1;
  int64_t fp8_tail = 0;  // kFp8: byte offset of the bf16 tail (after the codes and scales)
  int64_t tokens = 0;    // token slots the page table addresses
};

inline DeviceRows ToDevice(const PagedRows& r) {
  DeviceRows d;
  d.kind = static_cast<int>(r.kind);
  d.base = r.base;
  d.page_table = r.page_table.data();
  d.page_size = r.page_size;
  d.page_stride = r.page_stride;
  d.row_floats = r.row_floats;
  d.bytes = r.bytes;
  d.page_bytes = r.page_bytes;
  d.row_bytes = r.row_bytes;
  d.fp8_values = r.fp8_values;
  d.fp8_block = r.fp8_block > 0 ? r.fp8_block : 1;
  d.fp8_tail = d.fp8_values + 4 * ((d.fp8_values + d.fp8_block - 1) / d.fp8_block);
  d.tokens = static_cast<int64_t>(r.page_table.size()) * r.page_size;
  return d;
}

__host__ __device__ inline uint16_t LoadU16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
__host__ __device__ inline float LoadF32(const uint8_t* p) {
  return FloatFromBits(static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                       (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24));
}

// Whether token u has a slot in the page table. A selected index outside it (device memory an
// op left unset after a failure the step reports) reads token 0 and scores NaN: never an address
// outside the pool.
__host__ __device__ inline bool TokenInRange(const DeviceRows& r, int64_t u) {
  return u >= 0 && u < r.tokens;
}

// Where token u's row starts (its page looked up once): floats for kF32, bytes otherwise; token
// 0's for u outside the page table.
__host__ __device__ inline const uint8_t* RowAt(const DeviceRows& r, int64_t u) {
  if (!TokenInRange(r, u)) u = 0;
  const int64_t page = r.page_table[u / r.page_size], slot = u % r.page_size;
  if (r.kind == static_cast<int>(KvRowKind::kF32))
    return reinterpret_cast<const uint8_t*>(r.base + page * r.page_stride + slot * r.row_floats);
  return r.bytes + page * r.page_bytes + slot * r.row_bytes;
}

// Value i of the row at `rb` (RowAt), decoded as PagedRows::ReadRow.
__host__ __device__ inline float ValueAt(const DeviceRows& r, const uint8_t* rb, int64_t i) {
  if (r.kind == static_cast<int>(KvRowKind::kF32)) return reinterpret_cast<const float*>(rb)[i];
  if (r.kind == static_cast<int>(KvRowKind::kBF16))
    return FloatFromBits(static_cast<uint32_t>(LoadU16(rb + 2 * i)) << 16);
  if (i < r.fp8_values)
    return MulRn(E4m3Value(rb[i]), LoadF32(rb + r.fp8_values + 4 * (i / r.fp8_block)));
  return FloatFromBits(static_cast<uint32_t>(LoadU16(rb + r.fp8_tail + 2 * (i - r.fp8_values)))
                       << 16);
}

// Value i of token u's row.
__host__ __device__ inline float RowValue(const DeviceRows& r, int64_t u, int64_t i) {
  return ValueAt(r, RowAt(r, u), i);
}

}  // namespace lucid::cuda
