// `lucid synth`: writes a random-weight checkpoint with the real models' per-head dimensions
// (bench/synth.h has the presets and the layout).
#include <cstdio>

#include "bench/synth.h"
#include "cli/commands.h"
#include "config/cli_options.h"

namespace lucid::cli {

void RegisterSynthCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<config::CliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "synth", "Write a random-weight checkpoint (real per-head dims, fewer heads/experts/layers)");
  opts->AddTo(cmd, config::kSynth);
  cmd->callback([opts, exit_code] {
    StatusOr<config::ExplicitSettings> settings = opts->Collect();
    if (!settings.ok()) {
      std::fprintf(stderr, "lucid synth: %s\n", settings.status().message().c_str());
      *exit_code = 2;
      return;
    }
    SynthOptions o;
    o.arch = settings->String("arch");
    o.preset = settings->String("preset");
    o.out_dir = settings->String("out");
    o.quant = settings->String("quant");
    o.seed = static_cast<uint64_t>(settings->Int("seed"));
    auto s = Synthesize(o);
    if (!s.ok()) {
      std::fprintf(stderr, "lucid synth: %s\n", s.status().message().c_str());
      *exit_code = ExitCodeFor(s.status());
      return;
    }
    std::printf("wrote %s: %s preset %s, %.3f G params, %.2f GB in %lld tensors, %lld shards\n",
                o.out_dir.c_str(), o.arch.c_str(), o.preset.c_str(), s->params / 1e9,
                s->bytes / 1e9, static_cast<long long>(s->tensors),
                static_cast<long long>(s->shards));
  });
}

}  // namespace lucid::cli
