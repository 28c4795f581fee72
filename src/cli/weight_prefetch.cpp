#include "cli/weight_prefetch.h"

#include <unistd.h>

#include <cstdio>

#include "config/option_table.h"
#include "formats/safetensors.h"
#include "server/server_log.h"

namespace lucid::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::string Eta(double seconds) {
  if (seconds < 0 || seconds > 1e6) return "--";
  const int s = static_cast<int>(seconds + 0.5);
  char buf[32];
  if (s >= 60)
    std::snprintf(buf, sizeof buf, "%dm%02ds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ds", s);
  return buf;
}

}  // namespace

Status PrefetchWeights(const Checkpoint& ckpt, const std::atomic<bool>* cancel,
                       std::chrono::seconds log_every) {
  const std::vector<std::string> names = ckpt.Names();
  const uint64_t total = ckpt.TotalTensorBytes();
  const bool tty = isatty(STDERR_FILENO) == 1;
  const auto start = Clock::now();
  auto last = start;
  uint64_t done = 0;
  auto report = [&](size_t tensors, bool final) {
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    const double frac = total ? double(done) / double(total) : 1.0;
    const double eta = frac > 0 ? secs * (1 - frac) / frac : -1;
    const std::string what = config::FormatBytes(double(done)) + " / " +
                             config::FormatBytes(double(total)) + ", " + std::to_string(tensors) +
                             "/" + std::to_string(names.size()) + " tensors";
    if (tty) {
      const int width = 30, filled = static_cast<int>(frac * width);
      std::fprintf(stderr, "\rweights [%s%s] %3d%%  %s  ETA %s   ",
                   std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                   static_cast<int>(frac * 100), what.c_str(), final ? "0s" : Eta(eta).c_str());
      if (final) std::fprintf(stderr, "\n");
      std::fflush(stderr);
    } else {
      server::LogInfo("weights: " + std::to_string(static_cast<int>(frac * 100)) + "% (" + what +
                      ")" + (final ? "" : ", ETA " + Eta(eta)));
    }
  };
  LUCID_RETURN_IF_ERROR(ckpt.Prefetch(cancel, [&](uint64_t bytes, size_t tensors) {
    done = bytes;
    const auto now = Clock::now();
    if (tty ? now - last >= std::chrono::milliseconds(200) : now - last >= log_every) {
      last = now;
      report(tensors, false);
    }
  }));
  report(names.size(), true);
  return OkStatus();
}

}  // namespace lucid::cli
