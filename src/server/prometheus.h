// Prometheus text exposition format (version 0.0.4), written by hand: no client library.
//
// PrometheusWriter appends metric families: a `# HELP` and `# TYPE` line per family, then its
// samples. Label values are escaped (backslash, double quote, newline); numbers print as
// integers when integral, else with up to 17 significant digits; +Inf/-Inf/NaN as Prometheus
// spells them. Histograms emit cumulative `_bucket{le="..."}` samples ending with le="+Inf",
// then `_sum` and `_count`.
// Histogram is a fixed-bucket accumulator that many threads may Observe concurrently.
// Thread-safety: PrometheusWriter is single-threaded; Histogram is thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace lucid::server {

using Labels = std::vector<std::pair<std::string, std::string>>;

struct HistogramSnapshot {
  std::vector<double> bounds;        // upper bounds, increasing (the +Inf bucket is implicit)
  std::vector<uint64_t> cumulative;  // bounds.size() + 1 counts; the last is the total
  double sum = 0;
  uint64_t count = 0;
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  HistogramSnapshot Snapshot() const;

  // Exponential bounds: start, start*factor, ... (count values).
  static std::vector<double> ExponentialBounds(double start, double factor, int count);

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = above every bound
  double sum_ = 0;
  uint64_t count_ = 0;
};

class PrometheusWriter {
 public:
  // One family of counters (name should end in _total) or gauges, one sample per label set.
  void Counter(const std::string& name, const std::string& help,
               const std::vector<std::pair<Labels, double>>& samples);
  void Counter(const std::string& name, const std::string& help, double value);
  void Gauge(const std::string& name, const std::string& help,
             const std::vector<std::pair<Labels, double>>& samples);
  void Gauge(const std::string& name, const std::string& help, double value);
  // `labels` go on every sample (before "le" on the buckets).
  void HistogramFamily(const std::string& name, const std::string& help, const HistogramSnapshot& h,
                       const Labels& labels = {});

  const std::string& text() const { return out_; }

  static std::string FormatValue(double v);
  static std::string EscapeLabelValue(const std::string& v);

 private:
  void Header(const std::string& name, const std::string& help, const char* type);
  void Sample(const std::string& name, const Labels& labels, double value);
  std::string out_;
};

}  // namespace lucid::server
