// `lucid explain [serve flags] [--target ...] [--json]`: resolves the configuration for a model
// directory (config.json is enough) and a target (local: this machine, with its GPUs in a CUDA
// build) without reading tensor data, and prints every
// setting with its provenance, the kernel chosen per family and phase with the refused
// alternatives, and the memory plan. Exit status 0 when the plan is valid, 2 with the error.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/local_gpus.h"
#include "config/cli_options.h"
#include "config/resolver.h"

namespace lucid::cli {

void RegisterExplainCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<config::CliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "explain",
      "Show what `serve` would do with these flags on a target, and why (no weights read)");
  opts->AddTo(cmd, config::kExplain);
  cmd->callback([opts, exit_code] {
    StatusOr<config::ExplicitSettings> settings = opts->Collect();
    StatusOr<config::ResolvedConfig> resolved =
        settings.ok() ? ResolveOnThisMachine(*settings)
                      : StatusOr<config::ResolvedConfig>(settings.status());
    // --json as given, even when another setting is malformed: the error is then JSON too.
    const bool json = settings.ok() ? settings->Bool("json") : opts->GivenTrue("json");
    if (!resolved.ok()) {
      const std::string& m = resolved.status().message();
      if (json) std::cout << nlohmann::json{{"valid", false}, {"error", m}}.dump(2) << "\n";
      std::cerr << "lucid explain: " << m << "\n";
      *exit_code = 2;
      return;
    }
    if (json)
      std::cout << resolved->ToJson().dump(2) << "\n";
    else
      std::cout << resolved->ToText();
    *exit_code = 0;
  });
}

}  // namespace lucid::cli
