// The kernel catalog: lucid's kernels in every kernel family and what each implements.
//
// KernelCatalog() holds only what lucid has: the `cpu` kernels (backends/cpu, every CPU kernel
// set) and the `cuda-bf16act` and `cuda-reference` kernels (backends/cuda, compiled in with
// -DLUCID_CUDA=ON: bf16 matmul inputs, and exact f32; `lucid serve`, `lucid generate` and `lucid
// bench` run a model on them with --device cuda, the set the plan's --dtype chooses). Only
// these are planned. ForeignKernels() keeps the names and published capabilities of the CUDA and
// ROCm kernels SGLang and vLLM run (flashmla_kv, deep_gemm, tilelang, ...; docs/CONFIG.md gives
// the sources) so that a flag naming one is refused by name with the lucid kernel that does the
// job (ForeignKernelRefusal); they are never selected.
//
// Selection (config/kernel_selection.h) asks `Refusal(decl, situation)` for each candidate of a
// priority list; an empty answer means the kernel supports exactly that situation.
// Thread-safety: immutable after first use.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "models/kv_cache.h"
#include "ops/weight.h"

namespace lucid::config {

enum class KernelFamily {
  kDenseAttention,   // MLA over every causal token (deepseek_v3); flag --attention-backend
  kSparseAttention,  // MLA over the indexer's top-k (DSA); flags --nsa-{prefill,decode}-backend
  kIndexer,          // DSA lightning indexer scores + top-k; no flag (auto only)
  kMatmul,           // linear layers, per weight format; --fp8-gemm-backend / --fp4-gemm-backend
  kMoe,              // routed experts; --moe-runner-backend
  kSampling,         // logits -> token; --sampling-backend
};
inline constexpr KernelFamily kAllFamilies[] = {KernelFamily::kDenseAttention,
                                                KernelFamily::kSparseAttention,
                                                KernelFamily::kIndexer,
                                                KernelFamily::kMatmul,
                                                KernelFamily::kMoe,
                                                KernelFamily::kSampling};
const char* FamilyName(KernelFamily f);  // "dense_attention", "sparse_attention", ...

enum class Device { kCpu, kCuda, kRocm };
const char* DeviceName(Device d);

enum class Phase { kPrefill, kDecode };
const char* PhaseName(Phase p);

// Compute capability as major*10+minor (90 = sm_90 = 9.0). 0 for non-CUDA.
std::string SmName(int sm);  // "sm_90"

// What one kernel choice must handle: frozen before selection (design principle 3).
struct Situation {
  Device device = Device::kCpu;
  int sm = 0;
  KernelFamily family = KernelFamily::kMatmul;
  Phase phase = Phase::kPrefill;
  WeightFormat weight_format = WeightFormat::kBF16;  // kMatmul / kMoe
  bool ue8m0_scales = false;                         // fp8-block checkpoint scale_fmt
  KvDtype kv_dtype = KvDtype::kBF16;                 // attention / indexer
  DType compute_dtype = DType::kBF16;                // activations
  int64_t page_size = 1;
  int64_t mla_head_dim = 0;      // kv_lora_rank + qk_rope_head_dim (576 for the DeepSeek family)
  int64_t indexer_head_dim = 0;  // index_head_dim (128)
  bool graph_capture = false;    // decode kernels must be capturable in a CUDA graph
};
std::string DescribeSituation(const Situation& s);  // one line, for messages

struct KernelDecl {
  std::string name;  // the backend name as the flags spell it ("flashmla_kv")
  KernelFamily family = KernelFamily::kMatmul;
  Device device = Device::kCuda;
  int min_sm = 0, max_sm = 0;                // inclusive range, CUDA only
  std::vector<WeightFormat> weight_formats;  // kMatmul/kMoe; empty = not applicable
  std::vector<KvDtype> kv_dtypes;            // attention/indexer; empty = not applicable
  std::vector<DType> compute_dtypes;         // activation dtypes
  std::vector<int64_t> page_sizes;           // empty = any page size
  std::vector<int64_t> head_dims;            // MLA 576 / indexer 128; empty = any
  std::vector<Phase> phases;
  bool graph_capture = false;
  bool requires_ue8m0_on_sm100 = false;  // DeepGEMM on Blackwell reads ue8m0 block scales only
  bool compiled_in = false;              // this build contains the kernel
  std::string origin;                    // where it comes from / the capability source
  std::string project = "lucid";         // "lucid", or the server that runs it ("SGLang")
};

// lucid's CUDA kernel sets (backends/cuda/cuda_ops.h), as the flags and the plan spell them.
inline constexpr const char* kCudaReference = "cuda-reference";
inline constexpr const char* kCudaBf16Act = "cuda-bf16act";
// cuda-bf16act with FP8 activations for the FP8 block matmuls (matmul and moe rows only).
inline constexpr const char* kCudaFp8Act = "cuda-fp8act";

// Whether this build contains backends/cuda (configured with -DLUCID_CUDA=ON).
bool BuildHasCuda();

// lucid's kernels, the only ones planned. A name appears in several families ("cpu").
const std::vector<KernelDecl>& KernelCatalog();

// The SGLang / vLLM kernels lucid does not implement, with their published capabilities.
const std::vector<KernelDecl>& ForeignKernels();

// For a flag choosing a kernel of `families`: nullopt when `name` is not a foreign kernel of
// those families; else the one-line refusal after "--flag name: ", e.g. "not implemented by lucid
// (an SGLang kernel: FlashMLA sparse decode ...); lucid's sparse_attention kernels are cpu (on
// cpu) and cuda-bf16act, cuda-reference (on cuda)".
std::optional<std::string> ForeignKernelRefusal(const std::vector<KernelFamily>& families,
                                                const std::string& name);

// Why `decl` cannot serve `s` (one clause, e.g. "needs compute capability 9.0-10.3, target has
// 12.0"); nullopt when it supports exactly this situation. Does not look at compiled_in. With
// `gaps_refuse` false the compute dtype and CUDA graph capture are left to RuntimeGaps.
std::optional<std::string> Refusal(const KernelDecl& decl, const Situation& s,
                                   bool gaps_refuse = true);

// What `decl` lacks for `s` in compute dtype and graph capture (clauses, empty when nothing).
std::vector<std::string> RuntimeGaps(const KernelDecl& decl, const Situation& s);

// lucid's declarations of `name` in `family`; empty when there is none.
std::vector<const KernelDecl*> FindKernels(KernelFamily family, const std::string& name);
// The foreign declarations of `name` in `family` (several when the backend has one kernel per
// weight format, e.g. "cutlass" fp8 and nvfp4).
std::vector<const KernelDecl*> FindForeignKernels(KernelFamily family, const std::string& name);

// Automatic-choice priority per family and device, best first: lucid's kernels only.
const std::vector<std::string>& PriorityList(KernelFamily family, Device device);

// Distinct names of lucid's kernels for the families a flag governs, in catalog order (the
// allowed values of the backend options).
std::vector<std::string> BackendNames(const std::vector<KernelFamily>& families,
                                      std::optional<WeightFormat> format = std::nullopt);

}  // namespace lucid::config
