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

Status PrefetchWeights(const std::string& model_dir, const std::atomic<bool>* cancel,
                       std::chrono::seconds log_every) {
  LUCID_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::Open(model_dir));
  const std::vector<std::string> names = ckpt.Names();
  const uint64_t total = ckpt.TotalTensorBytes();
  const bool tty = isatty(STDERR_FILENO) == 1;
  const auto start = Clock::now();
  auto last = start;
  uint64_t done = 0;
  volatile uint8_t sink = 0;
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
  for (size_t i = 0; i < names.size(); ++i) {
    if (cancel && cancel->load())
      return Status(StatusCode::kCancelled, "interrupted while reading weights");
    LUCID_ASSIGN_OR_RETURN(Tensor t, ckpt.Get(names[i]));
    const uint8_t* p = static_cast<const uint8_t*>(t.raw());
    const uint64_t n = t.nbytes();
    for (uint64_t off = 0; off < n; off += 4096) sink = sink + p[off];
    done += n;
    const auto now = Clock::now();
    if (tty ? now - last >= std::chrono::milliseconds(200) : now - last >= log_every) {
      last = now;
      report(i + 1, false);
    }
  }
  report(names.size(), true);
  (void)sink;
  return OkStatus();
}

}  // namespace lucid::cli
