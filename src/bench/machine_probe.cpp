#include "bench/machine_probe.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_fast_ops.h"
#include "core/parallel.h"

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace lucid {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

__attribute__((target("avx512f"))) float ReadSum512(const float* p, int64_t n) {
  __m512 a = _mm512_setzero_ps(), b = a, c = a, d = a;
  for (int64_t i = 0; i + 64 <= n; i += 64) {
    a = _mm512_add_ps(a, _mm512_load_ps(p + i));
    b = _mm512_add_ps(b, _mm512_load_ps(p + i + 16));
    c = _mm512_add_ps(c, _mm512_load_ps(p + i + 32));
    d = _mm512_add_ps(d, _mm512_load_ps(p + i + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a, b), _mm512_add_ps(c, d)));
}

__attribute__((target("avx2"))) float ReadSum256(const float* p, int64_t n) {
  __m256 a = _mm256_setzero_ps(), b = a, c = a, d = a;
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    a = _mm256_add_ps(a, _mm256_load_ps(p + i));
    b = _mm256_add_ps(b, _mm256_load_ps(p + i + 8));
    c = _mm256_add_ps(c, _mm256_load_ps(p + i + 16));
    d = _mm256_add_ps(d, _mm256_load_ps(p + i + 24));
  }
  float o[8];
  _mm256_storeu_ps(o, _mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)));
  return o[0] + o[1] + o[2] + o[3] + o[4] + o[5] + o[6] + o[7];
}

float ReadSumScalar(const float* p, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += p[i];
  return s;
}

// 16 independent FMA chains of 16 lanes; returns flops done.
__attribute__((target("avx512f"))) double Fma512(int64_t iters, float* sink) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(acc[i], m, c);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  *sink += _mm512_reduce_add_ps(s);
  return double(iters) * 16 * 16 * 2;
}

// 16 independent vdpbf16ps chains; returns FLOPs done (2 per bf16 product).
__attribute__((target("avx512f,avx512bf16"))) double DotBf16(int64_t iters, float* sink) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.999f), _mm512_set1_ps(0.999f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-7f), _mm512_set1_ps(1e-7f));
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  *sink += _mm512_reduce_add_ps(s);
  return double(iters) * 16 * 32 * 2;
}

__attribute__((target("avx2,fma"))) double Fma256(int64_t iters, float* sink) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], m, c);
  }
  float o[8];
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  _mm256_storeu_ps(o, s);
  *sink += o[0];
  return double(iters) * 12 * 8 * 2;
}

std::string CpuModel() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      return p == std::string::npos ? line : line.substr(p + 2);
    }
  return "unknown cpu";
}

// GFLOP/s of `kernel` (iters iterations on every thread at once; returns FLOPs done, 0 when
// null), once per repeat.
std::vector<double> PeakRepeats(double (*kernel)(int64_t, float*), int64_t iters, int threads,
                                int repeats) {
  std::vector<double> out;
  volatile float sink = 0;
  for (int r = 0; r < repeats; ++r) {
    std::vector<double> flops(threads, 0.0);
    std::vector<float> s(threads, 0.0f);
    const double t0 = Now();
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num();
      float local = 0;
      flops[t] = kernel ? kernel(iters, &local) : 0.0;
      s[t] = local;
    }
    const double dt = Now() - t0;
    double total = 0;
    for (int t = 0; t < threads; ++t) {
      total += flops[t];
      sink = sink + s[t];
    }
    out.push_back(total / dt / 1e9);
  }
  return out;
}

}  // namespace

std::string MachineInfo::Line() const {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "machine: %s | %d threads | isa %s | read bandwidth %.1f GB/s (best %.1f) | "
                "fp32 FMA peak %.0f GFLOP/s (best %.0f)",
                cpu.c_str(), threads, isa.c_str(), read_gbs, read_gbs_best, fma_gflops,
                fma_gflops_best);
  std::string line = buf;
  if (dot_bf16_gflops > 0) {
    std::snprintf(buf, sizeof(buf), " | bf16 dot peak %.0f GFLOP/s", dot_bf16_gflops);
    line += buf;
  }
  return line;
}

BandwidthProbe::BandwidthProbe(uint64_t bytes)
    : n_(static_cast<int64_t>(bytes / sizeof(float)) / 1024 * 1024) {
  buf_ = static_cast<float*>(std::aligned_alloc(64, n_ * sizeof(float)));
  LUCID_CHECK(buf_ != nullptr, "BandwidthProbe: cannot allocate the probe buffer");
  float* p = buf_;
  // First touch by the threads that will read (pages land where they are read).
  ParallelFor(n_, 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] = 1e-6f * float(i & 1023);
  });
}

BandwidthProbe::~BandwidthProbe() { std::free(buf_); }

double BandwidthProbe::Measure(int passes) {
  const CpuIsa isa = DetectCpuIsa();
  auto read = [&](const float* q, int64_t len) {
    if (isa >= CpuIsa::kAvx512) return ReadSum512(q, len);
    if (isa >= CpuIsa::kAvx2) return ReadSum256(q, len);
    return ReadSumScalar(q, len);
  };
  last_.clear();
  volatile float sink = 0;
  for (int r = 0; r < passes + 1; ++r) {
    std::vector<float> part(NumThreads(), 0.0f);
    const double t0 = Now();
    ParallelFor(n_ / 1024, 1, [&](int64_t b, int64_t e) {
      part[omp_get_thread_num()] += read(buf_ + b * 1024, (e - b) * 1024);
    });
    const double dt = Now() - t0;
    for (float v : part) sink = sink + v;
    if (r > 0) last_.push_back(double(n_) * sizeof(float) / dt / 1e9);  // first pass warms up
  }
  return Median(last_);
}

MachineInfo ProbeMachine(uint64_t bytes, int repeats) {
  MachineInfo m;
  m.cpu = CpuModel();
  const CpuIsa isa = DetectCpuIsa();
  m.isa = CpuIsaName(isa);
  m.threads = NumThreads();
  {
    BandwidthProbe probe(bytes);
    m.read_gbs = probe.Measure(repeats);
    m.read_gbs_best = *std::max_element(probe.last_passes().begin(), probe.last_passes().end());
  }
  using Kernel = double (*)(int64_t, float*);
  const Kernel fma = isa >= CpuIsa::kAvx512 ? Fma512 : isa >= CpuIsa::kAvx2 ? Fma256 : nullptr;
  const std::vector<double> fl = PeakRepeats(fma, 20'000'000, m.threads, repeats);
  m.fma_gflops = Median(fl);
  m.fma_gflops_best = *std::max_element(fl.begin(), fl.end());
  if (isa == CpuIsa::kAvx512Bf16)
    m.dot_bf16_gflops = Median(PeakRepeats(DotBf16, 10'000'000, m.threads, repeats));
  return m;
}

}  // namespace lucid
