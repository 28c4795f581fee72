// `lucid synth`: writes a random-weight checkpoint with the real models' per-head dimensions
// (bench/synth.h has the presets and the layout).
#include <cstdio>

#include "bench/synth.h"
#include "cli/commands.h"

namespace lucid::cli {
namespace {

struct SynthFlags {
  SynthOptions o;
};

}  // namespace

void RegisterSynthCommand(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<SynthFlags>();
  CLI::App* cmd = app.add_subcommand(
      "synth", "Write a random-weight checkpoint (real per-head dims, fewer heads/experts/layers)");
  cmd->add_option("--arch", f->o.arch, "glm_moe_dsa | deepseek_v32 | deepseek_v3")
      ->check(CLI::IsMember(SynthArchNames()));
  cmd->add_option("--preset", f->o.preset, "tiny (tests) | 1g | 4g (benchmarks)")
      ->check(CLI::IsMember(SynthPresetNames()));
  cmd->add_option("--out", f->o.out_dir, "Output directory (created)")->required();
  cmd->add_option("--quant", f->o.quant, "nvfp4 | fp8-block (default: bf16)")
      ->check(CLI::IsMember({"nvfp4", "fp8-block"}));
  cmd->add_option("--seed", f->o.seed, "Random seed");
  cmd->callback([f, exit_code] {
    auto s = Synthesize(f->o);
    if (!s.ok()) {
      std::fprintf(stderr, "lucid synth: %s\n", s.status().ToString().c_str());
      *exit_code = s.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
      return;
    }
    std::printf("wrote %s: %s preset %s, %.3f G params, %.2f GB in %lld tensors, %lld shards\n",
                f->o.out_dir.c_str(), f->o.arch.c_str(), f->o.preset.c_str(), s->params / 1e9,
                s->bytes / 1e9, static_cast<long long>(s->tensors),
                static_cast<long long>(s->shards));
  });
}

}  // namespace lucid::cli
