// `lucid generate`: greedy decoding of a prompt through the serving engine (EngineCore: one prefill
// step, then one decode step per token). The prompt is token ids (--prompt-ids; prints the new ids)
// or text (--prompt, encoded by the model's tokenizer with its special tokens, or rendered by its
// chat template with --chat, as transformers' apply_chat_template(add_generation_prompt=True) does;
// prints the new text, cut at the first EOS id of config.json). JSON output has token_ids, and
// prompt_ids and text for a text prompt. Can dump the prompt's logits as .npy.
// It runs on the plan's device (cli/plan_backend.h): the CPU kernel set, or the plan's CUDA set on
// GPU 0 for --device cuda (a CUDA build; cuda-bf16act for bfloat16, cuda-reference for float32).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/local_gpus.h"
#include "cli/plan_backend.h"
#include "cli/process_env.h"
#include "cli/serve_parallel.h"
#include "config/cli_options.h"
#include "config/resolver.h"
#include "config/wait_policy.h"
#include "formats/model_config.h"
#include "formats/npy.h"
#include "models/registry.h"
#include "runtime/engine_driver.h"
#include "runtime/tp_step.h"
#include "server/model_assets.h"

namespace lucid::cli {
namespace {

// The command's arguments, read once from the option table's settings (config/option_table.h).
struct GenerateFlags {
  std::string model_path;
  std::string prompt_ids;
  std::string prompt;
  bool chat = false;
  int64_t max_new_tokens = 0;
  std::string output;
  std::string dump_logits;
};

GenerateFlags FlagsFrom(const config::ExplicitSettings& s, const config::ResolvedConfig& rc) {
  GenerateFlags f;
  f.model_path = rc.String("model-path");
  f.prompt_ids = s.String("prompt-ids");
  f.prompt = s.String("prompt");
  f.chat = s.Bool("chat");
  f.max_new_tokens = s.Int("max-new-tokens");
  f.output = s.String("output");
  f.dump_logits = s.String("dump-logits");
  return f;
}

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

Status RunGenerate(const GenerateFlags& f, const config::ResolvedConfig& rc) {
  if (f.model_path.empty()) return InvalidArgument("--model-path is required");
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
  // The resolved plan's kernel set (--cpu-kernels after its rule: by default fast-bf16act for a
  // bf16 checkpoint, else fast) and KV dtype, as `explain` prints them.
  LUCID_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(f.model_path));
  LUCID_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                         JoinWorld(rc.Int("tp-size"), "generate"));
  ModelLoadOptions load;
  load.tp = comm.get();
  load.ep_size = static_cast<int>(rc.Int("ep-size"));
  load.dp_attention = rc.Bool("enable-dp-attention");
  const char* check = std::getenv("LUCID_TP_CHECK_REPLICATED");
  load.tp_check_replicated = check != nullptr && std::string(check) == "1";
  LUCID_ASSIGN_OR_RETURN(const PlanBackend backend, MakePlanBackend(rc));
  if (!backend.description.empty())
    std::fprintf(stderr, "lucid generate: %s\n", backend.description.c_str());
  for (const std::string& n : backend.notes)
    std::fprintf(stderr, "lucid generate: %s\n", n.c_str());
  for (const std::string& w : backend.warnings)
    std::fprintf(stderr, "lucid generate: warning: %s\n", w.c_str());
  LUCID_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                         LoadModel(f.model_path, *backend.backend, load));
  if (comm)  // the world, one line per rank: who runs where and holds what
    std::fprintf(stderr,
                 "lucid generate: rank %d of %d on %s: tp %d, ep %d, %.2f MiB of weights "
                 "(its shard)\n",
                 comm->rank(), comm->size(), comm->host().c_str(), comm->size(), load.ep_size,
                 static_cast<double>(model->weight_bytes()) / (1 << 20));
  // A worker rank runs rank 0's steps and prints nothing on stdout (runtime/tp_step.h).
  if (comm && comm->rank() != 0) return RunTpWorker(*model, *comm);
  std::unique_ptr<TpLeaderModel> leader;
  if (comm) leader = std::make_unique<TpLeaderModel>(*model, *comm);
  Tensor prompt_logits;
  StatusOr<std::vector<int32_t>> generated =
      GreedyGenerate(leader ? *leader : *model, prompt, f.max_new_tokens, &prompt_logits,
                     rc.Int("page-size"), rc.kv_cache_dtype());
  if (leader) LUCID_RETURN_IF_ERROR(leader->Stop());
  LUCID_ASSIGN_OR_RETURN(std::vector<int32_t> out, std::move(generated));
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
  auto opts = std::make_shared<config::CliOptions>();
  CLI::App* cmd =
      app.add_subcommand("generate", "Greedy generation from token ids or text (no server)");
  opts->AddTo(cmd, config::kGenerate);
  cmd->callback([opts, exit_code] {
    Status s = OkStatus();
    StatusOr<config::ExplicitSettings> settings = opts->Collect();
    if (!settings.ok()) s = settings.status();
    // The same OpenMP wait policy as `lucid serve` (config/wait_policy.h); may re-execute once,
    // before any parallel region runs.
    if (s.ok()) {
      StatusOr<config::WaitPolicyPlan> wait = config::PlanWaitPolicy(
          settings->Get("cpu-wait-policy"), config::OmpEnvironmentOf(*settings));
      if (wait.ok())
        ApplyWaitPolicy(*wait, "generate");
      else
        s = wait.status();
    }
    StatusOr<config::ResolvedConfig> rc =
        s.ok() ? ResolveOnThisMachine(*settings) : StatusOr<config::ResolvedConfig>(s);
    if (!rc.ok()) s = rc.status();
    if (s.ok()) s = RunGenerate(FlagsFrom(*settings, *rc), *rc);
    if (!s.ok()) {
      std::fprintf(stderr, "lucid generate: %s\n", s.message().c_str());
      *exit_code = ExitCodeFor(s);
    }
  });
}

}  // namespace lucid::cli
