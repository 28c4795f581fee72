#include "runtime/tp_step.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace lucid {
namespace {

enum : int64_t { kStep = 0x5354, kStop = 0x5350, kPing = 0x5047 };

std::vector<int64_t> Encode(const StepInput& in, const KvStorage& kv) {
  std::vector<int64_t> m = {kv.num_pages(),
                            kv.page_size(),
                            static_cast<int64_t>(kv.dtype()),
                            in.num_rows(),
                            static_cast<int64_t>(in.sequences.size()),
                            static_cast<int64_t>(in.logits_rows.size()),
                            static_cast<int64_t>(in.hidden_rows.size())};
  m.insert(m.end(), in.tokens.begin(), in.tokens.end());
  m.insert(m.end(), in.positions.begin(), in.positions.end());
  for (const StepSequence& q : in.sequences) {
    m.insert(m.end(),
             {q.kv_length, q.first_row, q.rows, static_cast<int64_t>(q.page_table.size())});
    m.insert(m.end(), q.page_table.begin(), q.page_table.end());
  }
  m.insert(m.end(), in.logits_rows.begin(), in.logits_rows.end());
  m.insert(m.end(), in.hidden_rows.begin(), in.hidden_rows.end());
  return m;
}

// A received step: the StepInput and the page tables its spans borrow.
struct ReceivedStep {
  int64_t pages = 0, page_size = 0;
  KvDtype dtype = KvDtype::kF32;
  StepInput in;
  std::vector<std::vector<int32_t>> tables;
};

Status Decode(const std::vector<int64_t>& m, ReceivedStep* r) {
  size_t at = 0;
  auto next = [&](int64_t* v) -> Status {
    if (at >= m.size()) return Internal("tensor parallelism: a truncated step message");
    *v = m[at++];
    return OkStatus();
  };
  int64_t dtype = 0, n = 0, seqs = 0, nl = 0, nh = 0;
  for (int64_t* v : {&r->pages, &r->page_size, &dtype, &n, &seqs, &nl, &nh})
    LUCID_RETURN_IF_ERROR(next(v));
  r->dtype = static_cast<KvDtype>(dtype);
  r->in.tokens.resize(n);
  r->in.positions.resize(n);
  for (int64_t i = 0, v = 0; i < n; ++i) {
    LUCID_RETURN_IF_ERROR(next(&v));
    r->in.tokens[i] = static_cast<int32_t>(v);
  }
  for (int64_t i = 0; i < n; ++i) LUCID_RETURN_IF_ERROR(next(&r->in.positions[i]));
  r->tables.resize(seqs);
  r->in.sequences.resize(seqs);
  for (int64_t s = 0; s < seqs; ++s) {
    StepSequence& q = r->in.sequences[s];
    int64_t len = 0;
    for (int64_t* v : {&q.kv_length, &q.first_row, &q.rows, &len}) LUCID_RETURN_IF_ERROR(next(v));
    r->tables[s].resize(len);
    for (int64_t i = 0, v = 0; i < len; ++i) {
      LUCID_RETURN_IF_ERROR(next(&v));
      r->tables[s][i] = static_cast<int32_t>(v);
    }
    q.page_table = r->tables[s];
  }
  r->in.logits_rows.resize(nl);
  for (int64_t i = 0; i < nl; ++i) LUCID_RETURN_IF_ERROR(next(&r->in.logits_rows[i]));
  r->in.hidden_rows.resize(nh);
  for (int64_t i = 0; i < nh; ++i) LUCID_RETURN_IF_ERROR(next(&r->in.hidden_rows[i]));
  if (at != m.size()) return Internal("tensor parallelism: a step message with trailing words");
  return OkStatus();
}

}  // namespace

Status TpLeaderModel::Forward(const StepInput& in, KvStorage& kv, StepOutput* out) {
  std::vector<int64_t> m = Encode(in, kv);
  int64_t head[2] = {kStep, static_cast<int64_t>(m.size())};
  LUCID_RETURN_IF_ERROR(Note(comm_.Broadcast(head, sizeof(head), 0)));
  LUCID_RETURN_IF_ERROR(Note(comm_.Broadcast(m.data(), m.size() * sizeof(int64_t), 0)));
  return Note(local_.Forward(in, kv, out));
}

Status TpLeaderModel::Heartbeat() {
  // A broadcast from the root can complete before a dead peer is noticed (an eager send); the
  // barrier cannot.
  int64_t head[2] = {kPing, 0};
  LUCID_RETURN_IF_ERROR(Note(comm_.Broadcast(head, sizeof(head), 0)));
  return Note(comm_.Barrier());
}

Status TpLeaderModel::Stop() {
  int64_t head[2] = {kStop, 0};
  return Note(comm_.Broadcast(head, sizeof(head), 0));
}

Status TpLeaderModel::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

Status TpLeaderModel::Note(Status s) {
  if (s.code() == StatusCode::kUnavailable) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.ok()) failure_ = s;
  }
  return s;
}

Status RunTpWorker(Model& local, Communicator& comm) {
  std::unique_ptr<KvStorage> kv;
  for (;;) {
    int64_t head[2] = {0, 0};
    LUCID_RETURN_IF_ERROR(comm.Broadcast(head, sizeof(head), 0));
    if (head[0] == kStop) return OkStatus();
    if (head[0] == kPing) {
      LUCID_RETURN_IF_ERROR(comm.Barrier());
      continue;
    }
    if (head[0] != kStep || head[1] < 0)
      return Internal("tensor parallelism: rank " + std::to_string(comm.rank()) +
                      " received an unknown message from rank 0");
    std::vector<int64_t> m(head[1]);
    LUCID_RETURN_IF_ERROR(comm.Broadcast(m.data(), m.size() * sizeof(int64_t), 0));
    ReceivedStep r;
    LUCID_RETURN_IF_ERROR(Decode(m, &r));
    if (!kv || kv->num_pages() != r.pages || kv->page_size() != r.page_size ||
        kv->dtype() != r.dtype)
      kv = std::make_unique<KvStorage>(local.kv_spec(), r.pages, r.page_size, r.dtype,
                                       local.kv_allocator());
    StepOutput out;
    const Status s = local.Forward(r.in, *kv, &out);
    if (s.code() == StatusCode::kUnavailable) return s;
  }
}

namespace {

// The wire form of a RankReport (fixed size, so one all-gather carries every rank's).
struct RankRecord {
  int32_t tp, ep, exit_code, host_len, dp_attention, threads, cpus_len, unused;
  uint64_t weight_bytes;
  char host[64];
  char cpus[64];
};

// Copies at most sizeof(field) - 1 bytes of `text` into field; returns the length copied.
template <size_t N>
int32_t PutText(const std::string& text, char (&field)[N]) {
  const size_t n = std::min(text.size(), N - 1);
  std::memcpy(field, text.data(), n);
  return static_cast<int32_t>(n);
}

template <size_t N>
std::string GetText(const char (&field)[N], int32_t len) {
  return std::string(field, std::clamp<int32_t>(len, 0, N - 1));
}

}  // namespace

StatusOr<std::vector<RankReport>> ExchangeRankReports(Communicator& comm, RankReport mine) {
  RankRecord rec = {};
  rec.tp = mine.tp;
  rec.ep = mine.ep;
  rec.exit_code = mine.exit_code;
  rec.weight_bytes = mine.weight_bytes;
  rec.dp_attention = mine.dp_attention ? 1 : 0;
  rec.threads = mine.threads;
  rec.host_len = PutText(mine.host, rec.host);
  rec.cpus_len = PutText(mine.cpus, rec.cpus);
  std::vector<RankRecord> all(comm.size());
  LUCID_RETURN_IF_ERROR(comm.AllGather(&rec, all.data(), sizeof(RankRecord)));
  std::vector<RankReport> out(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    const RankRecord& a = all[r];
    out[r].rank = static_cast<int>(r);
    out[r].host = GetText(a.host, a.host_len);
    out[r].cpus = GetText(a.cpus, a.cpus_len);
    out[r].tp = a.tp;
    out[r].ep = a.ep;
    out[r].dp_attention = a.dp_attention != 0;
    out[r].threads = a.threads;
    out[r].weight_bytes = a.weight_bytes;
    out[r].exit_code = a.exit_code;
  }
  return out;
}

std::string DescribeRank(const RankReport& r, int world) {
  char mib[32];
  std::snprintf(mib, sizeof(mib), "%.2f", static_cast<double>(r.weight_bytes) / (1 << 20));
  std::string threads;
  if (r.threads > 0)
    threads = ", " + std::to_string(r.threads) + " kernel thread" + (r.threads > 1 ? "s" : "") +
              (r.cpus.empty() ? "" : " on cpus " + r.cpus);
  return "rank " + std::to_string(r.rank) + " of " + std::to_string(world) + " on " + r.host +
         ": tp " + std::to_string(r.tp) + ", ep " + std::to_string(r.ep) +
         (r.dp_attention ? ", dp-attention" : "") + ", " + mib + " MiB of weights (its shard)" +
         threads;
}

std::string AffinityCpuList() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) return "";
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &mask)) continue;
    int end = c;
    while (end + 1 < CPU_SETSIZE && CPU_ISSET(end + 1, &mask)) ++end;
    out += (out.empty() ? "" : ",") + std::to_string(c) +
           (end > c ? "-" + std::to_string(end) : std::string());
    c = end;
  }
  return out;
}

}  // namespace lucid
