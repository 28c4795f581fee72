// Every rule of resolution, in one table (see rules.h). Order matters only among rules for the
// same setting: the first whose condition holds applies.
#include "config/rules.h"

#include <algorithm>
#include <filesystem>

#include "config/cpu_kernels.h"
#include "config/option_table.h"
#include "config/wait_policy.h"

namespace lucid::config {
namespace {

using json = nlohmann::json;
using Ctx = RuleContext;

std::string Str(int64_t v) { return std::to_string(v); }

std::vector<Rule> BuildRules() {
  std::vector<Rule> r;
  auto add = [&](std::string id, std::string option, std::string condition,
                 std::function<bool(const Ctx&)> when, std::function<json(const Ctx&)> value,
                 std::function<std::string(const Ctx&)> reason) {
    r.push_back({std::move(id), std::move(option), std::move(condition), std::move(when),
                 std::move(value), std::move(reason)});
  };
  auto always = [](const Ctx&) { return true; };

  add(
      "gpu-count-none", "gpu-count", "the target has no GPU",
      [](const Ctx& c) { return !c.target.has_gpu; }, [](const Ctx&) { return json(0); },
      [](const Ctx&) { return "the target has no GPU"; });
  add(
      "gpu-count-local", "gpu-count", "this machine's GPUs (--target local)",
      [](const Ctx& c) { return !c.target.local_gpus.empty(); },
      [](const Ctx& c) { return json(static_cast<int64_t>(c.target.local_gpus.size())); },
      [](const Ctx& c) {
        return "the CUDA runtime's devices of compute capability " + SmName(c.target.sm) +
               " on this machine";
      });
  add(
      "gpu-count-one", "gpu-count", "the target has GPUs", always,
      [](const Ctx&) { return json(1); },
      [](const Ctx&) { return "one GPU unless --gpu-count says otherwise"; });
  add(
      "gpu-memory-none", "gpu-memory", "the target has no GPU",
      [](const Ctx& c) { return !c.target.has_gpu; }, [](const Ctx&) { return json(0); },
      [](const Ctx&) { return "the target has no GPU"; });
  add(
      "gpu-memory-local", "gpu-memory", "this machine's GPUs (--target local)",
      [](const Ctx& c) { return !c.target.local_gpus.empty(); },
      [](const Ctx& c) {
        int64_t m = c.target.local_gpus.front().free_memory;
        for (const LocalGpu& g : c.target.local_gpus) m = std::min(m, g.free_memory);
        return json(m);
      },
      [](const Ctx& c) {
        return "the free memory the CUDA runtime reported" +
               std::string(c.target.local_gpus.size() > 1 ? " (the least of the devices)" : "") +
               " at start-up (cudaMemGetInfo), as SGLang sizes its pools; the CUDA context "
               "already holds its own";
      });
  add(
      "cpu-memory-meminfo", "cpu-memory", "always (when not described)", always,
      [](const Ctx&) { return json(LocalSystemMemory()); },
      [](const Ctx& c) {
        return std::string("this machine's MemTotal") +
               (c.target.local ? "" : " (the described target gave no --cpu-memory)");
      });
  add(
      "device-from-target", "device", "always", always,
      [](const Ctx& c) { return json(c.target.has_gpu ? "cuda" : "cpu"); },
      [](const Ctx& c) {
        return c.target.has_gpu ? "the target has GPUs (" + SmName(c.target.sm) + ")"
                                : std::string("the target has no GPU");
      });
  add(
      "served-name-from-dir", "served-model-name", "always", always,
      [](const Ctx& c) {
        std::filesystem::path p(c.model.dir);
        if (!p.has_filename()) p = p.parent_path();
        return json(p.filename().string());
      },
      [](const Ctx&) { return "the model directory's name"; });
  // Output parsers of the chat route (issue 24), by the checkpoint's model_type.
  add(
      "tool-parser-from-model-type", "tool-call-parser",
      "always: glm_moe_dsa -> glm47, glm4_moe -> glm45, deepseek_v32 -> deepseekv32, "
      "deepseek_v3 -> deepseekv31, else none",
      always,
      [](const Ctx& c) {
        const std::string& t = c.model.config.model_type;
        return json(t == "glm_moe_dsa"    ? "glm47"
                    : t == "glm4_moe"     ? "glm45"
                    : t == "deepseek_v32" ? "deepseekv32"
                    : t == "deepseek_v3"  ? "deepseekv31"
                                          : "none");
      },
      [](const Ctx& c) {
        return "the tool-call markup models of type '" + c.model.config.model_type +
               "' write (GLM-5 writes GLM-4.7's; DeepSeek-V3-0324's older markup is not parsed)";
      });
  add(
      "reasoning-parser-from-model-type", "reasoning-parser",
      "always: glm_moe_dsa, glm4_moe -> glm45; deepseek_v32, deepseek_v3 -> deepseek-v3; "
      "else none",
      always,
      [](const Ctx& c) {
        const std::string& t = c.model.config.model_type;
        return json(t == "glm_moe_dsa" || t == "glm4_moe"       ? "glm45"
                    : t == "deepseek_v32" || t == "deepseek_v3" ? "deepseek-v3"
                                                                : "none");
      },
      [](const Ctx& c) {
        return "models of type '" + c.model.config.model_type +
               "' write their reasoning as <think>...</think>";
      });
  add(
      "cpu-kernels-from-dtype", "cpu-kernels", "always", always,
      [](const Ctx& c) {
        return json(CpuKernelSetName(CpuKernelSetForCheckpoint(c.model.config.torch_dtype)));
      },
      [](const Ctx& c) { return CpuKernelSetForCheckpointReason(c.model.config.torch_dtype); });
  // The wait policy depends on the process environment, which a RuleContext does not hold: the
  // resolver asks config/wait_policy.h (PlanWaitPolicy), which applies these two in this order.
  add(
      "wait-policy-environment", "cpu-wait-policy",
      "OMP_WAIT_POLICY or GOMP_SPINCOUNT set by the user", [](const Ctx&) { return false; },
      [](const Ctx&) { return json("environment"); },
      [](const Ctx&) { return WaitPolicyRuleReason("wait-policy-environment"); });
  add(
      "wait-policy-short-spin", "cpu-wait-policy", "otherwise", always,
      [](const Ctx&) { return json("short-spin"); },
      [](const Ctx&) { return WaitPolicyRuleReason("wait-policy-short-spin"); });
  add(
      "contention-leave-a-core", "cpu-contention", "always", always,
      [](const Ctx&) { return json("leave-a-core"); },
      [](const Ctx&) {
        return "a kernel thread that another process preempts holds up every parallel region "
               "of the step; while the engine waits for a CPU (>10% of its time) its team runs "
               "one thread fewer, and the whole team again once the others leave a core free "
               "(runtime/cpu_contention.h)";
      });
  add(
      "dtype-cpu-f32", "dtype", "device is cpu", [](const Ctx& c) { return !c.cuda(); },
      [](const Ctx&) { return json("float32"); },
      [](const Ctx&) {
        return "the CPU kernels compute in float32 (fast-bf16act rounds the matmuls' inputs to "
               "bf16 and accumulates in float32)";
      });
  add(
      "dtype-local-cuda", "dtype", "device is cuda on this machine's GPU",
      [](const Ctx& c) { return c.cuda() && !c.target.local_gpus.empty(); },
      [](const Ctx& c) {
        return json(c.model.config.torch_dtype == "bfloat16" ? "bfloat16" : "float32");
      },
      [](const Ctx& c) {
        if (c.model.config.torch_dtype == "bfloat16")
          return std::string(
              "checkpoint torch_dtype is bfloat16: this machine's GPU runs lucid's cuda-bf16act "
              "kernels (the matmuls take bf16 inputs, as in transformers and the GPU engines; "
              "residual, norms and attention stay float32)");
        return "checkpoint torch_dtype is " +
               (c.model.config.torch_dtype.empty() ? std::string("unset")
                                                   : c.model.config.torch_dtype) +
               ": this machine's GPU runs lucid's cuda-reference kernels in float32 "
               "(cuda-bf16act computes in bfloat16 only)";
      });
  add(
      "dtype-from-checkpoint", "dtype", "device is cuda", [](const Ctx& c) { return c.cuda(); },
      [](const Ctx& c) {
        return json(c.model.config.torch_dtype == "float16" ? "float16" : "bfloat16");
      },
      [](const Ctx& c) {
        return "checkpoint torch_dtype is " +
               (c.model.config.torch_dtype.empty() ? std::string("unset")
                                                   : c.model.config.torch_dtype) +
               "; a CUDA deployment computes in it (lucid's CUDA kernels compute in bfloat16 or "
               "float32: the plan says so under what this build cannot run)";
      });
  add(
      "context-from-model", "context-length", "always", always,
      [](const Ctx& c) { return json(c.model.config.max_position_embeddings); },
      [](const Ctx& c) {
        return "the model's max_position_embeddings (" +
               Str(c.model.config.max_position_embeddings) + ")";
      });
  add(
      "graphs-off-cpu", "disable-cuda-graph", "device is cpu",
      [](const Ctx& c) { return !c.cuda(); }, [](const Ctx&) { return json(true); },
      [](const Ctx&) { return "CUDA graphs exist only on cuda"; });
  add(
      "graphs-off-local-cuda", "disable-cuda-graph", "device is cuda on this machine's GPU",
      [](const Ctx& c) { return c.cuda() && !c.target.local_gpus.empty(); },
      [](const Ctx&) { return json(true); },
      [](const Ctx&) {
        return "lucid's CUDA decode steps are not captured in CUDA graphs (a described "
               "target plans a deployment's graphs)";
      });
  add(
      "graphs-on-cuda", "disable-cuda-graph", "device is cuda",
      [](const Ctx& c) { return c.cuda(); }, [](const Ctx&) { return json(false); },
      [](const Ctx&) {
        return "a CUDA deployment captures its decode steps in CUDA graphs (lucid's CUDA "
               "kernels cannot be captured yet: the plan says so under what this build cannot "
               "run)";
      });
  add(
      "kv-cpu-f32", "kv-cache-dtype", "device is cpu", [](const Ctx& c) { return !c.cuda(); },
      [](const Ctx&) { return json::array({"f32"}); },
      [](const Ctx&) {
        return "the CPU kernels compute in f32, and an f32 cache keeps attention exact "
               "(bf16 and fp8_e4m3 storage are available when asked for)";
      });
  add(
      "kv-fp8-from-checkpoint", "kv-cache-dtype",
      "cuda and the checkpoint's kv_cache_quant_algo is FP8",
      [](const Ctx& c) { return c.cuda() && c.model.kv_cache_quant_algo == "FP8"; },
      [](const Ctx&) {
        return json::array({"fp8_e4m3", "bf16"});
      },
      [](const Ctx&) { return "the checkpoint's kv_cache_quant_algo is FP8"; });
  add(
      "kv-fp8-dsa-blackwell", "kv-cache-dtype", "cuda, DSA model, compute capability >= 10.0",
      [](const Ctx& c) { return c.cuda() && c.model.sparse_attention && c.target.sm >= 100; },
      [](const Ctx&) {
        return json::array({"fp8_e4m3", "bf16"});
      },
      [](const Ctx&) {
        return "DSA model on Blackwell: prefer the FP8 KV cache (FlashMLA layout, about half "
               "the bytes), as SGLang does";
      });
  add(
      "kv-bf16", "kv-cache-dtype", "device is cuda", [](const Ctx& c) { return c.cuda(); },
      [](const Ctx&) {
        return json::array({"bf16", "fp8_e4m3"});
      },
      [](const Ctx&) { return "bf16 KV matches the compute dtype"; });
  add(
      "page-cpu", "page-size", "device is cpu", [](const Ctx& c) { return !c.cuda(); },
      [](const Ctx&) { return json::array({16}); },
      [](const Ctx&) {
        return "the CPU kernels take any page size; 16 keeps the last page's waste small";
      });
  add(
      "page-kernels", "page-size", "device is cuda", [](const Ctx& c) { return c.cuda(); },
      [](const Ctx&) {
        return json::array({64, 128, 32, 16, 1});
      },
      [](const Ctx&) {
        return "the first of 64, 128, 32, 16, 1 that every chosen kernel supports";
      });
  add(
      "chunk-cpu", "chunked-prefill-size", "device is cpu", [](const Ctx& c) { return !c.cuda(); },
      [](const Ctx& c) {
        return json(std::min<int64_t>(512, c.v("context-length").get<int64_t>()));
      },
      [](const Ctx&) { return "512 tokens per prefill step on cpu (at most the context length)"; });
  add(
      "chunk-cuda", "chunked-prefill-size", "device is cuda", [](const Ctx& c) { return c.cuda(); },
      [](const Ctx& c) {
        const int64_t v = c.target.gpu_memory >= (int64_t{64} << 30) ? 8192 : 4096;
        return json(std::min<int64_t>(v, c.v("context-length").get<int64_t>()));
      },
      [](const Ctx&) { return "8192 tokens on GPUs with >= 64 GiB, else 4096 (as SGLang)"; });
  add(
      "running-cpu", "max-running-requests", "device is cpu",
      [](const Ctx& c) { return !c.cuda(); }, [](const Ctx&) { return json(8); },
      [](const Ctx&) { return "8 concurrent requests on cpu"; });
  add(
      "running-cuda", "max-running-requests", "device is cuda",
      [](const Ctx& c) { return c.cuda(); }, [](const Ctx&) { return json(256); },
      [](const Ctx&) { return "256 concurrent requests on cuda"; });
  add(
      "graph-bs-unused", "cuda-graph-max-bs", "CUDA graphs are off",
      [](const Ctx& c) { return c.v("disable-cuda-graph").get<bool>(); },
      [](const Ctx&) { return json(0); },
      [](const Ctx&) { return "no graphs are captured (disable-cuda-graph)"; });
  add(
      "graph-bs-from-running", "cuda-graph-max-bs", "CUDA graphs are on",
      [](const Ctx& c) { return !c.v("disable-cuda-graph").get<bool>(); },
      [](const Ctx& c) {
        return json(std::min<int64_t>(256, c.v("max-running-requests").get<int64_t>()));
      },
      [](const Ctx&) { return "max-running-requests, at most 256"; });
  // Computed by the memory planner (value null here; the reason is completed there).
  add(
      "graph-bs-fits-memory", "cuda-graph-max-bs", "computed: graphs at the rule's size do not fit",
      [](const Ctx&) { return false; }, [](const Ctx&) { return json(); },
      [](const Ctx&) { return "the largest captured batch whose graph reserve fits"; });
  add(
      "mem-fraction-from-plan", "mem-fraction-static", "always (computed by the planner)", always,
      [](const Ctx&) { return json(); },
      [](const Ctx&) {
        return "the largest fraction that leaves room for activations, graphs and runtime";
      });
  add(
      "kv-capacity-cpu-requests", "max-total-tokens",
      "device cpu and max-running-requests x context-length is below the budget's capacity", always,
      [](const Ctx&) { return json(); },
      [](const Ctx&) {
        return "on CPU the KV pool holds what the running requests can use at once, not all of "
               "system memory";
      });
  add(
      "kv-capacity-from-plan", "max-total-tokens", "always (computed by the planner)", always,
      [](const Ctx&) { return json(); },
      [](const Ctx&) { return "every token the static budget holds after the weights"; });
  // Kernel backends left on auto (computed by kernel selection, config/kernel_selection.h).
  add(
      "kernel-priority", "", "a backend option left on auto whose kernel family the model uses",
      [](const Ctx&) { return false; }, [](const Ctx&) { return json(); },
      [](const Ctx&) {
        return "the first of the device's priority list that supports the situation with the "
               "fewest gaps (on cuda: computes in the plan's dtype)";
      });
  add(
      "nsa-follows-attention-backend", "",
      "DSA model, nsa-*-backend left on auto, --attention-backend given",
      [](const Ctx&) { return false; }, [](const Ctx&) { return json(); },
      [](const Ctx&) { return "the sparse phase uses the kernel named by --attention-backend"; });
  add(
      "backend-unused", "",
      "a backend option left on auto whose kernel family the model does not use",
      [](const Ctx&) { return false; }, [](const Ctx&) { return json(); },
      [](const Ctx&) { return "not used by this model"; });
  return r;
}

}  // namespace

bool RuleContext::cuda() const {
  auto it = values.find("device");
  return it != values.end() && it->second == "cuda";
}

const nlohmann::json& RuleContext::v(const std::string& name) const {
  auto it = values.find(name);
  LUCID_CHECK(it != values.end(), "rule reads " + name + " before it is resolved");
  return it->second;
}

const std::vector<Rule>& Rules() {
  static const std::vector<Rule> kRules = BuildRules();
  return kRules;
}

const Rule* FirstRule(const std::string& option, const RuleContext& ctx) {
  for (const Rule& r : Rules())
    if (r.option == option && r.when(ctx)) return &r;
  return nullptr;
}

const Rule* RuleById(const std::string& id) {
  for (const Rule& r : Rules())
    if (r.id == id) return &r;
  return nullptr;
}

}  // namespace lucid::config
