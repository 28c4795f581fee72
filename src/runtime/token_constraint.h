// TokenConstraint: what a request may sample next, decided by a grammar (structured output:
// JSON schema, regex, EBNF). The runtime knows only this interface; src/grammar implements it over
// xgrammar. A constraint is immutable and shared (one per compiled grammar, cached by the server);
// each request gets its own TokenMatcher, which walks the grammar token by token.
// Engine contract (runtime/engine_core.cpp): before sampling, MaskLogits sets every token the
// grammar forbids to -inf; after sampling, Accept advances over the chosen token; once
// IsTerminated (the grammar accepted one of its stop tokens) the request finishes with "stop".
// The engine masks a step's rows together (MaskLogitsInParallel): each request's row by its own
// matcher, the requests spread over the kernels' threads. Where the logits are on a device it asks
// for the bitmasks instead (FillBitmasksInParallel) and masks there.
// Thread-safety: TokenConstraint is thread-safe (const); a TokenMatcher belongs to one thread at a
// time (the engine thread, or one worker of MaskLogitsInParallel or FillBitmasksInParallel);
// distinct matchers of one constraint may be used concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace lucid {

class TokenMatcher {
 public:
  virtual ~TokenMatcher() = default;
  // Sets logits[t] = -inf for every token t the grammar does not allow next. At least one token
  // stays allowed while !IsTerminated() (a stop token once the output is complete).
  virtual void MaskLogits(std::span<float> logits) = 0;
  // The tokens MaskLogits would leave over `columns` logits columns, as a bitmask: bit j % 32 of
  // words[j / 32] is 1 iff token j is allowed; bits at or past `columns` are 0 (words.size() ==
  // ceil(columns / 32)). The engine uploads it where the logits are (Ops::ApplyTokenBitmask).
  // Default: MaskLogits on a row of zeros.
  virtual void FillBitmask(std::span<int32_t> words, int64_t columns);
  // Advances over `token`; false (state unchanged) if the grammar does not allow it.
  virtual bool Accept(int32_t token) = 0;
  // True once a stop token was accepted: the output is complete and nothing may follow.
  virtual bool IsTerminated() const = 0;
};

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // A matcher at the grammar's start.
  virtual std::unique_ptr<TokenMatcher> NewMatcher() const = 0;
};

// One row of a step to mask: `matcher` masks `row` in place.
struct MaskJob {
  TokenMatcher* matcher = nullptr;
  std::span<float> row;
};

// Runs every job's MaskLogits, the jobs in parallel over lucid::ParallelFor's threads (inline when
// there is one job, or when called inside a parallel region). Each job's matcher and row must be
// distinct from the others'.
void MaskLogitsInParallel(std::span<const MaskJob> jobs);

// One row of a step whose bitmask to fill: `matcher` fills `words` for `columns` columns.
struct BitmaskJob {
  TokenMatcher* matcher = nullptr;
  std::span<int32_t> words;
  int64_t columns = 0;
};
// Runs every job's FillBitmask, in parallel as MaskLogitsInParallel does.
void FillBitmasksInParallel(std::span<const BitmaskJob> jobs);

}  // namespace lucid
