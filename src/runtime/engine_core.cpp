#include "runtime/engine_core.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/engine_request.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace lucid {

namespace {

// Context tokens given to the detokenizer: enough for leading-space handling.
constexpr size_t kDetokContext = 8;

Status Range(bool ok, const std::string& what) { return ok ? OkStatus() : InvalidArgument(what); }

std::string Positions(int64_t begin, int64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

}  // namespace

StatusOr<std::unique_ptr<EngineCore>> EngineCore::Create(
    std::unique_ptr<Model> model, std::shared_ptr<const tok::Tokenizer> tokenizer,
    const EngineOptions& options) {
  if (model == nullptr) return InvalidArgument("engine: no model");
  EngineOptions o = options;
  const int64_t max_pos = model->config().max_position_embeddings;
  if (o.context_length == 0) o.context_length = max_pos;
  if (o.page_size <= 0 || o.max_running_requests <= 0 || o.chunked_prefill_size <= 0 ||
      o.num_pages < 0 || o.context_length < 0)
    return InvalidArgument(
        "engine: page_size, max_running_requests and chunked_prefill_size must be positive, "
        "num_pages and context_length non-negative");
  if (o.context_length > max_pos)
    return InvalidArgument("engine: context_length " + std::to_string(o.context_length) +
                           " exceeds the model's max_position_embeddings " +
                           std::to_string(max_pos));
  if (o.num_pages == 0)  // the small fallback documented in EngineOptions
    o.num_pages = std::min<int64_t>(o.max_running_requests, 4) *
                  ((std::min<int64_t>(o.context_length, 8192) + o.page_size - 1) / o.page_size) *
                  std::max(o.kv_partitions, 1);
  if (o.kv_partitions < 1 || o.num_pages % o.kv_partitions != 0)
    return InvalidArgument("engine: num_pages " + std::to_string(o.num_pages) +
                           " must be a multiple of kv_partitions " +
                           std::to_string(o.kv_partitions));
  if (o.nan_check == EngineOptions::NanCheck::kLayers && !model->SetNumericsCheck(true))
    return Unimplemented("engine: --nan-check layers: this model has no per-op numerics check");
  StatusOr<KvStorage> kv = KvStorage::Make(model->kv_spec(), o.num_pages / o.kv_partitions,
                                           o.page_size, o.kv_dtype, model->kv_allocator());
  if (!kv.ok()) return kv.status().WithContext("engine");
  return std::unique_ptr<EngineCore>(
      new EngineCore(std::move(model), std::move(tokenizer), o, std::move(*kv)));
}

EngineCore::EngineCore(std::unique_ptr<Model> model,
                       std::shared_ptr<const tok::Tokenizer> tokenizer,
                       const EngineOptions& options, KvStorage kv)
    : model_(std::move(model)),
      tokenizer_(std::move(tokenizer)),
      options_(options),
      kv_(std::move(kv)),
      blocks_(options.num_pages, options.page_size, options.enable_prefix_cache,
              options.kv_partitions),
      scheduler_({options.max_running_requests, options.chunked_prefill_size}, blocks_),
      seed_source_(std::random_device{}()) {
  for (int64_t e : model_->config().eos_token_ids) eos_ids_.push_back(static_cast<int32_t>(e));
  stats_.pages_total = options.num_pages;
}

EngineCore::~EngineCore() = default;

Status EngineCore::Validate(const GenerationRequest& request) const {
  const SamplingParams& p = request.sampling;
  const int64_t vocab = model_->config().vocab_size;
  const int64_t prompt = static_cast<int64_t>(request.prompt.size());
  LUCID_RETURN_IF_ERROR(Range(prompt > 0, "prompt is empty"));
  for (int32_t id : request.prompt)
    LUCID_RETURN_IF_ERROR(Range(
        id >= 0 && id < vocab,
        "prompt token id " + std::to_string(id) + " outside [0, " + std::to_string(vocab) + ")"));
  for (int32_t id : p.stop_token_ids)
    LUCID_RETURN_IF_ERROR(Range(id >= 0 && id < vocab, "stop_token_ids: id " + std::to_string(id) +
                                                           " outside [0, " + std::to_string(vocab) +
                                                           ")"));
  LUCID_RETURN_IF_ERROR(Range(p.max_tokens >= 1, "max_tokens must be at least 1"));
  const int64_t total = prompt + p.max_tokens;
  LUCID_RETURN_IF_ERROR(Range(total <= options_.context_length,
                              "prompt (" + std::to_string(prompt) + " tokens) + max_tokens (" +
                                  std::to_string(p.max_tokens) + ") exceeds the context length " +
                                  std::to_string(options_.context_length)));
  const int64_t pages = (total + options_.page_size - 1) / options_.page_size;
  const int64_t pool = options_.num_pages / options_.kv_partitions;  // a sequence's partition
  LUCID_RETURN_IF_ERROR(Range(
      pages <= pool, "prompt + max_tokens needs " + std::to_string(pages) +
                         " KV pages; the pool has " + std::to_string(pool) +
                         (options_.kv_partitions > 1 ? " per data-parallel attention rank" : "")));
  LUCID_RETURN_IF_ERROR(
      Range(std::isfinite(p.temperature) && p.temperature >= 0, "temperature must be >= 0"));
  LUCID_RETURN_IF_ERROR(Range(p.top_p > 0 && p.top_p <= 1, "top_p must be in (0, 1]"));
  LUCID_RETURN_IF_ERROR(Range(p.top_k >= -1, "top_k must be >= -1 (-1 or 0: off)"));
  LUCID_RETURN_IF_ERROR(Range(p.min_p >= 0 && p.min_p <= 1, "min_p must be in [0, 1]"));
  LUCID_RETURN_IF_ERROR(Range(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0,
                              "repetition_penalty must be > 0"));
  LUCID_RETURN_IF_ERROR(Range(p.frequency_penalty >= -2 && p.frequency_penalty <= 2,
                              "frequency_penalty must be in [-2, 2]"));
  LUCID_RETURN_IF_ERROR(Range(p.presence_penalty >= -2 && p.presence_penalty <= 2,
                              "presence_penalty must be in [-2, 2]"));
  LUCID_RETURN_IF_ERROR(Range(p.logprobs >= -1 && p.logprobs <= kMaxTopLogprobs,
                              "logprobs must be in [-1, " + std::to_string(kMaxTopLogprobs) + "]"));
  for (const std::string& s : p.stop)
    LUCID_RETURN_IF_ERROR(Range(!s.empty(), "stop strings must not be empty"));
  for (const auto& [id, bias] : p.logit_bias)
    LUCID_RETURN_IF_ERROR(Range(
        id >= 0 && id < vocab && std::isfinite(bias),
        "logit_bias: id " + std::to_string(id) + " outside the vocabulary or a non-finite bias"));
  LUCID_RETURN_IF_ERROR(Range(p.min_tokens >= 0 && p.min_tokens <= p.max_tokens,
                              "min_tokens must be in [0, max_tokens]"));
  LUCID_RETURN_IF_ERROR(
      Range(request.prompt_logprobs >= -1 && request.prompt_logprobs <= kMaxTopLogprobs &&
                (request.prompt_logprobs < 0 ||
                 (request.prompt_logprobs_start >= 1 && request.prompt_logprobs_start <= prompt)),
            "prompt_logprobs must be in [-1, " + std::to_string(kMaxTopLogprobs) +
                "] with a start position in [1, prompt length]"));
  LUCID_RETURN_IF_ERROR(Range(p.stop.empty() || tokenizer_ != nullptr,
                              "stop strings need a tokenizer; this model has none"));
  return OkStatus();
}

void EngineCore::Add(uint64_t id, GenerationRequest request, Engine::Sink sink) {
  const uint64_t seed = request.sampling.seed ? *request.sampling.seed : seed_source_();
  if (request.sampling.top_k < 0) request.sampling.top_k = 0;
  auto r = std::unique_ptr<Request>(new Request{
      id,
      request.sampling,
      std::move(sink),
      RequestSampler(request.sampling, seed, request.prompt, model_->config().vocab_size),
      nullptr,
      StopStringFilter(request.sampling.stop),
      static_cast<int64_t>(request.prompt.size()),
      0,
      -1,
      1,
      {},
      nullptr,
      {},
      0});
  if (request.sampling.min_tokens > 0) {
    std::vector<int32_t> ids = request.sampling.stop_token_ids;
    if (!request.sampling.ignore_eos) ids.insert(ids.end(), eos_ids_.begin(), eos_ids_.end());
    r->sampler.SuppressUntilMinTokens(std::move(ids));
  }
  if (request.sampling.constraint) r->matcher = request.sampling.constraint->NewMatcher();
  if (request.prompt_logits)
    r->prompt_logits = Tensor::Zeros(DType::kF32, {r->prompt_tokens, model_->config().vocab_size});
  if (tokenizer_ != nullptr) {
    const size_t n = request.prompt.size(), k = std::min(n, kDetokContext);
    r->detok = std::make_unique<tok::IncrementalDetokenizer>(
        tokenizer_.get(), request.sampling.skip_special_tokens,
        std::span<const int32_t>(request.prompt.data() + n - k, k));
  }
  stats_.prompt_tokens += r->prompt_tokens;
  int64_t max_reuse = std::numeric_limits<int64_t>::max();
  if (request.prompt_logprobs >= 0) {
    r->prompt_lp_top = request.prompt_logprobs;
    r->prompt_lp_start = request.prompt_logprobs_start;
    max_reuse = request.prompt_logprobs_start - 1;  // the row of position start - 1 is needed
  }
  requests_.emplace(id, std::move(r));
  if (request.prompt_logits) max_reuse = 0;  // every prompt row's logits are wanted
  scheduler_.Add(id, std::move(request.prompt),
                 request.prompt_logits || request.prompt_logprobs >= 0, max_reuse);
}

void EngineCore::Finish(Request& r, RequestOutput& out, const std::string& reason, Status error) {
  out.finished = true;
  out.finish_reason = reason;
  out.error = std::move(error);
  if (reason == "error") {
    ++stats_.requests_error;
    if (out.error.message().rfind("numerics:", 0) == 0) ++stats_.requests_numeric_error;
  } else if (reason == "abort") {
    ++stats_.requests_aborted;
  } else {
    ++stats_.requests_ok;
  }
  const ScheduledSequence* s = scheduler_.Find(r.id);
  out.prompt_tokens = r.prompt_tokens;
  out.completion_tokens = r.generated;
  out.cached_tokens = s != nullptr ? std::max<int64_t>(0, s->cached_tokens) : 0;
  scheduler_.Finish(r.id);
  Engine::Sink sink = std::move(r.sink);
  requests_.erase(r.id);  // r is gone from here on
  sink(out);
}

bool EngineCore::Abort(uint64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  RequestOutput out;
  Finish(*it->second, out, "abort");
  return true;
}

void EngineCore::AbortAll() {
  std::vector<uint64_t> ids;
  for (const auto& [id, r] : requests_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (uint64_t id : ids) Abort(id);
}

void EngineCore::FailAll(const Status& error) {
  std::vector<uint64_t> ids;
  for (const auto& [id, r] : requests_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (uint64_t id : ids) Fail(id, error);
}

void EngineCore::Fail(uint64_t id, const Status& error) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  RequestOutput out;
  Finish(*it->second, out, "error", error);
}

void EngineCore::FailBatch(const StepPlan& plan, const Status& error) {
  std::vector<uint64_t> ids;
  for (const auto& c : plan.chunks) ids.push_back(c.seq->id);
  for (uint64_t id : ids) Fail(id, error);
}

namespace {

// First of `count` rows of `width` values holding a non-finite value, or -1.
int64_t FirstNonFiniteRow(const float* rows, int64_t count, int64_t width) {
  for (int64_t t = 0; t < count; ++t)
    for (int64_t v = 0; v < width; ++v)
      if (!std::isfinite(rows[t * width + v])) return t;
  return -1;
}

}  // namespace

Status EngineCore::CheckChunk(const ScheduledChunk& chunk, const ChunkLogits& logits,
                              const std::optional<NonFiniteSite>& site) const {
  const int64_t V = model_->config().vocab_size, D = model_->config().hidden_size;
  // kOff: the row about to be sampled (the last, when the chunk completes), or every logits row
  // of a request that uses them all. Else every row: its final hidden state (lm_head's input,
  // so a non-finite one means non-finite logits) and its logits where they were computed.
  int64_t bad_pos = -1;
  std::string what = "logits";
  if (options_.nan_check != EngineOptions::NanCheck::kOff && logits.hidden != nullptr) {
    const int64_t t = FirstNonFiniteRow(logits.hidden, chunk.count, D);
    if (t >= 0) {
      bad_pos = chunk.begin + t;
      what = "hidden state";
    }
  }
  if (bad_pos < 0) {
    const bool all_rows =
        options_.nan_check != EngineOptions::NanCheck::kOff || chunk.seq->every_row;
    const int64_t first = all_rows ? 0 : std::max<int64_t>(logits.count - 1, 0);
    int64_t t = -1;
    if (logits.nonfinite != nullptr) {
      for (int64_t j = first; j < logits.count && t < 0; ++j)
        if (logits.nonfinite[j] != 0) t = j - first;
    } else {
      t = FirstNonFiniteRow(logits.rows + first * V, logits.count - first, V);
    }
    if (t >= 0) bad_pos = logits.first_position + first + t;
  }
  if (bad_pos < 0 && !site) return OkStatus();
  const ScheduledSequence& s = *chunk.seq;
  const int64_t generated = static_cast<int64_t>(s.tokens.size()) - s.prompt_len;
  what = bad_pos >= 0 ? "non-finite " + what + " at position " + std::to_string(bad_pos)
                      : "non-finite value";
  std::string msg =
      "numerics: request " + std::to_string(s.id) + ": " + what + " while computing " +
      "positions " + Positions(chunk.begin, chunk.begin + chunk.count) + " (" +
      (generated == 0 ? std::string("prefill")
       : chunk.count == 1
           ? "decode after " + std::to_string(generated) + " generated tokens"
           : "recompute after preemption, " + std::to_string(generated) + " tokens generated") +
      ")";
  if (site) {
    msg += "; first non-finite output: layer " + std::to_string(site->layer) + ", op " + site->op;
  } else if (options_.nan_check != EngineOptions::NanCheck::kLayers) {
    msg += "; run with --nan-check layers to find the first layer and op that produced it";
  }
  return Internal(msg);
}

void EngineCore::Step() {
  if (!HasWork()) return;
  StepPlan plan = scheduler_.Schedule();
  if (plan.chunks.empty()) {
    // Cannot happen when every request fits the pool alone (Validate); never spin on it.
    if (scheduler_.running() == 0 && scheduler_.waiting() > 0)
      FailAll(ResourceExhausted("engine: no KV pages for any request"));
    return;
  }
  // lm_head runs for the rows that are sampled, and every row of a request that asked for prompt
  // logits. With the numerics check on, every row's final hidden state is checked too.
  const bool check_all = options_.nan_check != EngineOptions::NanCheck::kOff;
  // A model whose logits_backend() is a device keeps the logits there: every row is checked there
  // (one flag read back per row) and sampled there (a grammar's bitmask uploaded and applied
  // there), except the rows of the requests that need them on the host (NeedsHostLogits), which
  // alone are copied.
  Backend* dev = model_->logits_backend();
  const bool on_device = dev != nullptr;
  StepInput in;
  in.logits_on_device = on_device;
  std::vector<int64_t> first_logits(plan.chunks.size() + 1, 0);
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& c = plan.chunks[i];
    const ChunkRows want = c.seq->every_row ? ChunkRows::kAll
                           : c.completes()  ? ChunkRows::kLast
                                            : ChunkRows::kNone;
    AddSequence(
        in, c.seq->kv.page_table, c.begin,
        std::span<const int32_t>(c.seq->tokens.data() + c.begin, static_cast<size_t>(c.count)),
        want, check_all ? ChunkRows::kAll : ChunkRows::kNone);
    first_logits[i + 1] = static_cast<int64_t>(in.logits_rows.size());
  }
  StepOutput out;
  Status st = model_->Forward(in, kv_, &out);
  if (!st.ok()) return FailBatch(plan, st.WithContext("forward"));
  const int64_t V = model_->config().vocab_size;
  std::vector<int32_t> nonfinite;  // on_device: one flag per logits row
  // on_device: the host copy of the rows of the chunks that need them, and where each such
  // chunk's rows start in it (-1: none copied).
  Tensor host_rows;
  std::vector<int64_t> host_first(plan.chunks.size(), -1);
  if (on_device) {
    StatusOr<std::vector<int32_t>> flags = NonFiniteLogitRows(*dev, out.logits);
    if (!flags.ok()) return FailBatch(plan, flags.status().WithContext("numerics scan"));
    nonfinite = *std::move(flags);
    std::vector<int64_t> wanted;
    for (size_t i = 0; i < plan.chunks.size(); ++i) {
      if (!NeedsHostLogits(*requests_.at(plan.chunks[i].seq->id))) continue;
      host_first[i] = static_cast<int64_t>(wanted.size());
      for (int64_t r = first_logits[i]; r < first_logits[i + 1]; ++r) wanted.push_back(r);
    }
    StatusOr<Tensor> rows = HostLogitRows(*dev, out.logits, wanted);
    if (!rows.ok()) return FailBatch(plan, rows.status().WithContext("logits to host"));
    host_rows = *std::move(rows);
  }
  std::vector<std::pair<uint64_t, int64_t>> device_picks;  // on_device: request id, logits row
  std::vector<PromptLogprobJob> device_prompt_lps;         // on_device
  std::vector<std::optional<NonFiniteSite>> sites;
  if (options_.nan_check == EngineOptions::NanCheck::kLayers) sites = model_->LastNonFiniteSites();
  // Fail/Finish erase a chunk's own sequence only; the other chunks' sequences stay valid.
  std::vector<std::pair<uint64_t, float*>> to_sample;  // request id, its row to sample
  std::vector<MaskJob> masks;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& c = plan.chunks[i];
    ChunkLogits logits;
    if (!on_device)
      logits.rows = out.logits.data<float>() + first_logits[i] * V;
    else if (host_first[i] >= 0)
      logits.rows = host_rows.data<float>() + host_first[i] * V;
    if (on_device) logits.nonfinite = nonfinite.data() + first_logits[i];
    logits.count = first_logits[i + 1] - first_logits[i];
    logits.first_position = c.begin + c.count - logits.count;
    if (check_all)
      logits.hidden =
          out.hidden.data<const float>() + in.sequences[i].first_row * model_->config().hidden_size;
    const uint64_t id = c.seq->id;
    Status check = CheckChunk(c, logits, i < sites.size() ? sites[i] : std::nullopt);
    if (!check.ok()) {
      Fail(id, check);
      continue;
    }
    scheduler_.Commit(c);
    Request& r = *requests_.at(id);
    // Prompt logprobs from the host's rows, or where the logits are (until the first token; a
    // recompute after preemption needs none).
    if (logits.rows != nullptr && r.prompt_lp_top >= 0) CollectPromptLogprobs(r, c, logits);
    if (logits.rows == nullptr && r.prompt_lp_top >= 0 && r.generated == 0)
      for (const auto& [j, token] : DuePromptLogprobs(r, c, logits.first_position, logits.count))
        device_prompt_lps.push_back({id, first_logits[i] + j, token, r.prompt_lp_top});
    if (logits.rows != nullptr && r.prompt_logits.raw() != nullptr) KeepPromptLogits(r, logits);
    if (!c.completes()) continue;
    if (logits.rows == nullptr) {
      device_picks.emplace_back(id, first_logits[i + 1] - 1);
      continue;
    }
    float* row = logits.rows + (logits.count - 1) * V;
    to_sample.emplace_back(id, row);
    if (r.matcher) masks.push_back({r.matcher.get(), {row, static_cast<size_t>(V)}});
  }
  if (on_device) PromptLogprobsOnDevice(*dev, out.logits, device_prompt_lps);
  // Structured output: the sampled rows' grammar masks, filled and applied in parallel.
  MaskLogitsInParallel(masks);
  for (const auto& [id, row] : to_sample)
    if (auto it = requests_.find(id); it != requests_.end()) SampleAndEmit(*it->second, row);
  // Each request draws from its own counter-based stream, so the order of the two groups
  // changes no token.
  if (on_device) SampleOnDevice(*dev, out.logits, device_picks);
}

void EngineCore::KeepPromptLogits(Request& r, const ChunkLogits& logits) {
  const int64_t V = model_->config().vocab_size;
  // Rows arrive in position order; a recompute after preemption repeats rows already kept.
  for (int64_t t = 0; t < logits.count; ++t) {
    const int64_t pos = logits.first_position + t;
    if (pos != r.prompt_rows || pos >= r.prompt_tokens) continue;
    std::copy_n(logits.rows + t * V, V, r.prompt_logits.data<float>() + pos * V);
    ++r.prompt_rows;
  }
}

std::vector<std::pair<int64_t, int32_t>> EngineCore::DuePromptLogprobs(const Request& r,
                                                                       const ScheduledChunk& c,
                                                                       int64_t first_position,
                                                                       int64_t count) const {
  std::vector<std::pair<int64_t, int32_t>> due;
  int64_t next = r.prompt_lp_start + static_cast<int64_t>(r.prompt_lps.size());
  for (int64_t j = 0; j < count; ++j) {
    // Row j sees positions up to first_position + j and predicts the next one. A recomputation
    // after a preemption gives rows already taken: only the next wanted position is due.
    const int64_t target = first_position + j + 1;
    if (target >= r.prompt_tokens || target != next) continue;
    due.emplace_back(j, c.seq->tokens[target]);
    ++next;
  }
  return due;
}

void EngineCore::CollectPromptLogprobs(Request& r, const ScheduledChunk& c,
                                       const ChunkLogits& logits) {
  const int64_t V = model_->config().vocab_size;
  for (const auto& [j, token] : DuePromptLogprobs(r, c, logits.first_position, logits.count))
    r.prompt_lps.push_back(
        RawLogprobs({logits.rows + j * V, static_cast<size_t>(V)}, token, r.prompt_lp_top));
}

void EngineCore::SampleAndEmit(Request& r, float* logits_row) {
  const int64_t V = model_->config().vocab_size;
  TokenLogprob lp;
  std::span<float> row(logits_row, static_cast<size_t>(V));  // masked by Step when constrained
  const int32_t token = r.sampler.Sample(row, r.generated, &lp);
  Emit(r, token, std::move(lp));
}

void EngineCore::Emit(Request& r, int32_t token, TokenLogprob lp) {
  RequestOutput out;
  if (r.matcher && !r.matcher->Accept(token))
    return Fail(r.id, Internal("structured output: request " + std::to_string(r.id) +
                               ": the grammar refused token " + std::to_string(token) +
                               " after its own mask allowed it (step " +
                               std::to_string(r.generated) + ")"));
  scheduler_.Append(r.id, token);
  ++r.generated;
  ++stats_.generated_tokens;
  out.new_tokens.push_back(token);
  if (r.params.logprobs >= 0) out.logprobs.push_back(std::move(lp));
  if (r.generated == 1) out.prompt_logprobs = std::move(r.prompt_lps);
  if (r.generated == 1 && r.prompt_logits.raw() != nullptr) {
    out.prompt_logits = std::move(r.prompt_logits);
    r.prompt_logits = Tensor();  // handed out: no longer wanted (NeedsHostLogits)
  }
  const auto& stop_ids = r.params.stop_token_ids;
  const bool stop_token = (!r.params.ignore_eos &&
                           std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end()) ||
                          std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end() ||
                          (r.matcher && r.matcher->IsTerminated());
  std::string reason;
  if (stop_token) {
    reason = "stop";
    if (r.detok) out.text = r.stops.Push(r.detok->Finish());
    if (r.stops.stopped() && r.params.include_stop_str_in_output) out.text += r.stops.matched();
    out.text += r.stops.Flush();
  } else {
    if (r.detok) out.text = r.stops.Push(r.detok->Add(token));
    if (r.stops.stopped()) {
      reason = "stop";
      if (r.params.include_stop_str_in_output) out.text += r.stops.matched();
    } else if (r.generated >= r.params.max_tokens) {
      if (r.detok) out.text += r.stops.Push(r.detok->Finish());
      reason = r.stops.stopped() ? "stop" : "length";
      if (r.stops.stopped() && r.params.include_stop_str_in_output) out.text += r.stops.matched();
      out.text += r.stops.Flush();
    }
  }
  const ScheduledSequence* s = scheduler_.Find(r.id);
  out.prompt_tokens = r.prompt_tokens;
  out.completion_tokens = r.generated;
  out.cached_tokens = std::max<int64_t>(0, s->cached_tokens);
  if (!reason.empty()) return Finish(r, out, reason);
  r.sink(out);
}

EngineStats EngineCore::Stats() const {
  EngineStats s = stats_;
  s.running = scheduler_.running();
  s.queued = scheduler_.waiting();
  s.pages_total = blocks_.num_pages();
  s.pages_used = blocks_.used_pages();
  s.pages_cached = blocks_.cached_pages();
  s.preemptions = scheduler_.total_preemptions();
  s.prefix_cache_evictions = blocks_.evictions();
  s.prefix_hit_tokens = scheduler_.prefix_hit_tokens();
  return s;
}

}  // namespace lucid
