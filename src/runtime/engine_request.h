// EngineCore::Request: a request in flight, as the engine core's files (engine_core.cpp,
// engine_device_sampling.cpp) see it. Internal to runtime/: include engine_core.h elsewhere.
#pragma once

#include <memory>
#include <vector>

#include "runtime/engine_core.h"
#include "runtime/token_constraint.h"
#include "tokenizer/incremental_detokenizer.h"

namespace lucid {

struct EngineCore::Request {
  uint64_t id = 0;
  SamplingParams params;
  Engine::Sink sink;
  RequestSampler sampler;
  std::unique_ptr<tok::IncrementalDetokenizer> detok;  // null without a tokenizer
  StopStringFilter stops;
  int64_t prompt_tokens = 0;
  int64_t generated = 0;
  // Prompt logprobs: k (-1: off), the first position, and what the computed rows gave so far.
  int32_t prompt_lp_top = -1;
  int64_t prompt_lp_start = 1;
  std::vector<TokenLogprob> prompt_lps;
  std::unique_ptr<TokenMatcher> matcher;  // structured output (null: unconstrained)
  // GenerationRequest::prompt_logits: [prompt_tokens, vocab] once requested, rows filled in
  // position order as the prompt's chunks are computed; handed out with the first event.
  Tensor prompt_logits;
  int64_t prompt_rows = 0;  // rows filled
};

}  // namespace lucid
