#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backends/cuda/cuda_probe.h"
#include "backends/cuda/cuda_status.h"

namespace lucid::cuda {
namespace {

// Sums every 16-byte word of `p` (n4 words) per thread and stores the sum only when it equals a
// value it never has, so the loads cannot be removed and the stores cost nothing.
__global__ void ReadKernel(const uint4* __restrict__ p, size_t n4, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n4;
       i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldg(p + i);
    acc ^= v.x + v.y + v.z + v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

Status Blas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return OkStatus();
  return Internal(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(s)));
}

// Frees what it holds on every path.
struct DeviceBuffers {
  std::vector<void*> ptrs;
  cudaEvent_t start = nullptr, stop = nullptr;
  cublasHandle_t blas = nullptr;
  ~DeviceBuffers() {
    for (void* p : ptrs) cudaFree(p);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (blas) cublasDestroy(blas);
  }
  StatusOr<void*> Alloc(size_t bytes) {
    void* p = nullptr;
    LUCID_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
    ptrs.push_back(p);
    LUCID_CUDA_RETURN_IF_ERROR(cudaMemset(p, 1, bytes));
    return p;
  }
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median seconds of `runs` calls of `f` (after one warm-up), each timed by events.
template <class F>
StatusOr<double> TimeMedian(DeviceBuffers& d, int runs, F&& f) {
  LUCID_RETURN_IF_ERROR(f());
  std::vector<double> s;
  for (int i = 0; i < runs; ++i) {
    LUCID_CUDA_RETURN_IF_ERROR(cudaEventRecord(d.start));
    LUCID_RETURN_IF_ERROR(f());
    LUCID_CUDA_RETURN_IF_ERROR(cudaEventRecord(d.stop));
    LUCID_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(d.stop));
    float ms = 0;
    LUCID_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, d.start, d.stop));
    s.push_back(ms / 1e3);
  }
  return Median(s);
}

}  // namespace

StatusOr<CudaProbe> ProbeCudaDevice(int index) {
  LUCID_CUDA_RETURN_IF_ERROR(cudaSetDevice(index));
  DeviceBuffers d;
  LUCID_CUDA_RETURN_IF_ERROR(cudaEventCreate(&d.start));
  LUCID_CUDA_RETURN_IF_ERROR(cudaEventCreate(&d.stop));
  LUCID_RETURN_IF_ERROR(Blas(cublasCreate(&d.blas), "cublasCreate"));
  CudaProbe r;
  int sms = 0;
  LUCID_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, index));
  size_t free_bytes = 0, total = 0;
  LUCID_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total));
  const size_t bytes = std::min<size_t>(size_t{2} << 30, free_bytes / 4) & ~size_t{15};
  LUCID_ASSIGN_OR_RETURN(void* buf, d.Alloc(bytes));
  LUCID_ASSIGN_OR_RETURN(void* sink, d.Alloc(sizeof(unsigned)));
  LUCID_ASSIGN_OR_RETURN(double read_s, TimeMedian(d, 7, [&]() -> Status {
                           ReadKernel<<<sms * 8, 512>>>(static_cast<const uint4*>(buf), bytes / 16,
                                                        static_cast<unsigned*>(sink));
                           return CudaStatus(cudaGetLastError(), "ReadKernel");
                         }));
  r.read_gbs = double(bytes) / read_s / 1e9;

  constexpr int kB = 8192;
  LUCID_ASSIGN_OR_RETURN(void* a, d.Alloc(size_t{kB} * kB * 2));
  LUCID_ASSIGN_OR_RETURN(void* b, d.Alloc(size_t{kB} * kB * 2));
  LUCID_ASSIGN_OR_RETURN(void* c, d.Alloc(size_t{kB} * kB * 2));
  const float one = 1.0f, zero = 0.0f;
  LUCID_ASSIGN_OR_RETURN(
      double bf16_s, TimeMedian(d, 9, [&]() -> Status {
        return Blas(cublasGemmEx(d.blas, CUBLAS_OP_N, CUBLAS_OP_N, kB, kB, kB, &one, a, CUDA_R_16BF,
                                 kB, b, CUDA_R_16BF, kB, &zero, c, CUDA_R_16BF, kB,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    "cublasGemmEx bf16");
      }));
  r.bf16_tflops = 2.0 * kB * double(kB) * kB / bf16_s / 1e12;

  constexpr int kF = 4096;  // a, b, c above hold 4096^2 floats each (the same bytes)
  LUCID_ASSIGN_OR_RETURN(
      double f32_s, TimeMedian(d, 5, [&]() -> Status {
        return Blas(cublasSgemm(d.blas, CUBLAS_OP_N, CUBLAS_OP_N, kF, kF, kF, &one,
                                static_cast<const float*>(a), kF, static_cast<const float*>(b), kF,
                                &zero, static_cast<float*>(c), kF),
                    "cublasSgemm");
      }));
  r.f32_tflops = 2.0 * kF * double(kF) * kF / f32_s / 1e12;
  return r;
}

}  // namespace lucid::cuda
