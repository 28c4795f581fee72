// The engine over the tiny fixture models: continuous batching gives exactly the tokens each
// request gives alone; prefix caching, abort, preemption, sampling determinism, stop conditions.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "runtime/engine_test_util.h"
#include "tokenizer/tokenizer.h"

namespace lucid {
namespace {

using namespace testing_util;

EngineOptions SmallOptions() {
  EngineOptions o;
  o.page_size = 16;
  o.num_pages = 256;
  o.max_running_requests = 32;
  o.chunked_prefill_size = 64;  // forces chunked prefill mixed with decodes
  return o;
}

class EngineFamilyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineFamilyTest, ThirtyTwoConcurrentGreedyRequestsMatchRunningAlone) {
  auto ref = LoadTiny(GetParam());
  auto prompts = RandomPrompts(32, 1, 90, 11);
  std::vector<GenerationRequest> reqs;
  std::vector<std::vector<int32_t>> want;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t n = 8 + static_cast<int64_t>((i * 7) % 24);
    want.push_back(Alone(*ref, prompts[i], n));
    reqs.push_back(Greedy(prompts[i], n));
  }
  EngineOptions o = SmallOptions();
  o.chunked_prefill_size = 256;  // admits everyone within a few steps; long prompts still split
  auto core = MakeCore(LoadTiny(GetParam()), o);
  int64_t max_running = 0;
  auto got = RunToCompletion(*core, reqs, 100000, &max_running);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_GE(max_running, 24) << "most requests should be in flight together";
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ((*got)[i].tokens, want[i])
        << "request " << i << " (prompt " << prompts[i].size() << ")";
    EXPECT_EQ((*got)[i].finish_reason, "length");
    EXPECT_EQ((*got)[i].completion_tokens, static_cast<int64_t>(want[i].size()));
    EXPECT_EQ((*got)[i].events, static_cast<int64_t>(want[i].size()));
    EXPECT_TRUE((*got)[i].order_ok);
  }
  const EngineStats st = core->Stats();
  EXPECT_EQ(st.pages_used, 0);
  EXPECT_EQ(st.running + st.queued, 0);
  EXPECT_EQ(st.requests_ok, 32);
  EXPECT_EQ(st.preemptions, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineFamilyTest,
                         ::testing::Values("tiny_glm_moe_dsa", "tiny_deepseek_v32",
                                           "tiny_deepseek_v3"));

TEST(EngineTest, ThreadedEngineServesConcurrentSubmitters) {
  auto ref = LoadTiny("tiny_glm_moe_dsa");
  auto prompts = RandomPrompts(32, 1, 70, 23);
  auto engine = MakeEngine(LoadTiny("tiny_glm_moe_dsa"), nullptr, SmallOptions());
  std::vector<std::unique_ptr<ResultCollector>> results(prompts.size());
  std::vector<std::thread> submitters;
  for (int t = 0; t < 4; ++t)
    submitters.emplace_back([&, t] {
      for (size_t i = t; i < prompts.size(); i += 4) {
        results[i] = std::make_unique<ResultCollector>();
        auto id = engine->Submit(Greedy(prompts[i], 8), results[i]->sink());
        ASSERT_TRUE(id.ok()) << id.status().ToString();
      }
    });
  for (auto& s : submitters) s.join();
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(results[i]->Wait().tokens, Alone(*ref, prompts[i], 8)) << "request " << i;
  // Stats are published after the step that finished the last request.
  EngineStats st;
  for (int i = 0; i < 200 && (st = engine->Stats()).requests_ok < 32; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(st.requests_ok, 32);
  EXPECT_EQ(st.pages_used, 0);
  engine->Stop();
  EXPECT_EQ(engine->Submit(Greedy({5}, 1), [](const RequestOutput&) {}).status().code(),
            StatusCode::kUnavailable);
}

// The idle tick (tensor parallelism's heartbeat) runs on the engine thread while it has nothing to
// do, and requests are served as without it.
TEST(EngineTest, IdleTickRunsOnTheEngineThreadWhileIdle) {
  auto ref = LoadTiny("tiny_deepseek_v3");
  EngineOptions o = SmallOptions();
  std::mutex mu;
  std::condition_variable cv;
  int ticks = 0;
  std::thread::id tick_thread;
  o.idle_tick = [&] {
    std::lock_guard<std::mutex> lock(mu);
    ++ticks;
    tick_thread = std::this_thread::get_id();
    cv.notify_all();
  };
  o.idle_tick_every = std::chrono::milliseconds(5);
  auto engine = MakeEngine(LoadTiny("tiny_deepseek_v3"), nullptr, o);
  auto wait_ticks = [&](int n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(30), [&] { return ticks >= n; });
  };
  ASSERT_TRUE(wait_ticks(2));
  std::thread::id sink_thread;
  ResultCollector c;
  auto sink = c.sink();
  ASSERT_TRUE(engine
                  ->Submit(Greedy({3, 4, 5}, 6),
                           [&, sink](const RequestOutput& out) {
                             sink_thread = std::this_thread::get_id();
                             sink(out);
                           })
                  .ok());
  EXPECT_EQ(c.Wait().tokens, Alone(*ref, {3, 4, 5}, 6));
  int before = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    before = ticks;
    EXPECT_EQ(tick_thread, sink_thread);
  }
  EXPECT_TRUE(wait_ticks(before + 2));  // idle again: ticking again
  engine->Stop();
}

TEST(EngineTest, SharedPrefixHitsTheCacheAndGivesIdenticalOutputs) {
  auto ref = LoadTiny("tiny_glm_moe_dsa");
  auto core = MakeCore(LoadTiny("tiny_glm_moe_dsa"), SmallOptions());
  const auto system = RandomPrompts(1, 40, 40, 5)[0];  // 2 full pages of 16 + 8
  auto suffixes = RandomPrompts(8, 1, 20, 6);
  // Turn 1 warms the cache.
  auto first = RunToCompletion(*core, {Greedy(system, 6)});
  ASSERT_TRUE(first.ok());
  EXPECT_EQ((*first)[0].cached_tokens, 0);
  std::vector<GenerationRequest> reqs;
  std::vector<std::vector<int32_t>> prompts;
  for (auto& s : suffixes) {
    std::vector<int32_t> p = system;
    p.insert(p.end(), s.begin(), s.end());
    prompts.push_back(p);
    reqs.push_back(Greedy(p, 6));
  }
  // Multi-turn: the previous turn's prompt + answer + a new message reuses pages that hold
  // generated tokens too.
  std::vector<int32_t> turn2 = system;
  turn2.insert(turn2.end(), (*first)[0].tokens.begin(), (*first)[0].tokens.end());
  for (int i = 0; i < 10; ++i) turn2.push_back(7 + i);
  prompts.push_back(turn2);
  reqs.push_back(Greedy(turn2, 6));
  auto got = RunToCompletion(*core, reqs);
  ASSERT_TRUE(got.ok());
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ((*got)[i].tokens, Alone(*ref, prompts[i], 6)) << "request " << i;
    EXPECT_GE((*got)[i].cached_tokens, 32) << "request " << i;
  }
  EXPECT_EQ(got->back().cached_tokens, 32);  // 46 tokens computed in turn 1: 2 full pages
  EXPECT_GE(core->Stats().prefix_hit_tokens, 32 * 9);
  EXPECT_EQ(core->Stats().pages_used, 0);
  EXPECT_GT(core->Stats().pages_cached, 0);
}

TEST(EngineTest, AWholePromptInTheCacheStillComputesItsLastToken) {
  auto ref = LoadTiny("tiny_deepseek_v3");
  auto core = MakeCore(LoadTiny("tiny_deepseek_v3"), SmallOptions());
  const auto p = RandomPrompts(1, 48, 48, 9)[0];  // exactly 3 pages
  auto a = RunToCompletion(*core, {Greedy(p, 4)});
  auto b = RunToCompletion(*core, {Greedy(p, 4)});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*b)[0].cached_tokens, 32);  // the last page is recomputed for the last logits
  EXPECT_EQ((*a)[0].tokens, Alone(*ref, p, 4));
  EXPECT_EQ((*b)[0].tokens, (*a)[0].tokens);
}

TEST(EngineTest, AbortFreesTheRequestsPages) {
  auto core = MakeCore(LoadTiny("tiny_glm_moe_dsa"), SmallOptions());
  ResultCollector a, b;
  core->Add(1, Greedy(RandomPrompts(1, 40, 40, 1)[0], 100), a.sink());
  core->Add(2, Greedy(RandomPrompts(1, 20, 20, 2)[0], 5), b.sink());
  for (int i = 0; i < 3; ++i) core->Step();
  EXPECT_EQ(core->blocks().used_pages(), 3 + 2);
  EXPECT_TRUE(core->Abort(1));
  EXPECT_FALSE(core->Abort(1));
  EXPECT_TRUE(a.finished());
  EXPECT_EQ(a.Wait().finish_reason, "abort");
  EXPECT_EQ(core->blocks().used_pages(), 2);
  while (core->HasWork()) core->Step();
  EXPECT_EQ(b.Wait().tokens.size(), 5u);
  EXPECT_EQ(core->blocks().used_pages(), 0);
  EXPECT_EQ(core->Stats().requests_aborted, 1);
}

TEST(EngineTest, ThreadedAbortDeliversAFinalEventAndFreesPages) {
  auto engine = MakeEngine(LoadTiny("tiny_glm_moe_dsa"), nullptr, SmallOptions());
  ResultCollector c;
  auto id = engine->Submit(Greedy(RandomPrompts(1, 30, 30, 3)[0], 400), c.sink());
  ASSERT_TRUE(id.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  engine->Abort(*id);
  GenerationResult r = c.Wait();
  EXPECT_EQ(r.finish_reason, "abort");
  EXPECT_LT(r.tokens.size(), 400u);
  EngineStats st;
  for (int i = 0; i < 200 && (st = engine->Stats()).requests_aborted < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(st.requests_aborted, 1);
  EXPECT_EQ(st.pages_used, 0);
}

TEST(EngineTest, StopAbortsRequestsInFlight) {
  auto engine = MakeEngine(LoadTiny("tiny_glm_moe_dsa"), nullptr, SmallOptions());
  ResultCollector c;
  ASSERT_TRUE(engine->Submit(Greedy({3, 4, 5}, 400), c.sink()).ok());
  engine->Stop();
  EXPECT_EQ(c.Wait().finish_reason, "abort");
}

TEST(EngineTest, PreemptionUnderATinyPoolCompletesEveryRequestCorrectly) {
  auto ref = LoadTiny("tiny_glm_moe_dsa");
  EngineOptions o = SmallOptions();
  o.page_size = 4;
  o.num_pages = 20;  // 80 token slots for 12 requests of up to 70 tokens
  o.chunked_prefill_size = 32;
  auto prompts = RandomPrompts(12, 10, 50, 17);
  std::vector<GenerationRequest> reqs;
  for (auto& p : prompts) reqs.push_back(Greedy(p, 20));
  auto core = MakeCore(LoadTiny("tiny_glm_moe_dsa"), o);
  auto got = RunToCompletion(*core, reqs);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ((*got)[i].tokens, Alone(*ref, prompts[i], 20)) << "request " << i;
  EXPECT_GT(core->Stats().preemptions, 0);
  EXPECT_EQ(core->Stats().pages_used, 0);
}

TEST(EngineTest, QuantizedKvPoolsBatchAndCacheLikeRunningAlone) {
  // bf16 / fp8 KV: batching, chunking and prefix reuse still give exactly the tokens of a lone
  // run over a pool of the same dtype (cached pages hold the same quantized bytes).
  auto ref = LoadTiny("tiny_glm_moe_dsa");
  const auto system = RandomPrompts(1, 36, 36, 41)[0];
  auto prompts = RandomPrompts(8, 1, 30, 42);
  for (auto& p : prompts) p.insert(p.begin(), system.begin(), system.end());
  for (KvDtype dt : {KvDtype::kBF16, KvDtype::kFp8E4M3}) {
    EngineOptions o = SmallOptions();
    o.kv_dtype = dt;
    auto core = MakeCore(LoadTiny("tiny_glm_moe_dsa"), o);
    std::vector<GenerationRequest> reqs;
    for (auto& p : prompts) reqs.push_back(Greedy(p, 8));
    ASSERT_TRUE(RunToCompletion(*core, {reqs[0]}).ok());  // warms the prefix cache
    auto got = RunToCompletion(*core, reqs);
    ASSERT_TRUE(got.ok());
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto alone = GreedyGenerate(*ref, prompts[i], 8, nullptr, 16, dt);
      ASSERT_TRUE(alone.ok());
      EXPECT_EQ((*got)[i].tokens, *alone) << KvDtypeName(dt) << " request " << i;
      EXPECT_GE((*got)[i].cached_tokens, 32) << KvDtypeName(dt) << " request " << i;
    }
  }
}

TEST(EngineTest, SeededSamplingDoesNotDependOnTheBatchOrOnPreemption) {
  auto make = [](uint64_t seed) {
    GenerationRequest r;
    r.prompt = RandomPrompts(1, 30, 30, 4)[0];
    r.sampling.temperature = 0.9f;
    r.sampling.top_p = 0.95f;
    r.sampling.top_k = 50;
    r.sampling.repetition_penalty = 1.1f;
    r.sampling.seed = seed;
    r.sampling.max_tokens = 24;
    r.sampling.ignore_eos = true;
    return r;
  };
  auto alone = RunToCompletion(*MakeCore(LoadTiny("tiny_glm_moe_dsa"), SmallOptions()), {make(42)});
  std::vector<GenerationRequest> crowd = {make(7)};
  for (auto& p : RandomPrompts(10, 5, 60, 8)) crowd.push_back(Greedy(p, 12));
  crowd.push_back(make(42));
  EngineOptions tiny = SmallOptions();
  tiny.page_size = 4;
  tiny.num_pages = 24;
  auto core = MakeCore(LoadTiny("tiny_glm_moe_dsa"), tiny);
  auto batched = RunToCompletion(*core, crowd);
  ASSERT_TRUE(alone.ok() && batched.ok());
  EXPECT_EQ(batched->back().tokens, (*alone)[0].tokens);
  EXPECT_NE((*batched)[0].tokens, (*alone)[0].tokens) << "a different seed should differ";
  EXPECT_GT(core->Stats().preemptions, 0);
}

TEST(EngineTest, StopTokenIdsAndMaxTokens) {
  auto ref = LoadTiny("tiny_deepseek_v32");
  const auto p = RandomPrompts(1, 20, 20, 12)[0];
  const auto full = Alone(*ref, p, 16);
  auto core = MakeCore(LoadTiny("tiny_deepseek_v32"), SmallOptions());
  GenerationRequest stop = Greedy(p, 16);
  stop.sampling.stop_token_ids = {full[5]};
  auto got = RunToCompletion(*core, {stop, Greedy(p, 3)});
  ASSERT_TRUE(got.ok());
  const size_t first = std::find(full.begin(), full.end(), full[5]) - full.begin();
  EXPECT_EQ((*got)[0].tokens, std::vector<int32_t>(full.begin(), full.begin() + first + 1));
  EXPECT_EQ((*got)[0].finish_reason, "stop");
  EXPECT_EQ((*got)[1].tokens, std::vector<int32_t>(full.begin(), full.begin() + 3));
  EXPECT_EQ((*got)[1].finish_reason, "length");
}

TEST(EngineTest, StopStringsAreMatchedOnTextAndNotEmitted) {
  auto tok = tok::Tokenizer::FromFile(std::string(LUCID_SOURCE_DIR) +
                                      "/tests/fixtures/tokenizers/gpt-2/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  std::shared_ptr<const tok::Tokenizer> t = std::move(tok).value();
  auto ref = LoadTiny("tiny_glm_moe_dsa");
  // Ids below 94 are single printable ASCII characters in GPT-2's vocabulary.
  const auto p = RandomPrompts(1, 12, 12, 3, 2, 94)[0];
  const auto full = Alone(*ref, p, 24);
  const std::string text = t->Decode(full, true);
  auto core = MakeCore(LoadTiny("tiny_glm_moe_dsa"), SmallOptions(), t);
  // A plain run: the streamed text is the decoded text.
  auto plain = RunToCompletion(*core, {Greedy(p, 24)});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)[0].text, text);
  // A stop string taken from the middle of the output (ASCII only, so it is a real substring).
  size_t at = std::string::npos;
  for (size_t i = text.size() / 3; i + 2 < text.size(); ++i)
    if (static_cast<unsigned char>(text[i]) < 128 &&
        static_cast<unsigned char>(text[i + 1]) < 128) {
      at = i;
      break;
    }
  ASSERT_NE(at, std::string::npos) << text;
  const std::string stop_str = text.substr(at, 2);
  GenerationRequest r = Greedy(p, 24);
  r.sampling.stop = {stop_str, "never-appears"};
  auto got = RunToCompletion(*core, {r});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)[0].finish_reason, "stop");
  EXPECT_EQ((*got)[0].text, text.substr(0, text.find(stop_str)));
  EXPECT_LT((*got)[0].tokens.size(), full.size());
}

TEST(EngineTest, LogprobsAreTheRawLogSoftmax) {
  auto ref = LoadTiny("tiny_glm_moe_dsa");
  const auto p = RandomPrompts(1, 10, 10, 2)[0];
  Tensor logits;
  ASSERT_TRUE(GreedyGenerate(*ref, p, 0, &logits).ok());
  const int64_t V = ref->config().vocab_size;
  const float* last = logits.data<float>() + (logits.size(0) - 1) * V;
  const TokenLogprob want = RawLogprobs({last, static_cast<size_t>(V)}, ArgMax(last, V), 3);
  auto core = MakeCore(LoadTiny("tiny_glm_moe_dsa"), SmallOptions());
  GenerationRequest r = Greedy(p, 2);
  r.sampling.logprobs = 3;
  auto got = RunToCompletion(*core, {r});
  ASSERT_TRUE(got.ok());
  ASSERT_EQ((*got)[0].logprobs.size(), 2u);
  const TokenLogprob& lp = (*got)[0].logprobs[0];
  EXPECT_EQ(lp.token, want.token);
  EXPECT_NEAR(lp.logprob, want.logprob, 1e-5);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, lp.token);  // greedy: the chosen token is the most likely
  EXPECT_LE(lp.top[1].second, lp.top[0].second);
}

TEST(EngineTest, PromptLogprobsAreTheRawLogSoftmaxOfEveryChunkRowEvenAfterACacheHit) {
  auto ref = LoadTiny("tiny_glm_moe_dsa");
  const auto p = RandomPrompts(1, 40, 40, 3)[0];
  const int64_t V = ref->config().vocab_size;
  KvStorage kv(ref->kv_spec(), 4, 16, KvDtype::kF32);
  SequenceKv seq = TestPages(16).New(static_cast<int64_t>(p.size()));
  Tensor logits;  // one forward over the whole prompt: row t predicts token t + 1
  ASSERT_TRUE(ForwardChunk(*ref, kv, seq, p, ChunkRows::kAll, &logits).ok());
  EngineOptions o = SmallOptions();
  o.chunked_prefill_size = 7;  // the prompt in several chunks
  auto core = MakeCore(LoadTiny("tiny_glm_moe_dsa"), o);
  ASSERT_TRUE(RunToCompletion(*core, {Greedy(p, 1)}).ok());  // caches the prompt's pages
  for (int64_t start : {1, 20}) {
    GenerationRequest r = Greedy(p, 2);
    r.prompt_logprobs = 2;
    r.prompt_logprobs_start = start;
    auto got = RunToCompletion(*core, {r});
    ASSERT_TRUE(got.ok());
    const auto& lps = (*got)[0].prompt_logprobs;
    ASSERT_EQ(lps.size(), p.size() - size_t(start)) << "start " << start;
    for (size_t k = 0; k < lps.size(); ++k) {
      const int64_t t = start + int64_t(k);
      const TokenLogprob want =
          RawLogprobs({logits.data<float>() + (t - 1) * V, static_cast<size_t>(V)}, p[t], 2);
      EXPECT_EQ(lps[k].token, p[t]);
      EXPECT_NEAR(lps[k].logprob, want.logprob, 1e-4) << "position " << t;
      ASSERT_EQ(lps[k].top.size(), 2u);
      EXPECT_EQ(lps[k].top[0].first, want.top[0].first);
    }
    // The cache still served what lies before start - 1 (whole pages of 16).
    EXPECT_EQ((*got)[0].cached_tokens, start == 20 ? 16 : 0);
  }
}

TEST(EngineTest, PromptLogitsAreEveryPromptRowInPositionOrder) {
  // A prompt in chunks of 16 whose leading pages a first request left in the prefix cache: the
  // prompt-logits request still computes (and returns) every row, equal to one unchunked forward.
  auto ref = LoadTiny("tiny_glm_moe_dsa");
  const auto p = RandomPrompts(1, 45, 45, 9)[0];
  const int64_t V = ref->config().vocab_size, P = static_cast<int64_t>(p.size());
  KvStorage kv(ref->kv_spec(), 4, 16, KvDtype::kF32);
  SequenceKv seq = TestPages(16).New(P);
  Tensor want;
  ASSERT_TRUE(ForwardChunk(*ref, kv, seq, p, ChunkRows::kAll, &want).ok());
  EngineOptions o = SmallOptions();
  o.chunked_prefill_size = 16;
  auto core = MakeCore(LoadTiny("tiny_glm_moe_dsa"), o);
  ASSERT_TRUE(RunToCompletion(*core, {Greedy(p, 1)}).ok());
  EXPECT_GT(core->Stats().pages_cached, 0);
  GenerationRequest r = Greedy(p, 3);
  r.prompt_logits = true;
  auto got = RunToCompletion(*core, {r});
  ASSERT_TRUE(got.ok());
  const GenerationResult& g = (*got)[0];
  EXPECT_EQ(g.cached_tokens, 0);
  ASSERT_EQ(g.prompt_logits.size(0), P);
  ASSERT_EQ(g.prompt_logits.size(1), V);
  double err = 0, scale = 0;
  for (int64_t i = 0; i < P * V; ++i) {
    err = std::max(err, double(std::abs(g.prompt_logits.data<float>()[i] - want.data<float>()[i])));
    scale = std::max(scale, double(std::abs(want.data<float>()[i])));
  }
  EXPECT_LE(err, 1e-5 * scale);
  // The first token was sampled from the last row.
  EXPECT_EQ(g.tokens[0], ArgMax(want.data<float>() + (P - 1) * V, V));
  // Without the flag: no rows.
  auto plain = RunToCompletion(*core, {Greedy(p, 1)});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)[0].prompt_logits.raw(), nullptr);
}

TEST(EngineTest, SubmitValidatesSynchronously) {
  auto engine = MakeEngine(LoadTiny("tiny_glm_moe_dsa"), nullptr, SmallOptions());
  auto sink = [](const RequestOutput&) { ADD_FAILURE() << "no event after a refused Submit"; };
  auto code = [&](GenerationRequest r) { return engine->Submit(r, sink).status().code(); };
  EXPECT_EQ(code(Greedy({}, 4)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Greedy({1, 256}, 4)), StatusCode::kInvalidArgument);  // vocab is 256
  EXPECT_EQ(code(Greedy({1, 2}, 0)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Greedy({1, 2}, 511)), StatusCode::kInvalidArgument);  // context 512
  GenerationRequest r = Greedy({1, 2}, 4);
  r.sampling.stop = {"x"};
  EXPECT_EQ(code(r), StatusCode::kInvalidArgument);  // no tokenizer
  r = Greedy({1, 2}, 4);
  r.sampling.top_p = 0;
  EXPECT_EQ(code(r), StatusCode::kInvalidArgument);
  r = Greedy({1, 2}, 4);
  r.sampling.logprobs = 21;
  EXPECT_EQ(code(r), StatusCode::kInvalidArgument);
  r = Greedy({1, 2}, 4);
  r.sampling.temperature = -1;
  EXPECT_EQ(code(r), StatusCode::kInvalidArgument);
  EngineOptions small = SmallOptions();
  small.num_pages = 2;
  auto core = MakeCore(LoadTiny("tiny_glm_moe_dsa"), small);
  EXPECT_EQ(core->Validate(Greedy(std::vector<int32_t>(30, 3), 3)).code(),
            StatusCode::kInvalidArgument)
      << "33 tokens need 3 pages of 16; the pool has 2";
}

TEST(EngineTest, CreateRefusesOptionsThatCannotWork) {
  EngineOptions o = SmallOptions();
  o.context_length = 100000;
  EXPECT_EQ(EngineCore::Create(LoadTiny("tiny_glm_moe_dsa"), nullptr, o).status().code(),
            StatusCode::kInvalidArgument);
  o = SmallOptions();
  o.chunked_prefill_size = 0;
  EXPECT_FALSE(CreateEngine(LoadTiny("tiny_glm_moe_dsa"), nullptr, o).ok());
}

}  // namespace
}  // namespace lucid
