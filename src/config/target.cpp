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
  if (local)
    s += BuildHasCuda() ? " (this machine; --target local does not detect GPUs: describe one with "
                          "--target cuda:sm_<NN>)"
                        : " (this machine; this build has no CUDA backend, so no GPU is used)";
  return s;
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
