#include "server/prometheus.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace lucid::server {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  std::sort(bounds_.begin(), bounds_.end());
}

void Histogram::Observe(double value) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[i];
  sum_ += value;
  ++count_;
}

HistogramSnapshot Histogram::Snapshot() const {
  HistogramSnapshot s;
  s.bounds = bounds_;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t acc = 0;
  for (uint64_t c : counts_) s.cumulative.push_back(acc += c);
  s.sum = sum_;
  s.count = count_;
  return s;
}

std::vector<double> Histogram::ExponentialBounds(double start, double factor, int count) {
  std::vector<double> b;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return b;
}

std::string PrometheusWriter::FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else  // the shortest form that reads back as the same double
    for (int p = 6; p <= 17; ++p) {
      std::snprintf(buf, sizeof buf, "%.*g", p, v);
      if (std::strtod(buf, nullptr) == v) break;
    }
  return buf;
}

std::string PrometheusWriter::EscapeLabelValue(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

void PrometheusWriter::Header(const std::string& name, const std::string& help, const char* type) {
  std::string h;
  for (char c : help) {  // HELP escapes backslash and newline only
    if (c == '\\')
      h += "\\\\";
    else if (c == '\n')
      h += "\\n";
    else
      h += c;
  }
  out_ += "# HELP " + name + " " + h + "\n# TYPE " + name + " " + type + "\n";
}

void PrometheusWriter::Sample(const std::string& name, const Labels& labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += "{";
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i) out_ += ",";
      out_ += labels[i].first + "=\"" + EscapeLabelValue(labels[i].second) + "\"";
    }
    out_ += "}";
  }
  out_ += " " + FormatValue(value) + "\n";
}

void PrometheusWriter::Counter(const std::string& name, const std::string& help,
                               const std::vector<std::pair<Labels, double>>& samples) {
  Header(name, help, "counter");
  for (const auto& [labels, v] : samples) Sample(name, labels, v);
}

void PrometheusWriter::Counter(const std::string& name, const std::string& help, double value) {
  Counter(name, help, {{Labels{}, value}});
}

void PrometheusWriter::Gauge(const std::string& name, const std::string& help,
                             const std::vector<std::pair<Labels, double>>& samples) {
  Header(name, help, "gauge");
  for (const auto& [labels, v] : samples) Sample(name, labels, v);
}

void PrometheusWriter::Gauge(const std::string& name, const std::string& help, double value) {
  Gauge(name, help, {{Labels{}, value}});
}

void PrometheusWriter::HistogramFamily(const std::string& name, const std::string& help,
                                       const HistogramSnapshot& h, const Labels& labels) {
  Header(name, help, "histogram");
  const auto with_le = [&](std::string le) {
    Labels l = labels;
    l.push_back({"le", std::move(le)});
    return l;
  };
  for (size_t i = 0; i < h.bounds.size(); ++i)
    Sample(name + "_bucket", with_le(FormatValue(h.bounds[i])), double(h.cumulative[i]));
  Sample(name + "_bucket", with_le("+Inf"), double(h.count));
  Sample(name + "_sum", labels, h.sum);
  Sample(name + "_count", labels, double(h.count));
}

}  // namespace lucid::server
