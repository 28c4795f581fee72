#include "runtime/cpu_contention.h"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace lucid {
namespace {

// The whole of a small /proc file (empty when it cannot be read).
std::string ReadProc(const char* path) {
  std::string out;
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

// /proc/stat's "cpuN user nice system idle iowait irq softirq steal ..." lines of the CPUs in
// `mask`: their summed time not idle (idle and iowait are idle), in seconds.
bool MachineBusy(const cpu_set_t& mask, double* busy_s, int* cpus) {
  const std::string text = ReadProc("/proc/stat");
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  if (text.empty() || tick <= 0) return false;
  double busy = 0;
  int n = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const char* line = text.c_str() + pos;
    pos = end + 1;
    if (std::strncmp(line, "cpu", 3) != 0 || line[3] < '0' || line[3] > '9') continue;
    char* p = nullptr;
    const long id = std::strtol(line + 3, &p, 10);
    if (id < 0 || id >= CPU_SETSIZE || !CPU_ISSET(id, &mask)) continue;
    unsigned long long v[8] = {};
    for (auto& x : v) x = std::strtoull(p, &p, 10);
    busy += static_cast<double>(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / tick;
    ++n;
  }
  if (n == 0) return false;
  *busy_s = busy;
  *cpus = n;
  return true;
}

}  // namespace

CpuReading ReadCpu(bool machine) {
  CpuReading r;
  // "time on a CPU (ns) time waiting on a runqueue (ns) time slices"
  const std::string s = ReadProc("/proc/thread-self/schedstat");
  unsigned long long run = 0, wait = 0;
  if (std::sscanf(s.c_str(), "%llu %llu", &run, &wait) == 2) {
    r.valid = true;
    r.own_cpu_s = static_cast<double>(run) * 1e-9;
    r.own_wait_s = static_cast<double>(wait) * 1e-9;
  }
  if (!machine) return r;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  timespec ts{};
  if (sched_getaffinity(0, sizeof mask, &mask) == 0 &&
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0 &&
      MachineBusy(mask, &r.machine_busy_s, &r.cpus)) {
    r.machine_valid = true;
    r.process_cpu_s = static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  }
  return r;
}

ContentionRule::ContentionRule(int threads, int busy_threads, CpuReader reader)
    : threads_(threads), busy_threads_(busy_threads), reader_(std::move(reader)) {
  enabled_ = reader_ != nullptr && busy_threads_ > 0 && busy_threads_ < threads_;
}

void ContentionRule::StartLowerWindow(double now_s, const CpuReading& r) {
  window_start_s_ = now_s;
  window_start_ = r;
}

void ContentionRule::Lower(double now_s, const CpuReading& r) {
  const CpuReading m = r.machine_valid ? r : reader_(true);
  if (!m.machine_valid) return;  // could never come back up: stay as we are
  lowered_ = true;
  ++lowerings_;
  raise_start_s_ = now_s;
  raise_start_ = m;
}

int ContentionRule::AfterStep(double now_s) {
  if (!enabled_) return 0;
  if (now_s - last_read_s_ < kCpuReadSeconds) return lowered_ ? busy_threads_ : 0;
  last_read_s_ = now_s;
  if (!lowered_) {
    const CpuReading r = reader_(false);
    if (!r.valid) return 0;
    if (!window_start_.valid || now_s - window_start_s_ > kStaleWindowSeconds) {
      StartLowerWindow(now_s, r);
      return 0;
    }
    const double cpu = r.own_cpu_s - window_start_.own_cpu_s;
    const double wait = r.own_wait_s - window_start_.own_wait_s;
    if (cpu + wait < kLowerActivitySeconds) return 0;
    if (wait > kLowerWaitFraction * (cpu + wait)) Lower(now_s, r);
    StartLowerWindow(now_s, r);
    return lowered_ ? busy_threads_ : 0;
  }
  if (now_s - raise_start_s_ < kRaiseWindowSeconds) return busy_threads_;
  const CpuReading m = reader_(true);
  if (!m.machine_valid) return busy_threads_;
  const double wall = now_s - raise_start_s_;
  const double others = ((m.machine_busy_s - raise_start_.machine_busy_s) -
                         (m.process_cpu_s - raise_start_.process_cpu_s)) /
                        wall;
  if (others < m.cpus - threads_ + kRaiseOthersCores) {
    lowered_ = false;
    window_start_ = CpuReading{};  // a fresh lowering window from the next reading
    return 0;
  }
  raise_start_s_ = now_s;
  raise_start_ = m;
  return busy_threads_;
}

}  // namespace lucid
