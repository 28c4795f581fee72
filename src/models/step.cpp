#include "models/step.h"

#include <string>

#include "core/status.h"

namespace lucid {

namespace {

void AddRows(ChunkRows which, int64_t first, int64_t n, std::vector<int64_t>& rows) {
  if (which == ChunkRows::kAll) {
    for (int64_t r = 0; r < n; ++r) rows.push_back(first + r);
  } else if (which == ChunkRows::kLast) {
    rows.push_back(first + n - 1);
  }
}

}  // namespace

void AddSequence(StepInput& in, std::span<const int32_t> page_table, int64_t kv_length,
                 std::span<const int32_t> tokens, ChunkRows logits, ChunkRows hidden) {
  LUCID_CHECK(!tokens.empty(), "AddSequence: a chunk needs at least one token");
  const int64_t first = in.num_rows(), n = static_cast<int64_t>(tokens.size());
  in.sequences.push_back({page_table, kv_length, first, n});
  for (int64_t r = 0; r < n; ++r) {
    in.tokens.push_back(tokens[r]);
    in.positions.push_back(kv_length + r);
  }
  AddRows(logits, first, n, in.logits_rows);
  AddRows(hidden, first, n, in.hidden_rows);
}

Status CheckRowList(std::span<const int64_t> rows, int64_t n, const char* what) {
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i] < 0 || rows[i] >= n || (i > 0 && rows[i] <= rows[i - 1]))
      return InvalidArgument(std::string("forward: ") + what +
                             " must be strictly ascending rows in [0, " + std::to_string(n) + ")");
  return OkStatus();
}

Status RunStep(const Ops& ops, const std::function<Status()>& step) {
  Status s = StatusOfAllocations(step);
  if (!s.ok()) (void)ops.Synchronize();
  return s;
}

}  // namespace lucid
