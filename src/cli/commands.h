// The table of lucid subcommands. Adding a subcommand: write cli/<name>_command.cpp defining
// Register<Name>Command and add one line to kCommands.
#pragma once

#include <CLI/CLI.hpp>

namespace lucid::cli {

using RegisterFn = void (*)(CLI::App& app, int* exit_code);

void RegisterGenerateCommand(CLI::App& app, int* exit_code);
void RegisterExplainCommand(CLI::App& app, int* exit_code);
void RegisterBackendsCommand(CLI::App& app, int* exit_code);
void RegisterSynthCommand(CLI::App& app, int* exit_code);
void RegisterBenchCommand(CLI::App& app, int* exit_code);
void RegisterServeCommand(CLI::App& app, int* exit_code);
void RegisterQuantizeCommand(CLI::App& app, int* exit_code);
void RegisterAlignCommand(CLI::App& app, int* exit_code);

inline constexpr RegisterFn kCommands[] = {
    &RegisterGenerateCommand, &RegisterExplainCommand, &RegisterBackendsCommand,
    &RegisterSynthCommand,    &RegisterBenchCommand,   &RegisterServeCommand,
    &RegisterQuantizeCommand, &RegisterAlignCommand,
};

}  // namespace lucid::cli
