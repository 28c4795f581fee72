#include "models/tensor_parallel.h"

#include <cstring>
#include <string>
#include <vector>

namespace lucid {

void TpCollectives::AllReduceSum(Tensor& t) {
  if (!active() || !status_.ok()) return;
  LUCID_CHECK(t.dtype() == DType::kF32 && t.is_contiguous(), "AllReduceSum: f32 contiguous only");
  Keep(comm_->AllReduceSum(t.data<float>(), t.numel()));
}

void TpCollectives::GatherColumns(const Tensor& local, Tensor& full) {
  const int64_t n = local.size(0), w = local.size(1), ranks = size();
  LUCID_CHECK(full.size(0) == n && full.size(1) == w * ranks, "GatherColumns: shape mismatch");
  if (!active()) {
    if (n > 0) std::memcpy(full.raw(), local.raw(), local.nbytes());
    return;
  }
  if (!status_.ok() || n == 0) return;
  std::vector<float> all(static_cast<size_t>(n * w * ranks));
  Keep(comm_->AllGather(local.raw(), all.data(), static_cast<int64_t>(local.nbytes())));
  if (!status_.ok()) return;
  float* out = full.data<float>();
  for (int64_t r = 0; r < ranks; ++r)
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(out + i * w * ranks + r * w, all.data() + (r * n + i) * w, w * sizeof(float));
}

void TpCollectives::CheckReplicated(const Tensor& t, const char* what) {
  if (!active() || !status_.ok()) return;
  const int64_t bytes = static_cast<int64_t>(t.nbytes());
  std::vector<char> all(static_cast<size_t>(bytes * size()));
  Keep(comm_->AllGather(t.raw(), all.data(), bytes));
  if (!status_.ok()) return;
  for (int r = 1; r < size(); ++r)
    if (std::memcmp(all.data(), all.data() + r * bytes, bytes) != 0) {
      Keep(Internal(std::string("tensor parallelism: ") + what +
                    " differs between rank 0 and rank " + std::to_string(r)));
      return;
    }
}

}  // namespace lucid
