#include "models/kv_cache.h"

#include <algorithm>
#include <vector>

namespace lucid {

const char* KvDtypeName(KvDtype d) {
  switch (d) {
    case KvDtype::kF32:
      return "f32";
    case KvDtype::kBF16:
      return "bf16";
    case KvDtype::kFp8E4M3:
      return "fp8_e4m3";
  }
  return "?";
}

namespace {

// Row format of `values` values for `dtype`; fp8 rows keep `fp8` leading e4m3 values in blocks of
// `block` and the rest in bf16.
PagedRows RowFormat(KvDtype dtype, int64_t values, int64_t fp8, int64_t block) {
  PagedRows f;
  f.row_floats = values;
  switch (dtype) {
    case KvDtype::kF32:
      f.kind = KvRowKind::kF32;
      break;
    case KvDtype::kBF16:
      f.kind = KvRowKind::kBF16;
      break;
    case KvDtype::kFp8E4M3:
      f.kind = KvRowKind::kFp8;
      f.fp8_values = fp8;
      f.fp8_block = block;
      break;
  }
  f.row_bytes = KvRowBytes(f);
  return f;
}

PagedRows MlaFormat(const KvCacheSpec& s, KvDtype d) {
  return RowFormat(d, s.mla_row(), s.latent_dim, 128);
}
PagedRows IndexerFormat(const KvCacheSpec& s, KvDtype d) {
  return RowFormat(d, s.indexer_dim, s.indexer_dim, std::max<int64_t>(s.indexer_dim, 1));
}

}  // namespace

StatusOr<KvDtype> KvDtypeFromName(const std::string& s) {
  if (s == "f32") return KvDtype::kF32;
  if (s == "bf16") return KvDtype::kBF16;
  if (s == "fp8_e4m3") return KvDtype::kFp8E4M3;
  return InvalidArgument("unknown KV cache dtype \"" + s + "\" (f32, bf16, fp8_e4m3)");
}

int64_t KvCacheSpec::MlaBytesPerTokenPerLayer(KvDtype dtype) const {
  return MlaFormat(*this, dtype).row_bytes;
}

int64_t KvCacheSpec::BytesPerTokenPerLayer(KvDtype dtype) const {
  switch (dtype) {
    case KvDtype::kF32:
      return 4 * (latent_dim + rope_dim + indexer_dim);
    case KvDtype::kBF16:
      return 2 * (latent_dim + rope_dim + indexer_dim);
    case KvDtype::kFp8E4M3: {
      // FlashMLA layout: e4m3 latent, one f32 scale per 128 latent values, bf16 rope part.
      const int64_t mla = latent_dim + 4 * ((latent_dim + 127) / 128) + 2 * rope_dim;
      const int64_t idx = indexer_dim > 0 ? indexer_dim + 4 : 0;
      return mla + idx;
    }
  }
  return 0;
}

KvStorage::KvStorage(const KvCacheSpec& spec, int64_t num_pages, int64_t page_size, KvDtype dtype,
                     Allocator& alloc)
    : KvStorage(spec, num_pages, page_size, dtype, alloc, nullptr) {}

StatusOr<KvStorage> KvStorage::Make(const KvCacheSpec& spec, int64_t num_pages, int64_t page_size,
                                    KvDtype dtype, Allocator& alloc) {
  Status s;
  KvStorage kv(spec, num_pages, page_size, dtype, alloc, &s);
  if (!s.ok()) return s;
  return kv;
}

KvStorage::KvStorage(const KvCacheSpec& spec, int64_t num_pages, int64_t page_size, KvDtype dtype,
                     Allocator& alloc, Status* status)
    : spec_(spec),
      num_pages_(num_pages),
      page_size_(page_size),
      dtype_(dtype),
      device_(alloc.device()) {
  LUCID_CHECK(num_pages > 0 && page_size > 0, "KvStorage needs pages");
  mla_fmt_ = MlaFormat(spec, dtype);
  idx_fmt_ = IndexerFormat(spec, dtype);
  LUCID_CHECK(mla_fmt_.row_bytes + (spec.indexer_dim > 0 ? idx_fmt_.row_bytes : 0) ==
                  spec.BytesPerTokenPerLayer(dtype),
              "KvStorage row sizes disagree with KvCacheSpec::BytesPerTokenPerLayer");
  mla_.resize(spec.num_layers);
  indexer_.resize(spec.num_layers);
  auto make = [&](const PagedRows& fmt, std::shared_ptr<void>* out) {
    const size_t bytes = static_cast<size_t>(num_pages * page_size * fmt.row_bytes);
    StatusOr<std::shared_ptr<void>> mem = alloc.Allocate(bytes);
    if (!mem.ok()) {
      LUCID_CHECK(status != nullptr, "KV pool: " + mem.status().ToString());
      *status = ResourceExhausted(
          "the KV pool (" + std::to_string(num_pages) + " pages of " + std::to_string(page_size) +
          " tokens, " + std::to_string(this->bytes()) + " bytes on " + DeviceName(device_) +
          ") does not fit: " + mem.status().message());
      return false;
    }
    alloc.Zero(mem->get(), bytes);
    *out = std::move(*mem);
    return true;
  };
  for (int64_t l = 0; l < spec.num_layers; ++l) {
    if (!make(mla_fmt_, &mla_[l])) return;
    if (spec.indexer_dim > 0 && !make(idx_fmt_, &indexer_[l])) return;
  }
}

uint64_t KvStorage::bytes() const {
  return static_cast<uint64_t>(num_pages_) * page_size_ * spec_.BytesPerToken(dtype_);
}

void KvStorage::WriteMla(int64_t layer, std::span<const int32_t> page_table, int64_t pos,
                         const float* ckv, const float* kpe) {
  LUCID_CHECK(device_ == Device::kCpu, "KvStorage::WriteMla: host write into device KV");
  const int64_t page = page_table[pos / page_size_];
  std::vector<float> row(spec_.mla_row());
  std::copy_n(ckv, spec_.latent_dim, row.data());
  std::copy_n(kpe, spec_.rope_dim, row.data() + spec_.latent_dim);
  EncodeKvRow(mla_fmt_, row.data(),
              static_cast<uint8_t*>(mla_[layer].get()) +
                  (page * page_size_ + pos % page_size_) * mla_fmt_.row_bytes);
}

void KvStorage::WriteIndexerKey(int64_t layer, std::span<const int32_t> page_table, int64_t pos,
                                const float* key) {
  LUCID_CHECK(device_ == Device::kCpu, "KvStorage::WriteIndexerKey: host write into device KV");
  const int64_t page = page_table[pos / page_size_];
  EncodeKvRow(idx_fmt_, key,
              static_cast<uint8_t*>(indexer_[layer].get()) +
                  (page * page_size_ + pos % page_size_) * idx_fmt_.row_bytes);
}

namespace {

PagedRows View(const PagedRows& fmt, const std::shared_ptr<void>& buf,
               std::span<const int32_t> page_table, int64_t page_size) {
  PagedRows r = fmt;
  r.page_table = page_table;
  r.page_size = page_size;
  r.page_bytes = page_size * fmt.row_bytes;
  if (fmt.kind == KvRowKind::kF32) {
    r.base = static_cast<const float*>(buf.get());
    r.page_stride = page_size * fmt.row_floats;
  } else {
    r.bytes = static_cast<const uint8_t*>(buf.get());
  }
  return r;
}

}  // namespace

KvRowsOut KvStorage::MlaOut(int64_t layer) {
  return {mla_fmt_, static_cast<uint8_t*>(mla_[layer].get()), num_pages_ * page_size_};
}

KvRowsOut KvStorage::IndexerOut(int64_t layer) {
  LUCID_CHECK(indexer_[layer] != nullptr, "KvStorage::IndexerOut: the cache has no indexer keys");
  return {idx_fmt_, static_cast<uint8_t*>(indexer_[layer].get()), num_pages_ * page_size_};
}

PagedRows KvStorage::MlaRows(int64_t layer, std::span<const int32_t> page_table) const {
  return View(mla_fmt_, mla_[layer], page_table, page_size_);
}

PagedRows KvStorage::IndexerRows(int64_t layer, std::span<const int32_t> page_table) const {
  return View(idx_fmt_, indexer_[layer], page_table, page_size_);
}

}  // namespace lucid
