#include "server/prometheus.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "server/server_metrics.h"

namespace lucid::server {
namespace {

TEST(PrometheusWriter, CountersAndGaugesWithEscapedLabels) {
  PrometheusWriter w;
  w.Counter("x_total", "Things.\nSecond line \\ here.", {{{{"a", "q\"u\\o\nte"}}, 3}});
  w.Gauge("g", "A gauge.", 2.5);
  EXPECT_EQ(w.text(),
            "# HELP x_total Things.\\nSecond line \\\\ here.\n"
            "# TYPE x_total counter\n"
            "x_total{a=\"q\\\"u\\\\o\\nte\"} 3\n"
            "# HELP g A gauge.\n"
            "# TYPE g gauge\n"
            "g 2.5\n");
}

TEST(PrometheusWriter, NumberFormats) {
  EXPECT_EQ(PrometheusWriter::FormatValue(0), "0");
  EXPECT_EQ(PrometheusWriter::FormatValue(12345678901.0), "12345678901");
  EXPECT_EQ(PrometheusWriter::FormatValue(0.005), "0.005");
  EXPECT_EQ(PrometheusWriter::FormatValue(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(PrometheusWriter::FormatValue(1.0 / 0.0), "+Inf");
  EXPECT_EQ(PrometheusWriter::FormatValue(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(PrometheusWriter::FormatValue(0.0 / 0.0), "NaN");
}

TEST(Histogram, CumulativeBucketsSumAndCount) {
  Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 5.0, 50.0}) h.Observe(v);
  HistogramSnapshot s = h.Snapshot();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{2, 3, 4, 5}));  // le is inclusive
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.sum, 55.65);
  PrometheusWriter w;
  w.HistogramFamily("lat_seconds", "Latency.", s);
  EXPECT_EQ(w.text(), std::string("# HELP lat_seconds Latency.\n"
                                  "# TYPE lat_seconds histogram\n"
                                  "lat_seconds_bucket{le=\"0.1\"} 2\n"
                                  "lat_seconds_bucket{le=\"1\"} 3\n"
                                  "lat_seconds_bucket{le=\"10\"} 4\n"
                                  "lat_seconds_bucket{le=\"+Inf\"} 5\n"
                                  "lat_seconds_sum ") +
                          PrometheusWriter::FormatValue(s.sum) + "\n" + "lat_seconds_count 5\n");
}

TEST(Histogram, ConcurrentObserversLoseNothing) {
  Histogram h(Histogram::ExponentialBounds(0.001, 2, 10));
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) h.Observe(0.01);
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(h.Snapshot().count, 40000u);
}

// Every line of the exposition is a comment or `name{labels} value` (a minimal text-format
// check), and the families the issue asks for are present.
TEST(ServerMetrics, RendersEveryFamilyInTextFormat) {
  ServerMetrics m;
  m.CountRequest("/v1/completions", 200);
  m.CountRequest("/v1/completions", 400);
  m.CountRequest("/v1/completions", 200);
  m.ObserveTtft(0.02);
  m.ObserveInterToken(0.001);
  m.ObserveE2e(0.5);
  EngineStats st;
  st.pages_total = 10;
  st.pages_used = 3;
  st.pages_cached = 2;
  st.prefix_hit_tokens = 64;
  st.running = 1;
  st.queued = 2;
  st.cpu_team_threads = 3;
  st.cpu_team_lowerings = 4;
  const std::string text = m.Render(&st, 3, true);
  for (const char* want :
       {"lucid_http_requests_total{route=\"/v1/completions\",status=\"200\"} 2\n",
        "lucid_http_requests_total{route=\"/v1/completions\",status=\"400\"} 1\n",
        "lucid_kv_pages_used 3\n", "lucid_kv_pages_free 5\n", "lucid_kv_pages_cached 2\n",
        "lucid_prefix_cache_hit_tokens_total 64\n", "lucid_num_requests_running 1\n",
        "lucid_num_requests_waiting 2\n", "lucid_time_to_first_token_seconds_count 1\n",
        "lucid_inter_token_latency_seconds_count 1\n",
        "lucid_e2e_request_latency_seconds_count 1\n", "lucid_prompt_tokens_total 0\n",
        "lucid_generation_tokens_total 0\n", "lucid_server_ready 1\n",
        "lucid_http_requests_in_flight 3\n", "lucid_cpu_team_threads 3\n",
        "lucid_cpu_team_lowerings_total 4\n"})
    EXPECT_NE(text.find(want), std::string::npos) << want;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    ASSERT_NE(nl, std::string::npos);
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) continue;
    const size_t sp = line.rfind(' ');
    ASSERT_NE(sp, std::string::npos) << line;
    const std::string value = line.substr(sp + 1);
    char* end = nullptr;
    std::strtod(value.c_str(), &end);
    EXPECT_TRUE(*end == 0 || value == "+Inf" || value == "NaN") << line;
    EXPECT_TRUE(std::isalpha(static_cast<unsigned char>(line[0])) || line[0] == '_') << line;
  }
  EXPECT_EQ(m.RequestCount("/v1/completions", 200), 2u);
}

}  // namespace
}  // namespace lucid::server
