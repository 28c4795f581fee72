#include "models/kv_cache.h"

#include <algorithm>

namespace lucid {

const char* KvDtypeName(KvDtype d) {
  switch (d) {
    case KvDtype::kF32: return "f32";
    case KvDtype::kBF16: return "bf16";
    case KvDtype::kFp8E4M3: return "fp8_e4m3";
  }
  return "?";
}

int64_t KvCacheSpec::BytesPerTokenPerLayer(KvDtype dtype) const {
  switch (dtype) {
    case KvDtype::kF32: return 4 * (latent_dim + rope_dim + indexer_dim);
    case KvDtype::kBF16: return 2 * (latent_dim + rope_dim + indexer_dim);
    case KvDtype::kFp8E4M3: {
      // FlashMLA layout: e4m3 latent, one f32 scale per 128 latent values, bf16 rope part.
      const int64_t mla = latent_dim + 4 * ((latent_dim + 127) / 128) + 2 * rope_dim;
      const int64_t idx = indexer_dim > 0 ? indexer_dim + 4 : 0;
      return mla + idx;
    }
  }
  return 0;
}

KvPool::KvPool(const KvCacheSpec& spec, int64_t num_pages, int64_t page_size, KvDtype dtype)
    : spec_(spec), num_pages_(num_pages), page_size_(page_size), dtype_(dtype) {
  LUCID_CHECK(dtype == KvDtype::kF32, "KvPool stores only f32 so far");
  LUCID_CHECK(num_pages > 0 && page_size > 0, "KvPool needs pages");
  mla_.resize(spec.num_layers);
  indexer_.resize(spec.num_layers);
  for (int64_t l = 0; l < spec.num_layers; ++l) {
    mla_[l].assign(num_pages * page_size * spec.mla_row(), 0.0f);
    if (spec.indexer_dim > 0) indexer_[l].assign(num_pages * page_size * spec.indexer_dim, 0.0f);
  }
  free_.reserve(num_pages);
  for (int64_t p = num_pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
}

uint64_t KvPool::bytes() const {
  return static_cast<uint64_t>(num_pages_) * page_size_ * spec_.BytesPerToken(dtype_);
}

Status KvPool::Reserve(SequenceKv& seq, int64_t new_length) {
  const int64_t need = (new_length + page_size_ - 1) / page_size_;
  const int64_t extra = need - static_cast<int64_t>(seq.page_table.size());
  if (extra <= 0) return OkStatus();
  if (extra > free_pages())
    return ResourceExhausted("KV cache: need " + std::to_string(extra) + " more pages of " +
                             std::to_string(page_size_) + " tokens, " +
                             std::to_string(free_pages()) + " free");
  for (int64_t i = 0; i < extra; ++i) {
    seq.page_table.push_back(free_.back());
    free_.pop_back();
  }
  return OkStatus();
}

void KvPool::Release(SequenceKv& seq) {
  for (auto it = seq.page_table.rbegin(); it != seq.page_table.rend(); ++it) free_.push_back(*it);
  seq.page_table.clear();
  seq.length = 0;
}

void KvPool::WriteMla(int64_t layer, const SequenceKv& seq, int64_t pos, const float* ckv,
                      const float* kpe) {
  const int64_t page = seq.page_table[pos / page_size_];
  float* row = mla_[layer].data() + (page * page_size_ + pos % page_size_) * spec_.mla_row();
  std::copy_n(ckv, spec_.latent_dim, row);
  std::copy_n(kpe, spec_.rope_dim, row + spec_.latent_dim);
}

void KvPool::WriteIndexerKey(int64_t layer, const SequenceKv& seq, int64_t pos, const float* key) {
  const int64_t page = seq.page_table[pos / page_size_];
  std::copy_n(key, spec_.indexer_dim,
              indexer_[layer].data() + (page * page_size_ + pos % page_size_) * spec_.indexer_dim);
}

PagedRows KvPool::MlaRows(int64_t layer, const SequenceKv& seq) const {
  return PagedRows{mla_[layer].data(), seq.page_table, page_size_, page_size_ * spec_.mla_row(),
                   spec_.mla_row()};
}

PagedRows KvPool::IndexerRows(int64_t layer, const SequenceKv& seq) const {
  return PagedRows{indexer_[layer].data(), seq.page_table, page_size_,
                   page_size_ * spec_.indexer_dim, spec_.indexer_dim};
}

}  // namespace lucid
