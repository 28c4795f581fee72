#include "backends/cuda/cuda_conformance_report.h"

#include <algorithm>
#include <map>
#include <utility>

#include "backends/cpu/ops_conformance.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_host_bridge.h"
#include "backends/cuda/cuda_ops.h"

namespace lucid::cuda {
std::string CudaStatusLine() {
  std::string s = "cuda: built for " + CompiledCudaArchitecturesText() + "; ";
  StatusOr<std::vector<CudaDeviceInfo>> d = ProbeCudaDevices();
  if (!d.ok()) return s + d.status().message();
  for (size_t i = 0; i < d->size(); ++i) {
    s += (i ? ", " : "") + DescribeDevice((*d)[i]);
    if (!RunsOn((*d)[i].sm)) s += " [no machine code for it in this build]";
  }
  return s;
}

CudaSelfTest RunCudaSelfTest() {
  CudaSelfTest r;
  std::vector<std::string> implemented;
  for (const std::string& op : OpNames()) {
    if (CudaImplements(op))
      implemented.push_back(op);
    else
      r.not_implemented.push_back(op);
  }
  for (const CudaOpsSet& set : CudaOpsSets()) {
    StatusOr<std::unique_ptr<CudaBackend>> b = CudaBackend::Create(0, set.make, set.backend);
    if (!b.ok()) {
      r.skipped_reason = b.status().message();
      r.ops.clear();
      return r;
    }
    r.device = DescribeDevice((*b)->info());
    r.sm = (*b)->info().sm;
    HostBridgeOps bridge(**b);
    const std::vector<ConformanceCase> cases =
        RunOpsConformance(bridge, set.precision, implemented);
    std::vector<std::pair<std::string, std::string>> order;
    std::map<std::pair<std::string, std::string>, CudaOpResult> rows;
    for (const ConformanceCase& c : cases) {
      const auto key = std::make_pair(c.op, c.format);
      if (!rows.count(key)) {
        order.push_back(key);
        rows[key] = CudaOpResult{set.kernel, c.op, c.format, 0, 0.0, true, ""};
      }
      CudaOpResult& o = rows[key];
      ++o.cases;
      if (c.tolerance > 0) o.worst = std::max(o.worst, c.error / c.tolerance);
      if (!c.pass) {
        if (!o.passed || o.failures.empty())
          o.failures += (o.failures.empty() ? "" : "; ") + c.shape + " " + c.input;
        o.passed = false;
      }
    }
    for (const auto& k : order) r.ops.push_back(rows[k]);
  }
  return r;
}

}  // namespace lucid::cuda
