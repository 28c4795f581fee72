#include "backends/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "backends/cuda/cuda_status.h"

#ifndef LUCID_CUDA_ARCHITECTURES
#error "LUCID_CUDA_ARCHITECTURES (CMAKE_CUDA_ARCHITECTURES) must be defined by the build"
#endif

namespace lucid::cuda {

StatusOr<std::vector<CudaDeviceInfo>> ProbeCudaDevices() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error the failed call left
    return FailedPrecondition(std::string("no CUDA device: ") + cudaGetErrorString(e));
  }
  if (count == 0) return FailedPrecondition("no CUDA device: the runtime reports 0 devices");
  // cudaMemGetInfo reads the current device: each is made current in turn, and the caller's is
  // current again on return (kernels of an op set launched from this thread stay on its device).
  int caller_device = 0;
  LUCID_CUDA_RETURN_IF_ERROR(cudaGetDevice(&caller_device));
  struct Restore {
    int device;
    ~Restore() { cudaSetDevice(device); }
  } restore{caller_device};
  std::vector<CudaDeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    LUCID_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&p, i));
    CudaDeviceInfo d;
    d.index = i;
    d.name = p.name;
    d.sm = p.major * 10 + p.minor;
    d.multiprocessors = p.multiProcessorCount;
    d.total_memory = static_cast<int64_t>(p.totalGlobalMem);
    d.l2_bytes = p.l2CacheSize;
    int clock_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, i) == cudaSuccess &&
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, i) == cudaSuccess)
      d.peak_bandwidth_gbs = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;  // DDR: 2 per clock
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    LUCID_CUDA_RETURN_IF_ERROR(cudaSetDevice(i));
    LUCID_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_b, &total_b));
    d.free_memory = static_cast<int64_t>(free_b);
    out.push_back(d);
  }
  return out;
}

int CurrentDeviceSm() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return major * 10 + minor;
}

std::vector<int> CompiledCudaArchitectures() {
  // LUCID_CUDA_ARCHITECTURES is CMake's list joined by commas: "90a,100a,120a".
  std::vector<int> out;
  std::stringstream ss(LUCID_CUDA_ARCHITECTURES);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int v = 0;
    if (std::sscanf(item.c_str(), "%d", &v) == 1) out.push_back(v);
  }
  return out;
}

std::string CompiledCudaArchitecturesText() {
  std::string out;
  std::stringstream ss(LUCID_CUDA_ARCHITECTURES);
  std::string item;
  while (std::getline(ss, item, ',')) out += (out.empty() ? "sm_" : ", sm_") + item;
  return out;
}

bool RunsOn(int sm) {
  const std::vector<int> archs = CompiledCudaArchitectures();
  return std::find(archs.begin(), archs.end(), sm) != archs.end();
}

std::string DescribeDevice(const CudaDeviceInfo& d) {
  char line[256];
  std::snprintf(line, sizeof(line), "cuda:%d %s (sm_%d, %d SMs, %.1f GiB, %.2f TB/s)", d.index,
                d.name.c_str(), d.sm, d.multiprocessors,
                static_cast<double>(d.total_memory) / (1ull << 30), d.peak_bandwidth_gbs / 1e3);
  return line;
}

}  // namespace lucid::cuda
