// CpuOps' glue ops: residual adds, scaling, strided column copies and row gathers (the host work
// a forward used to do between ops). Plain loops, parallel over rows.
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_ops.h"
#include "core/parallel.h"

namespace lucid {

void CpuOps::Accumulate(Tensor& x, const Tensor& y) const {
  CheckDevices(*this, "Accumulate", {&x, &y});
  LUCID_CHECK(x.numel() == y.numel(), "Accumulate: shape mismatch");
  float* a = x.data<float>();
  const float* b = y.data<const float>();
  ParallelFor(x.numel(), 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) a[i] += b[i];
  });
}

void CpuOps::Scale(Tensor& x, float s) const {
  CheckDevices(*this, "Scale", {&x});
  float* a = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) a[i] *= s;
}

void CpuOps::CopyColumns(const Tensor& x, int64_t groups, int64_t group_stride, int64_t offset,
                         int64_t width, Tensor& out) const {
  CheckDevices(*this, "CopyColumns", {&x, &out});
  const int64_t T = x.size(0), row = x.numel() / std::max<int64_t>(T, 1);
  LUCID_CHECK(offset >= 0 && width >= 0 && offset + width <= group_stride &&
                  groups * group_stride <= row && out.numel() == T * groups * width,
              "CopyColumns: columns outside the rows, or a wrong output size");
  ParallelFor(T, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      for (int64_t g = 0; g < groups; ++g)
        std::memcpy(out.data<float>() + (t * groups + g) * width,
                    x.data<const float>() + t * row + g * group_stride + offset,
                    width * sizeof(float));
  });
}

void CpuOps::GatherRows(const Tensor& x, std::span<const int64_t> rows, Tensor& out) const {
  CheckDevices(*this, "GatherRows", {&x, &out});
  const int64_t D = x.size(1), n = static_cast<int64_t>(rows.size());
  LUCID_CHECK(out.size(0) == n && out.size(1) == D, "GatherRows: output must be [rows, width]");
  for (int64_t i = 0; i < n; ++i) {
    LUCID_CHECK(rows[i] >= 0 && rows[i] < x.size(0), "GatherRows: row out of range");
    std::memcpy(out.data<float>() + i * D, x.data<const float>() + rows[i] * D, D * sizeof(float));
  }
}

}  // namespace lucid
