// CLI11 glue for the option table: the single source of server flags for every subcommand.
//
// Wiring a subcommand (serve, generate, explain):
//   auto opts = std::make_shared<config::CliOptions>();
//   opts->AddTo(cmd);                        // every table option + --config, grouped, with help
//   cmd->callback([opts] {
//     auto settings = opts->Collect();       // user:cli, then --config (user:file), then LUCID_*
//     if (!settings.ok()) { print settings.status().message(); exit 2; }
//     auto resolved = config::Resolve(*settings, {});   // config/resolver.h
//   });
// Values are taken as text and parsed by the table (ParseOptionValue), so errors are the same
// one-line messages whatever the source.
// Thread-safety: use from the parsing thread only.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <map>
#include <string>

#include "config/settings.h"

namespace lucid::config {

class CliOptions {
 public:
  // Adds `--<name>` (and `--<alias>`) for every option of the table, and `--config FILE`.
  // Options whose name is in `skip` are left out (a subcommand that has its own spelling).
  void AddTo(CLI::App* app, const std::vector<std::string>& skip = {});
  // The explicit settings after parsing: command line, then the --config file, then the
  // environment (LUCID_<NAME>, looked up through `getenv`).
  StatusOr<ExplicitSettings> Collect(const EnvLookup& getenv = &std::getenv) const;
  const std::string& config_path() const { return config_path_; }

 private:
  std::map<std::string, std::string> text_;  // option name -> value text as given
  std::map<std::string, CLI::Option*> options_;
  std::string config_path_;
};

// Makes CLI11 parse errors (unknown flag, missing value) print as one line, "lucid: <message>",
// like every other error of the command line. main.cpp should call it on the top-level app.
void UseOneLineErrors(CLI::App* app);

}  // namespace lucid::config
