// The paged KV cache: what MLA and the DSA indexer keep per token, per layer.
//
// Layout: one byte buffer per layer for the MLA rows and one per layer for the indexer keys.
// Page p of layer l holds `page_size` consecutive token slots of fixed-size rows:
//   mla[l]     : [num_pages][page_size][mla row]      (ckv then the roped k_pe)
//   indexer[l] : [num_pages][page_size][indexer row]  (absent when indexer_dim == 0)
// Row encodings by KvDtype (ops.h PagedRows/EncodeKvRow define the bytes):
//   f32      : mla (latent_dim + rope_dim) f32;   indexer indexer_dim f32
//   bf16     : mla (latent_dim + rope_dim) bf16;  indexer indexer_dim bf16
//   fp8_e4m3 : mla = FlashMLA layout: latent_dim e4m3, ceil(latent_dim/128) f32 scales (scale =
//              amax/448 of its 128 values), rope_dim bf16 = 656 bytes for 512 + 64;
//              indexer = indexer_dim e4m3 + one f32 scale (amax/448 of the key) = 132 for 128.
// Values are quantized when written (WriteMla/WriteIndexerKey) and dequantized by the ops that
// read them, so the model code never sees the storage dtype.
// A sequence owns an ordered page table; token position u lives in page_table[u / page_size] at
// slot u % page_size. KvStorage holds the bytes only: which pages a sequence gets is the runtime's
// KvBlockManager's decision, and a sequence's length is the engine's (StepInput carries both).
// Its bytes come from an Allocator: the backend's (Backend::allocator(), Model::kv_allocator()),
// so a device backend's KV pool lives in device memory; zeroed once when allocated.
// Thread-safety: none; owned by the engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/status.h"
#include "ops/ops.h"

namespace lucid {

// kFp8E4M3 uses the FlashMLA layout for the MLA part: latent_dim e4m3 values + one f32 scale per
// 128 of them + rope_dim bf16 values (656 bytes for 512 + 64); indexer keys: e4m3 + one f32 scale.
enum class KvDtype { kF32, kBF16, kFp8E4M3 };
const char* KvDtypeName(KvDtype d);
// The dtype named by KvDtypeName ("f32", "bf16", "fp8_e4m3": the values of --kv-cache-dtype
// once resolved; the option table refuses other text, and its rule resolves "auto"), the one
// parser of these names. InvalidArgument listing them otherwise.
StatusOr<KvDtype> KvDtypeFromName(const std::string& s);

// What a model keeps per token per layer; the memory planner sizes the pool from this.
struct KvCacheSpec {
  int64_t num_layers = 0;
  int64_t latent_dim = 0;   // kv_lora_rank
  int64_t rope_dim = 0;     // qk_rope_head_dim
  int64_t indexer_dim = 0;  // index_head_dim, 0 without an indexer
  int64_t mla_row() const { return latent_dim + rope_dim; }
  // Bytes per token per layer of the MLA latent part alone (656 for 512 + 64 in fp8_e4m3).
  int64_t MlaBytesPerTokenPerLayer(KvDtype dtype) const;
  // Bytes per token per layer for `dtype` (MLA part + indexer part); the memory planner's figure.
  int64_t BytesPerTokenPerLayer(KvDtype dtype) const;
  int64_t BytesPerToken(KvDtype dtype) const { return num_layers * BytesPerTokenPerLayer(dtype); }
};

// The engine's record of one sequence's KV: its pages and how many of its tokens have KV stored.
// Only the runtime writes it (KvBlockManager, Scheduler); a model reads a StepInput.
struct SequenceKv {
  std::vector<int32_t> page_table;
  int64_t length = 0;  // tokens whose KV is stored
  // The KV partition its pages come from (KvBlockManager: one per data-parallel attention rank);
  // 0 with one partition. Set by the scheduler while the sequence holds no pages.
  int32_t partition = 0;
};

// The paged KV bytes of every layer; pages are addressed by id through a page table.
class KvStorage {
 public:
  // Aborts when `alloc` has no memory for the pool (tests; the engine uses Make).
  KvStorage(const KvCacheSpec& spec, int64_t num_pages, int64_t page_size, KvDtype dtype,
            Allocator& alloc = HostAllocator());
  // The same, ResourceExhausted naming the pool's size and the allocator's answer when `alloc`
  // has no memory for it (a plan made for more memory than the device has free).
  static StatusOr<KvStorage> Make(const KvCacheSpec& spec, int64_t num_pages, int64_t page_size,
                                  KvDtype dtype, Allocator& alloc);

  Device device() const { return device_; }

  KvDtype dtype() const { return dtype_; }
  const KvCacheSpec& spec() const { return spec_; }
  int64_t page_size() const { return page_size_; }
  int64_t num_pages() const { return num_pages_; }
  uint64_t bytes() const;

  // Stores slot `pos` of the sequence whose pages are `page_table`: its normalized latent
  // ckv[latent_dim] and roped k_pe[rope_dim] (converted to the storage's KV dtype), or its
  // indexer key [indexer_dim]. page_table must cover pos. Host storage only (device() kCpu).
  void WriteMla(int64_t layer, std::span<const int32_t> page_table, int64_t pos, const float* ckv,
                const float* kpe);
  void WriteIndexerKey(int64_t layer, std::span<const int32_t> page_table, int64_t pos,
                       const float* key);
  // The pool row (page * page_size + slot) of slot `pos` of the sequence whose pages are
  // `page_table`, which must cover pos: where Ops::WriteKvRows stores that token's row.
  int64_t PoolRow(std::span<const int32_t> page_table, int64_t pos) const {
    return page_table[pos / page_size_] * page_size_ + pos % page_size_;
  }
  // Layer `layer`'s MLA rows / indexer keys as Ops::WriteKvRows' destination.
  KvRowsOut MlaOut(int64_t layer);
  KvRowsOut IndexerOut(int64_t layer);
  // Views of a sequence's rows (the view borrows page_table).
  PagedRows MlaRows(int64_t layer, std::span<const int32_t> page_table) const;
  PagedRows IndexerRows(int64_t layer, std::span<const int32_t> page_table) const;

 private:
  KvCacheSpec spec_;
  int64_t num_pages_, page_size_;
  KvDtype dtype_;
  Device device_;
  PagedRows mla_fmt_, idx_fmt_;                       // row formats (no storage pointers)
  std::vector<std::shared_ptr<void>> mla_, indexer_;  // per layer; indexer_ null without one

  // `status` null: abort on a failed allocation.
  KvStorage(const KvCacheSpec& spec, int64_t num_pages, int64_t page_size, KvDtype dtype,
            Allocator& alloc, Status* status);
};

}  // namespace lucid
