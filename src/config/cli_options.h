// CLI11 glue for the option table: the single source of the flags of every subcommand.
//
// Wiring a subcommand (serve, generate, explain, ...):
//   auto opts = std::make_shared<config::CliOptions>();
//   opts->AddTo(cmd, config::kServe);        // the command's table options + --config, grouped
//   cmd->callback([opts] {
//     auto settings = opts->Collect();       // user:cli, then --config (user:file), then LUCID_*
//     if (!settings.ok()) { print settings.status().message(); exit 2; }
//     auto resolved = config::Resolve(*settings, {});   // config/resolver.h (plan options)
//     settings->Int("max-new-tokens");       // a tool's own argument, or its table default
//   });
// Values are taken as text and parsed by the table (ParseOptionValue), so errors are the same
// one-line messages whatever the source.
// Thread-safety: use from the parsing thread only.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <map>
#include <string>

#include "config/option_table.h"
#include "config/settings.h"

namespace lucid::config {

class CliOptions {
 public:
  // Adds `--<name>` (and `--<alias>`) for every option of the table that applies to `command`,
  // and `--config FILE`.
  void AddTo(CLI::App* app, Command command);
  // The explicit settings after parsing: command line, then the --config file, then the
  // environment (LUCID_<NAME>, looked up through `getenv`).
  StatusOr<ExplicitSettings> Collect(const EnvLookup& getenv = &std::getenv) const;
  const std::string& config_path() const { return config_path_; }
  // Whether boolean option `name` was given on the command line with a true value (for a
  // command that must know a flag such as --json even when Collect fails).
  bool GivenTrue(const std::string& name) const;

 private:
  Command command_ = kServe;
  std::map<std::string, std::string> text_;                // option name -> value text as given
  std::map<std::string, std::vector<std::string>> many_;  // repeatable options' values
  std::map<std::string, CLI::Option*> options_;
  std::string config_path_;
};

// Makes CLI11 parse errors (unknown flag, missing value) print as one line, "lucid: <message>",
// like every other error of the command line. main.cpp should call it on the top-level app.
void UseOneLineErrors(CLI::App* app);

}  // namespace lucid::config
