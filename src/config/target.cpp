#include "config/target.h"

#include <fstream>
#include <sstream>

#include "config/option_table.h"

namespace lucid::config {

std::string Target::Describe() const {
  std::string s;
  if (has_gpu)
    s = std::to_string(gpu_count) + " x cuda:" + SmName(sm) + " (" +
        FormatBytes(static_cast<double>(gpu_memory)) + " each), ";
  s += FormatBytes(static_cast<double>(cpu_memory)) + " system memory";
  if (!local) return s;
  if (!local_gpus.empty()) {
    s += " (this machine:";
    for (const LocalGpu& g : local_gpus)
      s += std::string(&g == &local_gpus.front() ? " " : ", ") + "cuda:" + std::to_string(g.index) +
           " " + g.name + ", " + FormatBytes(static_cast<double>(g.free_memory)) + " free of " +
           FormatBytes(static_cast<double>(g.total_memory));
    return s + ")";
  }
  if (!no_gpu_reason.empty()) return s + " (this machine; no GPU is used: " + no_gpu_reason + ")";
  return s + (BuildHasCuda()
                  ? " (this machine; GPUs not probed by this command)"
                  : " (this machine; this build has no CUDA backend, so no GPU is used)");
}

void AddLocalGpus(const LocalGpus* gpus, Target* t) {
  if (!t->local || gpus == nullptr) return;
  if (gpus->devices.empty()) {
    t->no_gpu_reason = gpus->none_reason;
    return;
  }
  t->has_gpu = true;
  t->sm = gpus->devices.front().sm;
  for (const LocalGpu& g : gpus->devices)
    if (g.sm == t->sm) t->local_gpus.push_back(g);
}

StatusOr<Target> ParseTargetSpec(const std::string& spec) {
  Target t;
  t.spec = spec;
  if (spec == "local" || spec == "cpu") {
    t.local = spec == "local";
    return t;
  }
  const std::string prefix = "cuda:sm_";
  if (spec.rfind(prefix, 0) == 0) {
    const std::string num = spec.substr(prefix.size());
    int sm = 0;
    bool digits = !num.empty() && num.size() <= 3;
    for (char c : num) digits = digits && c >= '0' && c <= '9';
    if (digits) sm = std::stoi(num);
    if (digits && sm >= 70 && sm <= 130) {
      t.has_gpu = true;
      t.sm = sm;
      return t;
    }
  }
  return InvalidArgument("--target: unknown target \"" + spec +
                         "\" (valid: local, cpu, cuda:sm_<NN> such as cuda:sm_90, cuda:sm_100, "
                         "cuda:sm_120)");
}

int64_t LocalSystemMemory() {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("MemTotal:", 0) == 0) {
      std::istringstream in(line.substr(9));
      int64_t kib = 0;
      in >> kib;
      return kib * 1024;
    }
  }
  return 0;
}

}  // namespace lucid::config
