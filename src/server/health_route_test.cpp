// /health and /metrics tell the truth when most requests fail on non-finite values (issue 26,
// item 5): both stayed 200 while ~95% of requests failed. Over a FakeEngine.
#include <gtest/gtest.h>
#include <httplib.h>

#include "server/fake_engine_for_test.h"
#include "server/http_server.h"

namespace lucid::server {
namespace {

TEST(HealthRoute, DegradedWhileRequestsFailTheNumericsGuard) {
  FakeEngine engine(256, 1);
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  HttpServer server(o);
  ASSERT_TRUE(server.Start().ok());
  ServingModel m;
  m.name = "tiny";
  m.context_length = 64;
  m.vocab_size = 256;
  server.AttachEngine(&engine, m, nlohmann::json::object());
  server.SetPhase(Phase::kReady);
  httplib::Client c("127.0.0.1", server.port());
  c.set_connection_timeout(10, 0);
  c.set_read_timeout(10, 0);
  const auto complete = [&] {
    auto r = c.Post("/v1/completions", R"({"prompt": [5], "max_tokens": 2})", "application/json");
    return r ? r->status : -1;
  };
  ASSERT_EQ(complete(), 200);
  ASSERT_EQ(c.Get("/health")->status, 200);
  engine.FailWith("numerics: request 7: non-finite logits at position 3 while computing ...");
  for (int i = 0; i < 10; ++i) EXPECT_EQ(complete(), 500);
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 503) << h->body;
  const auto j = nlohmann::json::parse(h->body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << h->body;
  EXPECT_EQ(j["status"], "degraded");
  EXPECT_EQ(j["error"]["code"], "degraded");
  EXPECT_NE(j["error"]["message"].get<std::string>().find("10 of the last 10"), std::string::npos)
      << h->body;
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("lucid_request_failures_total{cause=\"numerics\"} 10"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("lucid_server_degraded 1"), std::string::npos);
  server.Stop();
  engine.Stop();
}

// A server whose tensor-parallel group lost a rank (Phase::kFailed, set by `lucid serve`): /health
// and generation answer 503 with the reason, /metrics still answers, and the phase is final.
TEST(HealthRoute, FailedIsUnhealthyAndFinal) {
  FakeEngine engine(256, 1);
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  HttpServer server(o);
  ASSERT_TRUE(server.Start().ok());
  ServingModel m;
  m.name = "tiny";
  m.context_length = 64;
  m.vocab_size = 256;
  server.AttachEngine(&engine, m, nlohmann::json::object());
  server.SetPhase(Phase::kReady);
  httplib::Client c("127.0.0.1", server.port());
  c.set_connection_timeout(10, 0);
  c.set_read_timeout(10, 0);
  ASSERT_EQ(c.Get("/health")->status, 200);
  server.SetPhase(Phase::kFailed, "rank 1 of the tensor-parallel group stopped answering");
  server.SetPhase(Phase::kReady);  // ignored: kFailed is final
  server.BeginShutdown();          // ignored too: the reason stays
  EXPECT_EQ(server.phase(), Phase::kFailed);
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 503) << h->body;
  const auto j = nlohmann::json::parse(h->body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << h->body;
  EXPECT_EQ(j["status"], "failed");
  EXPECT_NE(j["error"]["message"].get<std::string>().find("rank 1 of the tensor-parallel group"),
            std::string::npos)
      << h->body;
  auto r = c.Post("/v1/completions", R"({"prompt": [5], "max_tokens": 2})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_EQ(c.Get("/metrics")->status, 200);
  server.Stop();
  engine.Stop();
}

}  // namespace
}  // namespace lucid::server
