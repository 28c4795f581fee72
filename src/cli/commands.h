// The table of lucid subcommands. Adding a subcommand: write cli/<name>_command.cpp defining
// Register<Name>Command and add one line to kCommands.
#pragma once

#include <CLI/CLI.hpp>

#include "core/status.h"

namespace lucid::cli {

// The exit status for a failed command: 2 when the user's input was refused (a flag, a file, a
// model directory: InvalidArgument, NotFound, OutOfRange, FailedPrecondition, Unimplemented),
// 1 for internal failures (anything else).
inline int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kOutOfRange:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kUnimplemented:
      return 2;
    default:
      return 1;
  }
}

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
