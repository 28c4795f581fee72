// The outer-product GEMM for many tokens (see GemmRows in cpu_fast_kernels.h).
#include "backends/cpu/cpu_fast_kernels.h"

namespace lucid::fast {

bool GemmRows(const KernelTable&, const PackedX&, int64_t, int64_t, const Weight&, int64_t,
              int64_t, float*, int64_t) {
  return false;  // no GEMM kernel yet: the dot-product tiles handle every size
}

}  // namespace lucid::fast
