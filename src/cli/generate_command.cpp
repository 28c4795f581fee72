// `lucid generate`: greedy decoding of a prompt through the serving engine (EngineCore: one prefill
// step, then one decode step per token). The prompt is token ids (--prompt-ids; prints the new ids)
// or text (--prompt, encoded by the model's tokenizer with its special tokens, or rendered by its
// chat template with --chat, as transformers' apply_chat_template(add_generation_prompt=True) does;
// prints the new text, cut at the first EOS id of config.json). JSON output has token_ids, and
// prompt_ids and text for a text prompt. Can dump the prompt's logits as .npy.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/process_env.h"
#include "config/cpu_kernels.h"
#include "config/wait_policy.h"
#include "formats/model_config.h"
#include "formats/npy.h"
#include "models/registry.h"
#include "runtime/engine_driver.h"
#include "server/model_assets.h"

namespace lucid::cli {
namespace {

struct GenerateFlags {
  std::string model_path;
  std::string prompt_ids;
  std::string prompt;
  bool chat = false;
  int64_t max_new_tokens = 16;
  std::string output = "text";
  std::string dump_logits;
  std::string kv_cache_dtype = "auto";
  std::string cpu_kernels = "auto";
};

StatusOr<std::vector<int32_t>> ParseIds(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 0 || v > INT32_MAX)
      return InvalidArgument("--prompt-ids: \"" + item + "\" is not a token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) return InvalidArgument("--prompt-ids: empty prompt");
  return ids;
}

// The prompt's ids from --prompt (text, or a chat turn with --chat) with the model's tokenizer.
StatusOr<std::vector<int32_t>> EncodeTextPrompt(const GenerateFlags& f,
                                                const server::ModelAssets& assets) {
  if (!assets.tokenizer) {
    return InvalidArgument("--prompt: " + f.model_path +
                           " has no tokenizer (tokenizer.json); use --prompt-ids");
  }
  if (!f.chat) return assets.tokenizer->Encode(f.prompt, /*add_special_tokens=*/true);
  if (!assets.chat_template) return InvalidArgument("--chat: " + assets.chat_error);
  tok::ChatRequest req;
  req.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", f.prompt}}});
  req.add_generation_prompt = true;
  req.bos_token = assets.bos_token;
  req.eos_token = assets.eos_token;
  LUCID_ASSIGN_OR_RETURN(std::string text, assets.chat_template->Apply(req));
  return assets.tokenizer->Encode(text, /*add_special_tokens=*/false);
}

Status RunGenerate(const GenerateFlags& f) {
  // The same OpenMP wait policy as `lucid serve` (config/wait_policy.h); may re-execute once.
  LUCID_ASSIGN_OR_RETURN(config::WaitPolicyPlan wait, config::PlanWaitPolicyFromEnvironment());
  ApplyWaitPolicy(wait, "generate");
  if (f.prompt_ids.empty() == f.prompt.empty())
    return InvalidArgument("give one of --prompt-ids and --prompt");
  if (f.chat && f.prompt.empty()) return InvalidArgument("--chat needs --prompt");
  server::ModelAssets assets;
  std::vector<int32_t> prompt;
  if (!f.prompt.empty()) {
    LUCID_ASSIGN_OR_RETURN(assets, server::LoadModelAssets(f.model_path));
    LUCID_ASSIGN_OR_RETURN(prompt, EncodeTextPrompt(f, assets));
  } else {
    LUCID_ASSIGN_OR_RETURN(prompt, ParseIds(f.prompt_ids));
  }
  LUCID_ASSIGN_OR_RETURN(KvDtype kv_dtype, ParseKvCacheDtype(f.kv_cache_dtype));
  // CpuFastOps by default (tested against the CpuOps reference; LUCID_CPU_ISA caps its level),
  // with bf16 matmul inputs for a bf16 checkpoint (`auto`, config/cpu_kernels.h).
  LUCID_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(f.model_path));
  const std::string torch_dtype = f.cpu_kernels == "auto" ? config.torch_dtype : "";
  LUCID_ASSIGN_OR_RETURN(config::CpuKernelSet set,
                         config::ChooseCpuKernelSet(f.cpu_kernels, torch_dtype));
  const std::unique_ptr<Ops> ops = config::MakeCpuOps(set);
  LUCID_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, LoadModel(f.model_path, *ops));
  Tensor prompt_logits;
  LUCID_ASSIGN_OR_RETURN(std::vector<int32_t> out,
                         GreedyGenerate(*model, prompt, f.max_new_tokens, &prompt_logits,
                                        /*page_size=*/64, kv_dtype));
  if (!f.dump_logits.empty()) LUCID_RETURN_IF_ERROR(WriteNpy(f.dump_logits, prompt_logits));
  if (!f.prompt.empty()) {
    auto eos = std::find_if(out.begin(), out.end(), [&](int32_t id) {
      return std::count(config.eos_token_ids.begin(), config.eos_token_ids.end(), id) > 0;
    });
    const std::vector<int32_t> kept(out.begin(), eos);
    const std::string text = assets.tokenizer->Decode(kept, /*skip_special_tokens=*/true);
    if (f.output == "json") {
      nlohmann::json j = {{"prompt_ids", prompt}, {"token_ids", out}, {"text", text}};
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf("%s\n", text.c_str());
    }
  } else if (f.output == "json") {
    std::printf("%s\n", nlohmann::json{{"token_ids", out}}.dump().c_str());
  } else {
    for (size_t i = 0; i < out.size(); ++i) std::printf("%s%d", i ? "," : "", out[i]);
    std::printf("\n");
  }
  return OkStatus();
}

}  // namespace

void RegisterGenerateCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<GenerateFlags>();
  CLI::App* cmd =
      app.add_subcommand("generate", "Greedy generation from token ids or text (no server)");
  cmd->add_option("--model-path", flags->model_path, "Model directory (config.json + safetensors)")
      ->required();
  cmd->add_option("--prompt-ids", flags->prompt_ids, "Comma-separated prompt token ids");
  cmd->add_option("--prompt", flags->prompt,
                  "Prompt text, encoded by the model's tokenizer (prints the new text)");
  cmd->add_flag("--chat", flags->chat,
                "Send --prompt as a user turn through the model's chat template");
  cmd->add_option("--max-new-tokens", flags->max_new_tokens, "Tokens to generate")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option("--output", flags->output, "Output format")
      ->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("--kv-cache-dtype", flags->kv_cache_dtype,
                  "KV cache storage: auto (f32 on CPU), f32, bf16, fp8_e4m3 (FlashMLA layout)")
      ->check(CLI::IsMember({"auto", "f32", "bf16", "fp8_e4m3", "fp8"}));
  cmd->add_option("--cpu-kernels", flags->cpu_kernels,
                  "CPU kernel set: auto (fast-bf16act for a bfloat16 checkpoint, else fast), fast "
                  "(CpuFastOps), fast-bf16act (CpuFastOps with bf16 matmul activations) or "
                  "reference (CpuOps, for debugging) [default: auto]");
  cmd->add_option("--dump-logits", flags->dump_logits,
                  "Write the prompt's logits [prompt_len, vocab] as float32 .npy");
  cmd->callback([flags, exit_code] {
    Status s = RunGenerate(*flags);
    if (!s.ok()) {
      std::fprintf(stderr, "lucid generate: %s\n", s.ToString().c_str());
      *exit_code = s.code() == StatusCode::kInvalidArgument ? 2 : 1;
    }
  });
}

}  // namespace lucid::cli
