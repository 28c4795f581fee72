// lucid command-line entry point: a thin table of subcommands. Each subcommand lives in its own
// file as Register<Name>Command(CLI::App&, int* exit_code) and only parses, calls, and prints.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "cli/process_env.h"
#include "config/cli_options.h"

int main(int argc, char** argv) {
  lucid::cli::SetCommandLine(argc, argv);
  CLI::App app{"lucid: an inference server for DeepSeek-V3-family models (GLM-5, DeepSeek-V3.2)"};
  app.set_version_flag("--version", std::string("lucid ") + LUCID_VERSION);
  app.require_subcommand(1);
  lucid::config::UseOneLineErrors(&app);
  int exit_code = 0;
  for (const auto& reg : lucid::cli::kCommands) reg(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return exit_code;
}
