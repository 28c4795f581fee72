// `lucid align --model-path IN --out OUT`: writes a copy of a checkpoint whose weights start on
// 64-byte lines (formats/align_checkpoint.h), for checkpoints written with the header padded to
// 8 bytes only (most hub checkpoints), which the kernels read more slowly. Progress (a file count)
// goes to stderr when it is a terminal, as for `lucid quantize`.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "config/cli_options.h"
#include "formats/align_checkpoint.h"

namespace lucid::cli {

void RegisterAlignCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<config::CliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "align", "Write a copy of a checkpoint with every weight on a 64-byte line (faster reads)");
  opts->AddTo(cmd, config::kAlign);
  cmd->callback([opts, exit_code] {
    StatusOr<config::ExplicitSettings> settings = opts->Collect();
    Status bad = settings.status();
    if (bad.ok() && settings->String("model-path").empty())
      bad = InvalidArgument("--model-path is required");
    if (bad.ok() && settings->String("out").empty()) bad = InvalidArgument("--out is required");
    if (!bad.ok()) {
      std::fprintf(stderr, "lucid align: %s\n", bad.message().c_str());
      *exit_code = 2;
      return;
    }
    const std::string model_path = settings->String("model-path"), out = settings->String("out");
    const auto t0 = std::chrono::steady_clock::now();
    const bool tty = isatty(fileno(stderr)) != 0;
    auto r = AlignCheckpoint(
        model_path, out, [tty](size_t done, size_t total, const std::string& file) {
          if (!tty) return;
          std::fprintf(stderr, "\r\033[K[%zu/%zu] %s", done, total, file.c_str());
          if (done == total) std::fprintf(stderr, "\n");
        });
    if (!r.ok()) {
      std::fprintf(stderr, "lucid align: %s\n", r.status().message().c_str());
      *exit_code = ExitCodeFor(r.status());
      return;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("wrote %s: %zu safetensors files in %.1f s; %.3f GB of weights were off a line\n",
                out.c_str(), r->files, s, r->misaligned_before / 1e9);
  });
}

}  // namespace lucid::cli
