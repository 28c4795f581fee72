#include "runtime/kv_block_manager.h"

#include <xxhash.h>

#include <algorithm>

namespace lucid {

KvBlockManager::KvBlockManager(int64_t num_pages, int64_t page_size, bool enable_prefix_cache,
                               int partitions)
    : page_size_(page_size),
      prefix_cache_(enable_prefix_cache),
      pages_(num_pages),
      parts_(std::max(partitions, 1)) {
  LUCID_CHECK(num_pages > 0 && page_size > 0, "KvBlockManager needs pages");
  LUCID_CHECK(partitions >= 1 && num_pages % partitions == 0,
              "KvBlockManager: pages must divide into the partitions");
  const int64_t per = num_pages / partitions;
  for (int k = 0; k < partitions; ++k) {
    auto& free = parts_[k].free;
    free.reserve(per);
    // Lowest ids handed out first (pop from the back).
    for (int64_t p = (k + 1) * per - 1; p >= k * per; --p) free.push_back(static_cast<int32_t>(p));
  }
}

int64_t KvBlockManager::free_pages() const {
  int64_t n = 0;
  for (const auto& part : parts_) n += static_cast<int64_t>(part.free.size());
  return n;
}

int64_t KvBlockManager::cached_pages() const {
  int64_t n = 0;
  for (const auto& part : parts_) n += static_cast<int64_t>(part.lru.size());
  return n;
}

int64_t KvBlockManager::available_pages(int32_t partition) const {
  const Partition& part = parts_.at(partition);
  return static_cast<int64_t>(part.free.size() + part.lru.size());
}

int32_t KvBlockManager::EmptiestPartition() const {
  int32_t best = 0;
  for (int32_t k = 1; k < partitions(); ++k)
    if (available_pages(k) > available_pages(best)) best = k;
  return best;
}

uint64_t KvBlockManager::ChainHash(uint64_t parent, std::span<const int32_t> page_tokens) {
  return XXH64(page_tokens.data(), page_tokens.size_bytes(), parent);
}

int64_t KvBlockManager::AcquirePrefix(std::span<const int32_t> tokens, int64_t max_tokens,
                                      SequenceKv& seq, PageChain& chain) {
  LUCID_CHECK(seq.page_table.empty() && seq.length == 0, "AcquirePrefix on a sequence with pages");
  chain.keys.clear();
  if (!prefix_cache_) return 0;
  const int64_t limit = std::min<int64_t>(max_tokens, static_cast<int64_t>(tokens.size()));
  uint64_t parent = kRootHash;
  for (int64_t begin = 0; begin + page_size_ <= limit; begin += page_size_) {
    const auto page_tokens = tokens.subspan(begin, page_size_);
    const uint64_t key = ChainHash(parent, page_tokens);
    auto it = by_key_.find(key);
    if (it == by_key_.end() || PartitionOf(it->second) != seq.partition) break;
    Page& p = pages_[it->second];
    if (p.parent != parent || !std::equal(p.tokens.begin(), p.tokens.end(), page_tokens.begin()))
      break;
    if (p.refs++ == 0) parts_[seq.partition].lru.erase(p.lru);
    seq.page_table.push_back(it->second);
    chain.keys.push_back(key);
    parent = key;
  }
  seq.length = static_cast<int64_t>(seq.page_table.size()) * page_size_;
  return seq.length;
}

int64_t KvBlockManager::PagesNeeded(const SequenceKv& seq, int64_t new_length) const {
  const int64_t need = (new_length + page_size_ - 1) / page_size_;
  return std::max<int64_t>(0, need - static_cast<int64_t>(seq.page_table.size()));
}

Status KvBlockManager::Grow(SequenceKv& seq, int64_t new_length) {
  const int64_t extra = PagesNeeded(seq, new_length);
  LUCID_CHECK(seq.partition >= 0 && seq.partition < partitions(), "Grow: no such KV partition");
  const int64_t available = available_pages(seq.partition);
  if (extra > available)
    return ResourceExhausted(
        "KV cache: need " + std::to_string(extra) + " more pages, " + std::to_string(available) +
        " available" +
        (partitions() > 1 ? " in partition " + std::to_string(seq.partition) : std::string()));
  for (int64_t i = 0; i < extra; ++i) {
    const int32_t page = TakePage(seq.partition);
    pages_[page].refs = 1;
    seq.page_table.push_back(page);
  }
  return OkStatus();
}

int32_t KvBlockManager::TakePage(int32_t partition) {
  Partition& part = parts_[partition];
  if (!part.free.empty()) {
    const int32_t page = part.free.back();
    part.free.pop_back();
    return page;
  }
  LUCID_CHECK(!part.lru.empty(), "TakePage with nothing available");
  const int32_t page = part.lru.front();
  part.lru.pop_front();
  Unregister(page);
  ++evictions_;
  return page;
}

void KvBlockManager::Unregister(int32_t page) {
  Page& p = pages_[page];
  if (!p.registered) return;
  auto it = by_key_.find(p.key);
  if (it != by_key_.end() && it->second == page) by_key_.erase(it);
  p.registered = false;
  p.tokens.clear();
}

void KvBlockManager::CommitFullPages(std::span<const int32_t> tokens, const SequenceKv& seq,
                                     PageChain& chain) {
  if (!prefix_cache_) return;
  const int64_t full =
      std::min<int64_t>(seq.length / page_size_, static_cast<int64_t>(seq.page_table.size()));
  LUCID_CHECK(static_cast<int64_t>(tokens.size()) >= full * page_size_, "tokens shorter than KV");
  for (int64_t i = static_cast<int64_t>(chain.keys.size()); i < full; ++i) {
    const uint64_t parent = i == 0 ? kRootHash : chain.keys[i - 1];
    const auto page_tokens = tokens.subspan(i * page_size_, page_size_);
    const uint64_t key = ChainHash(parent, page_tokens);
    chain.keys.push_back(key);
    const int32_t page = seq.page_table[i];
    Page& p = pages_[page];
    if (p.registered || by_key_.count(key) != 0) continue;  // shared, or computed twice
    p.registered = true;
    p.key = key;
    p.parent = parent;
    p.tokens.assign(page_tokens.begin(), page_tokens.end());
    by_key_.emplace(key, page);
  }
}

int64_t KvBlockManager::Truncate(SequenceKv& seq, PageChain& chain, int64_t new_length) {
  LUCID_CHECK(new_length >= 0 && new_length <= seq.length, "Truncate past the sequence's KV");
  int64_t keep = (new_length + page_size_ - 1) / page_size_;  // pages holding the kept tokens
  int64_t length = new_length;
  if (new_length % page_size_ != 0 && keep <= static_cast<int64_t>(seq.page_table.size())) {
    const Page& boundary = pages_[seq.page_table[keep - 1]];
    if (boundary.registered || boundary.refs > 1) {  // would be written again: not this one
      --keep;
      length = keep * page_size_;
    }
  }
  while (static_cast<int64_t>(seq.page_table.size()) > keep) {
    DropReference(seq.page_table.back());
    seq.page_table.pop_back();
  }
  if (static_cast<int64_t>(chain.keys.size()) > length / page_size_)
    chain.keys.resize(length / page_size_);
  seq.length = length;
  return length;
}

void KvBlockManager::DropReference(int32_t page) {
  Page& p = pages_[page];
  LUCID_CHECK(p.refs > 0, "releasing a page with no references");
  if (--p.refs > 0) return;
  Partition& part = parts_[PartitionOf(page)];
  if (p.registered) {
    p.lru = part.lru.insert(part.lru.end(), page);
  } else {
    part.free.push_back(page);
  }
}

void KvBlockManager::Release(SequenceKv& seq, PageChain& chain) {
  for (auto it = seq.page_table.rbegin(); it != seq.page_table.rend(); ++it) DropReference(*it);
  seq.page_table.clear();
  seq.length = 0;
  chain.keys.clear();
}

}  // namespace lucid
