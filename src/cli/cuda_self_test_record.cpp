#include "cli/cuda_self_test_record.h"

#ifdef LUCID_HAVE_CUDA
#include <ctime>

namespace lucid::cli {

StatusOr<SelfTestRecord> CudaRecord(const cuda::CudaSelfTest& r, const std::string& build) {
  if (!r.skipped_reason.empty()) return FailedPrecondition(r.skipped_reason);
  SelfTestRecord rec;
  rec.build = build;
  rec.device = r.device;
  rec.sm = r.sm;
  rec.ran_at = static_cast<int64_t>(std::time(nullptr));
  for (const cuda::CudaOpResult& o : r.ops)
    rec.kernels.push_back({o.set, o.op, o.format, o.cases, o.worst, o.passed, o.failures});
  rec.not_implemented = r.not_implemented;
  return rec;
}

StatusOr<SelfTestRecord> RunCudaSelfTestRecord() {
  LUCID_ASSIGN_OR_RETURN(std::string build, BinaryIdentity());
  return CudaRecord(cuda::RunCudaSelfTest(), build);
}

}  // namespace lucid::cli
#endif
