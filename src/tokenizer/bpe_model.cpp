#include "tokenizer/bpe_model.h"

#include <cstdio>
#include <queue>

#include "tokenizer/utf8.h"

namespace lucid::tok {

using nlohmann::json;

namespace {

Status ParseMerge(const json& m, std::string* a, std::string* b) {
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    const size_t sp = s.find(' ');
    if (sp == std::string::npos) return InvalidArgument("merge '" + s + "' has no space");
    *a = s.substr(0, sp);
    *b = s.substr(sp + 1);
    if (b->find(' ') != std::string::npos) {
      return InvalidArgument("merge '" + s + "' has more than two parts");
    }
    return OkStatus();
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    *a = m[0].get<std::string>();
    *b = m[1].get<std::string>();
    return OkStatus();
  }
  return InvalidArgument("a merge must be \"a b\" or [\"a\", \"b\"]");
}

std::optional<std::string> OptString(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  return j[key].get<std::string>();
}

}  // namespace

StatusOr<BpeModel> BpeModel::Parse(const json& j) {
  if (j.value("type", "BPE") != "BPE") {
    return Unimplemented("model type '" + j.value("type", "") + "' is not supported (only BPE)");
  }
  if (j.contains("dropout") && !j["dropout"].is_null() && j["dropout"].get<double>() != 0.0) {
    return Unimplemented("BPE dropout is not supported");
  }
  BpeModel m;
  const json& vocab = j.at("vocab");
  if (!vocab.is_object()) return InvalidArgument("BPE vocab must be an object");
  int64_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id > (1 << 30)) return InvalidArgument("vocab id out of range: " + it.key());
    m.vocab_.emplace(it.key(), static_cast<int32_t>(id));
    max_id = std::max(max_id, id);
  }
  m.id_to_token_.resize(max_id + 1);
  m.has_id_.resize(max_id + 1);
  for (const auto& [tok, id] : m.vocab_) {
    m.id_to_token_[id] = tok;
    m.has_id_[id] = true;
  }
  m.unk_token_ = OptString(j, "unk_token");
  m.prefix_ = OptString(j, "continuing_subword_prefix").value_or("");
  m.suffix_ = OptString(j, "end_of_word_suffix").value_or("");
  m.fuse_unk_ = j.value("fuse_unk", false);
  m.byte_fallback_ = j.value("byte_fallback", false);
  m.ignore_merges_ = j.value("ignore_merges", false);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    m.byte_ids_[b] = m.Find(name).value_or(-1);
  }
  const json& merges = j.at("merges");
  m.merges_.reserve(merges.size());
  std::string a, b;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    LUCID_RETURN_IF_ERROR(ParseMerge(merges[rank], &a, &b));
    const auto ia = m.Find(a), ib = m.Find(b);
    if (!ia || !ib) return InvalidArgument("merge '" + a + " " + b + "' uses a token not in vocab");
    const std::string merged =
        a + (b.compare(0, m.prefix_.size(), m.prefix_) == 0 ? b.substr(m.prefix_.size()) : b);
    const auto inew = m.Find(merged);
    if (!inew) return InvalidArgument("merge result '" + merged + "' is not in vocab");
    m.merges_[PairKey(*ia, *ib)] = {static_cast<uint32_t>(rank), *inew};
  }
  return m;
}

std::optional<int32_t> BpeModel::Find(std::string_view s) const {
  auto it = vocab_.find(s);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const { return Find(token); }

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::Tokenize(std::string_view w, std::vector<int32_t>* out) const {
  if (w.empty()) return;
  if (ignore_merges_) {
    if (auto id = Find(w)) {
      out->push_back(*id);
      return;
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(w.size());
  const int32_t unk_id = unk_token_ ? Find(*unk_token_).value_or(-1) : -1;
  bool pending_unk = false;  // a fused unk waiting to be emitted
  std::string s;
  for (size_t i = 0; i < w.size();) {
    size_t len;
    DecodeUtf8(w, i, &len);
    const bool is_first = i == 0, is_last = i + len == w.size();
    s.assign(is_first ? "" : prefix_);
    s.append(w.substr(i, len));
    if (is_last) s += suffix_;
    i += len;
    if (auto id = Find(s)) {
      if (pending_unk) ids.push_back(unk_id);
      pending_unk = false;
      ids.push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : s) all = all && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        for (char c : s) ids.push_back(byte_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (unk_id >= 0) {
      if (pending_unk && !fuse_unk_) ids.push_back(unk_id);
      pending_unk = true;
    }
  }
  if (pending_unk) ids.push_back(unk_id);
  MergeAll(&ids);
  out->insert(out->end(), ids.begin(), ids.end());
}

void BpeModel::MergeAll(std::vector<int32_t>* ids) const {
  const int n = static_cast<int>(ids->size());
  if (n < 2) return;
  struct Sym {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Sym> sym(n);
  for (int k = 0; k < n; ++k) sym[k] = {(*ids)[k], k - 1, k + 1 < n ? k + 1 : -1, true};
  struct Cand {
    uint32_t rank;
    int pos;
    int32_t new_id;
    bool operator<(const Cand& o) const {  // max-heap: invert to pop lowest rank, then pos
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Cand> q;
  const auto push = [&](int pos) {
    const int nx = sym[pos].next;
    if (nx < 0) return;
    auto it = merges_.find(PairKey(sym[pos].id, sym[nx].id));
    if (it != merges_.end()) q.push({it->second.rank, pos, it->second.new_id});
  };
  for (int k = 0; k + 1 < n; ++k) push(k);
  while (!q.empty()) {
    const Cand top = q.top();
    q.pop();
    Sym& cur = sym[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    auto it = merges_.find(PairKey(cur.id, sym[cur.next].id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale entry
    Sym& right = sym[cur.next];
    cur.id = top.new_id;
    right.alive = false;
    cur.next = right.next;
    if (cur.next >= 0) sym[cur.next].prev = top.pos;
    if (cur.prev >= 0) push(cur.prev);
    push(top.pos);
  }
  ids->clear();
  for (int k = 0; k >= 0; k = sym[k].next) ids->push_back(sym[k].id);
}

}  // namespace lucid::tok
