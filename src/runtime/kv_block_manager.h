// KvBlockManager: which KV pages each sequence uses, with reference counts and a prefix cache.
//
// It deals in page ids only (KvStorage holds the bytes; a page is `page_size` token slots of every
// layer's MLA row and indexer key). Every page is in exactly one state:
//   free    : never written, or released without being cached; on the free list.
//   used    : ref_count > 0, in the page tables of ref_count sequences.
//   cached  : ref_count == 0 but registered in the prefix cache; on the LRU list, evictable.
// Prefix cache: a *full* page whose KV has been computed is keyed by ChainHash(parent, tokens),
// where parent is the key of the page before it in the sequence (kRootHash for the first page), so
// the key names the page's tokens and everything before them. A new sequence whose leading full
// pages match reuses them (ref_count + 1) and skips their prefill. A lookup verifies the page's
// stored tokens and parent key, so a hit needs a 64-bit collision of a whole chain to be wrong.
// Shared pages are never written: a sequence only writes positions >= its length, and shared pages
// are full. Eviction: when the free list is empty, Grow takes the least recently released cached
// page. Pages of a released sequence enter the LRU last page first, so a chain is evicted from its
// tail.
// Partitions (data-parallel attention, docs/PARALLEL.md): the pages are split into `partitions`
// equal ranges of consecutive ids, partition k holding [k * P, (k + 1) * P) where P is
// num_pages / partitions; partition k's KV lives on attention rank k. A sequence takes every page
// from its own partition (SequenceKv::partition): Grow takes and evicts only there, and a prefix
// is reused only while its cached pages are in that partition. One partition: the plain pool.
// Thread-safety: none; owned by the engine thread.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "models/kv_cache.h"

namespace lucid {

// The cache keys of a sequence's leading full pages (keys[i] is page i's), computed as pages fill.
struct PageChain {
  std::vector<uint64_t> keys;
};

class KvBlockManager {
 public:
  static constexpr uint64_t kRootHash = 0x6c75636964ULL;  // "lucid": the parent of a first page

  // num_pages must be a positive multiple of partitions (>= 1).
  KvBlockManager(int64_t num_pages, int64_t page_size, bool enable_prefix_cache,
                 int partitions = 1);

  int64_t page_size() const { return page_size_; }
  int64_t num_pages() const { return static_cast<int64_t>(pages_.size()); }
  int partitions() const { return static_cast<int>(parts_.size()); }
  int64_t pages_per_partition() const { return num_pages() / partitions(); }
  int32_t PartitionOf(int32_t page) const {
    return static_cast<int32_t>(page / pages_per_partition());
  }
  int64_t free_pages() const;
  int64_t cached_pages() const;
  int64_t used_pages() const { return num_pages() - free_pages() - cached_pages(); }
  // Pages Grow can hand out: free plus evictable cached ones (in every partition, or in one).
  int64_t available_pages() const { return free_pages() + cached_pages(); }
  int64_t available_pages(int32_t partition) const;
  // The partition a new sequence should take its pages from: the one with the most available
  // pages (the lowest such id on a tie).
  int32_t EmptiestPartition() const;
  int64_t ref_count(int32_t page) const { return pages_[page].refs; }
  // Cumulative: cached pages evicted to be reused.
  int64_t evictions() const { return evictions_; }

  // XXH64 of the page's token ids with `parent` as the seed.
  static uint64_t ChainHash(uint64_t parent, std::span<const int32_t> page_tokens);

  // For a sequence without pages: reuses the longest run of cached full pages that match the start
  // of `tokens`, covering at most `max_tokens` tokens (whole pages only). Each reused page gets a
  // reference and goes into seq.page_table; seq.length and chain are set to match. Returns the
  // number of tokens reused (0 with the prefix cache off).
  int64_t AcquirePrefix(std::span<const int32_t> tokens, int64_t max_tokens, SequenceKv& seq,
                        PageChain& chain);

  // Pages seq still needs so that positions [0, new_length) have one.
  int64_t PagesNeeded(const SequenceKv& seq, int64_t new_length) const;
  // Appends fresh pages to seq.page_table for positions [0, new_length), taking free pages first,
  // then evicting cached ones. ResourceExhausted if available_pages() is short (nothing taken).
  Status Grow(SequenceKv& seq, int64_t new_length);

  // Registers seq's full pages below seq.length that chain does not cover yet. `tokens` are the
  // sequence's tokens (at least seq.length). Call only once their KV is computed and checked. A
  // page whose key is already cached (another sequence computed the same prefix) stays unregistered
  // and is freed on release.
  void CommitFullPages(std::span<const int32_t> tokens, const SequenceKv& seq, PageChain& chain);

  // Rolls seq back to its first `new_length` tokens (0 <= new_length <= seq.length): the KV of
  // the tokens after them is dropped (rejected draft tokens, a failed step), pages wholly past
  // them are released as Release does, and chain forgets the pages that are no longer full. A
  // page that would stay partly filled but is registered or shared is released too (shared pages
  // are never written), so the length can come out lower, at that page's start: returns the new
  // seq.length, and the engine recomputes the tokens between it and new_length.
  int64_t Truncate(SequenceKv& seq, PageChain& chain, int64_t new_length);

  // Drops seq's references, last page first: a page whose count reaches 0 becomes cached if it is
  // registered, else free. Empties seq and chain.
  void Release(SequenceKv& seq, PageChain& chain);

 private:
  struct Page {
    int32_t refs = 0;
    bool registered = false;
    uint64_t key = 0, parent = 0;
    std::vector<int32_t> tokens;       // the page's token ids, when registered
    std::list<int32_t>::iterator lru;  // valid when cached
  };
  struct Partition {
    std::vector<int32_t> free;
    std::list<int32_t> lru;  // cached pages, least recently released first
  };
  // Takes one page off the partition's free list, or evicts its oldest cached page. Requires
  // available_pages(partition) > 0.
  int32_t TakePage(int32_t partition);
  void Unregister(int32_t page);
  // One reference fewer; at 0 the page becomes cached if registered, else free.
  void DropReference(int32_t page);

  int64_t page_size_;
  bool prefix_cache_;
  std::vector<Page> pages_;
  std::vector<Partition> parts_;
  std::unordered_map<uint64_t, int32_t> by_key_;
  int64_t evictions_ = 0;
};

}  // namespace lucid
