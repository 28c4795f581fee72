// The declarations. lucid's rows: the `cpu` rows state what backends/cpu implements today
// (float32 compute, f32/bf16/FP8-block/NVFP4/GGUF weights dequantized block by block,
// f32/bf16/fp8_e4m3 KV storage (models/kv_cache.h), any page size, no graph capture); every CPU
// kernel set (`--cpu-kernels fast|fast-bf16act|reference`, config/cpu_kernels.h) implements
// exactly these rows, and their compiled_in comes from the backend registry
// (backends/cpu/ops_registry.h). The `cuda-reference` rows state what backends/cuda/cuda_ops.h
// implements: float32 compute (cuBLAS SGEMM without TF32), f32/bf16/FP8-block/NVFP4 weights (no
// GGUF), f32/bf16/fp8_e4m3 KV rows, any page size, no graph capture, sampling on the device
// (Ops::SampleRows, the host sampler's arithmetic); compiled in exactly in a -DLUCID_CUDA=ON build.
// The `cuda-bf16act` rows are the same kernels computing in bfloat16: the matmuls take bf16 inputs
// (tensor cores where the weight is exact in bf16), the rest stays f32 as in cuda-reference.
// The `cuda-fp8act` rows (matmul and moe, FP8 block weights, sm_90) are cuda-bf16act with the
// FP8 block matmuls' activations quantized per (token, 128 columns) to e4m3 and multiplied by
// cuBLASLt's block-scaled FP8 GEMM; chosen only by name (--fp8-gemm-backend and
// --moe-runner-backend), last in the priority list; the other families of such a plan run
// cuda-bf16act's kernels (one op set, backends/cuda/cuda_ops.h).
// Foreign rows state published capabilities of the kernels SGLang and vLLM use for MLA/DSA models
// (FlashMLA, FlashAttention-3, FlashInfer, TRT-LLM gen, CUTLASS, DeepGEMM, TileLang, Triton,
// Marlin, aiter); docs/CONFIG.md gives the source of each claim. lucid implements none of them.
#include "config/kernel_catalog.h"

#include <algorithm>
#include <map>

#include "backends/cpu/ops_registry.h"

namespace lucid::config {
namespace {

using WF = WeightFormat;
using KD = KvDtype;

constexpr int64_t kMla = 576;     // kv_lora_rank 512 + qk_rope_head_dim 64, fixed in these kernels
constexpr int64_t kIdxDim = 128;  // index_head_dim the DSA indexer kernels are written for
const std::vector<Phase> kBoth = {Phase::kPrefill, Phase::kDecode};
const std::vector<DType> kHalf = {DType::kBF16, DType::kF16};

KernelDecl Cuda(std::string name, KernelFamily f, int lo, int hi, std::string origin,
                std::string project = "SGLang") {
  KernelDecl d;
  d.project = std::move(project);
  d.name = std::move(name);
  d.family = f;
  d.device = Device::kCuda;
  d.min_sm = lo;
  d.max_sm = hi;
  d.compute_dtypes = kHalf;
  d.phases = kBoth;
  d.graph_capture = true;
  d.compiled_in = false;
  d.origin = std::move(origin);
  if (f == KernelFamily::kDenseAttention || f == KernelFamily::kSparseAttention)
    d.head_dims = {kMla};
  if (f == KernelFamily::kIndexer) d.head_dims = {kIdxDim};
  return d;
}

KernelDecl Rocm(std::string name, KernelFamily f, std::string origin) {
  KernelDecl d = Cuda(std::move(name), f, 0, 0, std::move(origin));
  d.device = Device::kRocm;
  return d;
}

KernelDecl Cpu(KernelFamily f) {
  KernelDecl d;
  d.name = "cpu";
  d.family = f;
  d.device = Device::kCpu;
  d.compute_dtypes = {DType::kF32};
  d.phases = kBoth;
  d.graph_capture = false;
  d.compiled_in = Registered(DeviceName(d.device), FamilyName(f), d.name);
  d.origin = "lucid backends/cpu (--cpu-kernels: CpuFastOps, or the CpuOps reference)";
  if (f == KernelFamily::kDenseAttention || f == KernelFamily::kSparseAttention ||
      f == KernelFamily::kIndexer)
    d.kv_dtypes = {KD::kF32, KD::kBF16, KD::kFp8E4M3};  // KvPool storage, decoded by the ops
  if (f == KernelFamily::kMatmul || f == KernelFamily::kMoe)
    d.weight_formats = {WF::kF32, WF::kBF16, WF::kFp8Block, WF::kNvfp4,
                        WF::kGgml};  // DequantizeRowSpan
  return d;
}

// lucid's CUDA kernels: any compute capability the build carries machine code for (plain CUDA
// C++ and cuBLAS; the catalog states the kernels', not the build's, range). From 8.0: the module
// holds the weight-only kernel's bf16 WMMA fragments, which nvcc compiles for sm_80 and later
// only (for sm_75 it stops with "incomplete type"), so no build of it runs below 8.0.
KernelDecl CudaReference(KernelFamily f) {
  KernelDecl d;
  d.name = kCudaReference;
  d.family = f;
  d.device = Device::kCuda;
  d.min_sm = 80;
  d.max_sm = 130;
  d.compute_dtypes = {DType::kF32};
  d.phases = kBoth;
  d.graph_capture = false;
  d.compiled_in = BuildHasCuda();
  d.origin = f == KernelFamily::kSampling
                 ? "lucid backends/cuda (cuda_sampling.cu: SampleRows, the host sampler's "
                   "arithmetic where the logits are, and ApplyTokenBitmask, a grammar's mask "
                   "uploaded as a bitmask; prompt logprobs are SampleRows with the prompt token "
                   "forced; a request collecting prompt logits samples on the host until its "
                   "first token)"
                 : "lucid backends/cuda (cuda-reference: exact f32, the CPU reference's "
                   "formulas; `lucid serve`, `lucid generate` and `lucid bench` run on it with "
                   "--device cuda --dtype float32)";
  if (f == KernelFamily::kDenseAttention || f == KernelFamily::kSparseAttention ||
      f == KernelFamily::kIndexer)
    d.kv_dtypes = {KD::kF32, KD::kBF16, KD::kFp8E4M3};  // every KvRowKind (cuda_attention.h)
  if (f == KernelFamily::kMatmul || f == KernelFamily::kMoe)
    d.weight_formats = {WF::kF32, WF::kBF16, WF::kFp8Block, WF::kNvfp4};  // no GGUF on cuda
  return d;
}

// cuda-reference's kernels with bf16 matmul inputs (backends/cuda/cuda_ops.h, "cuda-bf16act").
KernelDecl CudaBf16Act(KernelFamily f) {
  KernelDecl d = CudaReference(f);
  d.name = kCudaBf16Act;
  d.compute_dtypes = {DType::kBF16};
  if (f != KernelFamily::kSampling)
    d.origin =
        "lucid backends/cuda (cuda-bf16act: cuda-reference's kernels with the matmuls' inputs "
        "rounded to bf16, on the tensor cores: bf16 weights through cuBLAS, packed FP8 and "
        "NVFP4 weights through lucid's weight-only WMMA kernel or dequantized to bf16; "
        "`lucid serve`, `lucid generate` and `lucid bench` run on it with --device cuda "
        "--dtype bfloat16)";
  return d;
}

// cuda-bf16act's FP8 block matmuls with FP8 activations (backends/cuda/cuda_fp8_gemm.h).
KernelDecl CudaFp8Act(KernelFamily f) {
  KernelDecl d = CudaBf16Act(f);
  d.name = kCudaFp8Act;
  d.min_sm = 90;
  d.max_sm = 90;
  d.weight_formats = {WF::kFp8Block};
  d.origin =
      "lucid backends/cuda (cuda-fp8act: activations quantized per token and 128 columns to "
      "e4m3, cuBLASLt's block-scaled FP8 GEMM (1x128 / 128x128 f32 scales, CUDA >= 12.9), the "
      "same values in f32 where cuBLASLt has no algorithm; the rest is cuda-bf16act's)";
  return d;
}

std::vector<KernelDecl> BuildCatalog() {
  std::vector<KernelDecl> c;
  for (KernelFamily f : kAllFamilies) {
    c.push_back(Cpu(f));
    c.push_back(CudaBf16Act(f));
    c.push_back(CudaReference(f));
    if (f == KernelFamily::kMatmul || f == KernelFamily::kMoe) c.push_back(CudaFp8Act(f));
  }
  return c;
}

template <typename T>
KernelDecl With(KernelDecl d, std::vector<T> KernelDecl::*field, std::vector<T> v) {
  d.*field = std::move(v);
  return d;
}

std::vector<KernelDecl> BuildForeign() {
  using F = KernelFamily;
  std::vector<KernelDecl> c;
  auto add = [&](KernelDecl d) { c.push_back(std::move(d)); };
  auto kv = [](KernelDecl d, std::vector<KD> v) {
    return With(std::move(d), &KernelDecl::kv_dtypes, v);
  };
  auto pages = [](KernelDecl d, std::vector<int64_t> v) {
    return With(std::move(d), &KernelDecl::page_sizes, v);
  };
  auto phases = [](KernelDecl d, std::vector<Phase> v) {
    return With(std::move(d), &KernelDecl::phases, v);
  };
  auto wf = [](KernelDecl d, std::vector<WF> v) {
    return With(std::move(d), &KernelDecl::weight_formats, v);
  };

  // Dense MLA attention (--attention-backend).
  add(pages(
      kv(Cuda("flashmla", F::kDenseAttention, 90, 103, "FlashMLA dense decode (SGLang flashmla)"),
         {KD::kBF16, KD::kFp8E4M3}),
      {64}));
  add(pages(
      kv(Cuda("trtllm_mla", F::kDenseAttention, 100, 103, "TRT-LLM gen MLA (SGLang trtllm_mla)"),
         {KD::kBF16, KD::kFp8E4M3}),
      {32, 64}));
  add(pages(
      kv(Cuda("cutlass_mla", F::kDenseAttention, 100, 103, "CUTLASS MLA (SGLang cutlass_mla)"),
         {KD::kBF16, KD::kFp8E4M3}),
      {128}));
  add(kv(Cuda("fa3", F::kDenseAttention, 90, 90, "FlashAttention-3 (Hopper only)"), {KD::kBF16}));
  add(kv(Cuda("flashinfer", F::kDenseAttention, 80, 120, "FlashInfer MLA"), {KD::kBF16}));
  {
    KernelDecl t =
        kv(Cuda("triton", F::kDenseAttention, 80, 120, "SGLang Triton MLA"), {KD::kBF16});
    t.compute_dtypes = {DType::kBF16, DType::kF16, DType::kF32};
    add(t);
  }
  add(kv(Rocm("aiter", F::kDenseAttention, "AMD aiter MLA (ROCm)"), {KD::kBF16, KD::kFp8E4M3}));

  // Sparse MLA attention (--nsa-prefill-backend / --nsa-decode-backend).
  add(pages(phases(kv(Cuda("flashmla_auto", F::kSparseAttention, 90, 103,
                           "SGLang: picks flashmla_sparse or flashmla_kv per batch"),
                      {KD::kBF16, KD::kFp8E4M3}),
                   {Phase::kPrefill}),
            {64}));
  add(pages(phases(kv(Cuda("flashmla_kv", F::kSparseAttention, 90, 103,
                           "FlashMLA sparse decode over the FP8 (656 B) cache"),
                      {KD::kFp8E4M3}),
                   {Phase::kDecode}),
            {64}));
  add(pages(kv(Cuda("flashmla_sparse", F::kSparseAttention, 90, 103,
                    "FlashMLA sparse prefill kernel (bf16 KV; fp8 cache dequantized first)"),
               {KD::kBF16, KD::kFp8E4M3}),
            {64}));
  add(pages(kv(Cuda("trtllm", F::kSparseAttention, 100, 103, "TRT-LLM gen sparse MLA"),
               {KD::kBF16, KD::kFp8E4M3}),
            {32, 64}));
  add(kv(Cuda("fa3", F::kSparseAttention, 90, 90, "FlashAttention-3 with top-k page table"),
         {KD::kBF16}));
  add(pages(kv(Cuda("tilelang", F::kSparseAttention, 90, 120, "TileLang sparse MLA (DeepSeek)"),
               {KD::kBF16}),
            {64}));
  add(kv(Rocm("aiter", F::kSparseAttention, "AMD aiter sparse MLA (ROCm)"),
         {KD::kBF16, KD::kFp8E4M3}));

  // DSA indexer (auto only).
  add(pages(kv(Cuda("deep_gemm", F::kIndexer, 90, 103, "DeepGEMM fp8_mqa_logits / paged"),
               {KD::kFp8E4M3}),
            {64}));
  add(pages(kv(Cuda("tilelang", F::kIndexer, 90, 120, "TileLang indexer (DeepSeek)"),
               {KD::kBF16, KD::kFp8E4M3}),
            {64}));
  add(kv(Rocm("aiter", F::kIndexer, "AMD aiter indexer (ROCm)"), {KD::kBF16, KD::kFp8E4M3}));

  // Linear layers by weight format (--fp8-gemm-backend, --fp4-gemm-backend; bf16 is auto only).
  {
    KernelDecl d =
        wf(Cuda("cublas", F::kMatmul, 70, 120, "cuBLAS / cuBLASLt"), {WF::kBF16, WF::kF32});
    d.compute_dtypes = {DType::kBF16, DType::kF16, DType::kF32};
    add(d);
  }
  {
    KernelDecl d =
        wf(Cuda("deep_gemm", F::kMatmul, 90, 103, "DeepGEMM fp8 1x128/128x128"), {WF::kFp8Block});
    d.requires_ue8m0_on_sm100 = true;
    add(d);
  }
  add(wf(Cuda("flashinfer_trtllm", F::kMatmul, 100, 103, "FlashInfer TRT-LLM gen GEMM"),
         {WF::kFp8Block, WF::kNvfp4}));
  add(wf(Cuda("cutlass", F::kMatmul, 90, 120, "CUTLASS blockwise fp8 (sgl-kernel)"),
         {WF::kFp8Block}));
  add(wf(Cuda("cutlass", F::kMatmul, 100, 120, "CUTLASS NVFP4 block-scaled GEMM"), {WF::kNvfp4}));
  add(wf(Cuda("triton", F::kMatmul, 89, 120, "SGLang Triton w8a8 block fp8"), {WF::kFp8Block}));
  add(wf(Cuda("flashinfer_cutlass", F::kMatmul, 100, 120, "FlashInfer CUTLASS FP4 GEMM"),
         {WF::kNvfp4}));
  add(wf(Cuda("flashinfer_cudnn", F::kMatmul, 100, 120, "FlashInfer cuDNN FP4 GEMM"),
         {WF::kNvfp4}));
  add(wf(Cuda("marlin", F::kMatmul, 80, 120, "Marlin W4A16 NVFP4 (weight-only)", "vLLM"),
         {WF::kNvfp4}));
  add(wf(Rocm("aiter", F::kMatmul, "AMD aiter fp8 GEMM (ROCm)"), {WF::kFp8Block, WF::kBF16}));

  // Routed experts (--moe-runner-backend).
  add(wf(Cuda("flashinfer_trtllm", F::kMoe, 100, 103, "FlashInfer TRT-LLM gen fused MoE"),
         {WF::kFp8Block, WF::kNvfp4, WF::kBF16}));
  {
    KernelDecl d =
        wf(Cuda("deep_gemm", F::kMoe, 90, 103, "DeepGEMM grouped fp8 GEMM"), {WF::kFp8Block});
    d.requires_ue8m0_on_sm100 = true;
    add(d);
  }
  add(wf(Cuda("flashinfer_cutlass", F::kMoe, 100, 120, "FlashInfer CUTLASS fused MoE"),
         {WF::kNvfp4}));
  add(wf(Cuda("cutlass", F::kMoe, 90, 103, "sgl-kernel CUTLASS fp8 MoE"), {WF::kFp8Block}));
  add(wf(Cuda("cutlass", F::kMoe, 100, 120, "sgl-kernel CUTLASS NVFP4 MoE"), {WF::kNvfp4}));
  add(wf(Cuda("triton", F::kMoe, 80, 120, "SGLang Triton fused MoE (bf16)"), {WF::kBF16}));
  add(wf(Cuda("triton", F::kMoe, 89, 120, "SGLang Triton fused MoE (w8a8 block fp8)"),
         {WF::kFp8Block}));
  add(wf(Rocm("aiter", F::kMoe, "AMD aiter fused MoE (ROCm)"), {WF::kFp8Block, WF::kBF16}));

  // Sampling (--sampling-backend).
  add(Cuda("flashinfer", F::kSampling, 80, 120, "FlashInfer sampling kernels"));
  {
    KernelDecl d = Cuda("pytorch", F::kSampling, 70, 120, "plain softmax + multinomial kernels");
    d.compute_dtypes = {DType::kBF16, DType::kF16, DType::kF32};
    add(d);
  }
  for (KernelDecl& d : c) {
    if (d.family == F::kSampling) d.compute_dtypes = {DType::kBF16, DType::kF16, DType::kF32};
  }
  return c;
}

template <typename T, typename Name>
std::string JoinNames(const std::vector<T>& v, Name name) {
  std::string s;
  for (const T& x : v) s += (s.empty() ? "" : ", ") + std::string(name(x));
  return s;
}

std::string SmDotted(int sm) { return std::to_string(sm / 10) + "." + std::to_string(sm % 10); }

template <typename T>
bool Contains(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

const char* FamilyName(KernelFamily f) {
  switch (f) {
    case KernelFamily::kDenseAttention:
      return "dense_attention";
    case KernelFamily::kSparseAttention:
      return "sparse_attention";
    case KernelFamily::kIndexer:
      return "indexer";
    case KernelFamily::kMatmul:
      return "matmul";
    case KernelFamily::kMoe:
      return "moe";
    case KernelFamily::kSampling:
      return "sampling";
  }
  return "?";
}

const char* DeviceName(Device d) {
  switch (d) {
    case Device::kCpu:
      return "cpu";
    case Device::kCuda:
      return "cuda";
    case Device::kRocm:
      return "rocm";
  }
  return "?";
}

const char* PhaseName(Phase p) { return p == Phase::kPrefill ? "prefill" : "decode"; }

std::string SmName(int sm) { return "sm_" + std::to_string(sm); }

std::string DescribeSituation(const Situation& s) {
  std::string d = std::string(FamilyName(s.family)) + " " + PhaseName(s.phase) + " on " +
                  DeviceName(s.device) + (s.device == Device::kCuda ? ":" + SmName(s.sm) : "");
  if (s.family == KernelFamily::kMatmul || s.family == KernelFamily::kMoe)
    d += std::string(", ") + WeightFormatName(s.weight_format) + " weights";
  if (s.family == KernelFamily::kDenseAttention || s.family == KernelFamily::kSparseAttention ||
      s.family == KernelFamily::kIndexer)
    d += std::string(", KV ") + KvDtypeName(s.kv_dtype) + ", page " + std::to_string(s.page_size);
  return d + ", compute " + DTypeName(s.compute_dtype);
}

bool BuildHasCuda() {
#ifdef LUCID_BUILD_HAS_CUDA
  return true;
#else
  return false;
#endif
}

const std::vector<KernelDecl>& KernelCatalog() {
  static const std::vector<KernelDecl> kCatalog = BuildCatalog();
  return kCatalog;
}

const std::vector<KernelDecl>& ForeignKernels() {
  static const std::vector<KernelDecl> kForeign = BuildForeign();
  return kForeign;
}

std::optional<std::string> ForeignKernelRefusal(const std::vector<KernelFamily>& families,
                                                const std::string& name) {
  const KernelDecl* foreign = nullptr;
  for (const KernelDecl& d : ForeignKernels())
    if (d.name == name && Contains(families, d.family)) {
      foreign = &d;
      break;
    }
  if (foreign == nullptr) return std::nullopt;
  // "cpu (on cpu) and cuda-bf16act, cuda-reference (on cuda)": the names by device, in catalog
  // order.
  std::vector<std::pair<Device, std::string>> by_device;
  for (const KernelDecl& d : KernelCatalog()) {
    if (d.family != foreign->family) continue;
    auto it = std::find_if(by_device.begin(), by_device.end(),
                           [&d](const auto& p) { return p.first == d.device; });
    if (it == by_device.end())
      by_device.push_back({d.device, d.name});
    else
      it->second += ", " + d.name;
  }
  std::string lucid;
  for (const auto& [device, names] : by_device)
    lucid += (lucid.empty() ? "" : " and ") + names + " (on " + DeviceName(device) + ")";
  const bool an = foreign->project == "SGLang";  // "an ess-G-Lang"
  return std::string("not implemented by lucid (") + (an ? "an " : "a ") + foreign->project +
         " kernel: " + foreign->origin + "); lucid's " + FamilyName(foreign->family) +
         " kernels are " + lucid;
}

std::vector<std::string> RuntimeGaps(const KernelDecl& d, const Situation& s) {
  std::vector<std::string> gaps;
  if (!Contains(d.compute_dtypes, s.compute_dtype))
    gaps.push_back(std::string("does not compute in ") + DTypeName(s.compute_dtype) + " (only " +
                   JoinNames(d.compute_dtypes, DTypeName) + ")");
  if (s.graph_capture && s.phase == Phase::kDecode && !d.graph_capture)
    gaps.push_back("cannot be captured in a CUDA graph");
  return gaps;
}

std::optional<std::string> Refusal(const KernelDecl& d, const Situation& s, bool gaps_refuse) {
  if (d.family != s.family) return std::string("is not a ") + FamilyName(s.family) + " kernel";
  if (d.device != s.device)
    return std::string("runs on ") + DeviceName(d.device) + ", target device is " +
           DeviceName(s.device);
  if (d.device == Device::kCuda && (s.sm < d.min_sm || s.sm > d.max_sm))
    return "needs compute capability " + SmDotted(d.min_sm) + "-" + SmDotted(d.max_sm) +
           ", target has " + SmDotted(s.sm);
  if (!Contains(d.phases, s.phase))
    return std::string("has no ") + PhaseName(s.phase) + " kernel (only " +
           JoinNames(d.phases, PhaseName) + ")";
  const bool weights = s.family == KernelFamily::kMatmul || s.family == KernelFamily::kMoe;
  if (weights && !Contains(d.weight_formats, s.weight_format))
    return std::string("does not handle ") + WeightFormatName(s.weight_format) + " weights (only " +
           JoinNames(d.weight_formats, WeightFormatName) + ")";
  if (weights && d.requires_ue8m0_on_sm100 && s.sm >= 100 && s.weight_format == WF::kFp8Block &&
      !s.ue8m0_scales)
    return "needs ue8m0 (power-of-two) block scales on " + SmName(s.sm) +
           "; the checkpoint's scale_fmt is not ue8m0";
  if (!d.kv_dtypes.empty() && !Contains(d.kv_dtypes, s.kv_dtype))
    return std::string("cannot use a ") + KvDtypeName(s.kv_dtype) + " KV cache (only " +
           JoinNames(d.kv_dtypes, KvDtypeName) + ")";
  if (gaps_refuse && !Contains(d.compute_dtypes, s.compute_dtype)) return RuntimeGaps(d, s).front();
  if (!d.page_sizes.empty() && !Contains(d.page_sizes, s.page_size))
    return "needs page size " +
           JoinNames(d.page_sizes, [](int64_t p) { return std::to_string(p); }) + ", not " +
           std::to_string(s.page_size);
  if (!d.head_dims.empty()) {
    const int64_t hd = s.family == KernelFamily::kIndexer ? s.indexer_head_dim : s.mla_head_dim;
    if (!Contains(d.head_dims, hd))
      return "is written for head dim " +
             JoinNames(d.head_dims, [](int64_t p) { return std::to_string(p); }) +
             ", the model has " + std::to_string(hd);
  }
  if (gaps_refuse && s.graph_capture && s.phase == Phase::kDecode && !d.graph_capture)
    return "cannot be captured in a CUDA graph";
  return std::nullopt;
}

std::vector<const KernelDecl*> FindKernels(KernelFamily family, const std::string& name) {
  std::vector<const KernelDecl*> out;
  for (const KernelDecl& d : KernelCatalog())
    if (d.family == family && d.name == name) out.push_back(&d);
  return out;
}

std::vector<const KernelDecl*> FindForeignKernels(KernelFamily family, const std::string& name) {
  std::vector<const KernelDecl*> out;
  for (const KernelDecl& d : ForeignKernels())
    if (d.family == family && d.name == name) out.push_back(&d);
  return out;
}

const std::vector<std::string>& PriorityList(KernelFamily family, Device device) {
  static const std::vector<std::string> kCpu = {"cpu"};
  static const std::vector<std::string> kCuda = {kCudaBf16Act, kCudaReference};
  // cuda-fp8act last: never taken where cuda-bf16act serves, only when named.
  static const std::vector<std::string> kCudaWeights = {kCudaBf16Act, kCudaReference, kCudaFp8Act};
  static const std::vector<std::string> kNone;  // ROCm: lucid has no kernel
  if (device == Device::kCpu) return kCpu;
  if (device == Device::kCuda)
    return family == KernelFamily::kMatmul || family == KernelFamily::kMoe ? kCudaWeights : kCuda;
  return kNone;
}

std::vector<std::string> BackendNames(const std::vector<KernelFamily>& families,
                                      std::optional<WeightFormat> format) {
  std::vector<std::string> names;
  for (const KernelDecl& d : KernelCatalog()) {
    if (!Contains(families, d.family)) continue;
    if (format && !Contains(d.weight_formats, *format)) continue;
    if (!Contains(names, d.name)) names.push_back(d.name);
  }
  return names;
}

}  // namespace lucid::config
