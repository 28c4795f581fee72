// Safetensors reading (memory-mapped, zero-copy) and writing.
//
// File layout: u64 little-endian header length N, N bytes of UTF-8 JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data section; offsets are relative to the data section start (8 + N).
// Validation on open (every failure is a Status naming the file and, where relevant, the tensor):
// header length fits the file, JSON parses and is an object, every dtype is known, every shape is
// a list of non-negative integers, end - begin == numel x dtype size (bits/8 for packed fp4),
// spans lie inside the data section and do not overlap each other.
// Tensors handed out are views into the mapping; they keep the mapping alive (shared ownership),
// so a Tensor may outlive the SafetensorsFile/Checkpoint object.
// Status codes: NotFound for a missing file; DataLoss for anything corrupt or truncated (short
// file, header length, JSON syntax or types, duplicate keys, negative or overflowing shapes, span
// size, span past the end, overlap, bad __metadata__); Unimplemented for a dtype lucid does not
// know (the message lists the known ones); FailedPrecondition for a non-regular file or no access.
// The mapping is read-only (PROT_READ): writing through a Tensor from Get() faults. Data pointers
// are only as aligned as the file lays them out. Another process truncating a mapped file makes
// later reads fault (SIGBUS); that cannot be validated away.
// Packed F4 entries whose last dimension is odd (allowed by the format when the element count is
// even) open fine but Get() returns Unimplemented: lucid's Tensor needs an even last dimension.
// Thread-safety: after Open, all const methods are safe to call concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace lucid {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t data_begin = 0;  // relative to the data section
  uint64_t data_end = 0;
  std::string file;  // path of the file holding it
};

class SafetensorsFile {
 public:
  // Maps `path` read-only and validates the header (see file comment).
  static StatusOr<std::shared_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t file_size() const { return size_; }
  // A borrowed view of the named tensor; NotFound naming the file if absent.
  StatusOr<Tensor> Get(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  uint64_t size_ = 0;
  const uint8_t* base_ = nullptr;  // start of the mapping
  uint64_t data_start_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
  std::shared_ptr<const void> keepalive_;  // owns the mapping (munmap on release)
  friend struct SafetensorsFileAccess;
};

// A model directory's weights: `model.safetensors`, or the shards listed by
// `model.safetensors.index.json` ({"weight_map": {tensor: shard file}}), or, lacking both, every
// `*.safetensors` file in the directory. Validates that every shard exists and opens, that each
// tensor the index names is in its shard, and that no tensor name appears twice.
// With an index only the shards it names are opened, and every tensor in them is served (also one
// the index happens not to list). Missing shard: NotFound naming the shard and a tensor mapped to
// it; indexed tensor absent from its shard, or a name in two shards: DataLoss naming both.
class Checkpoint {
 public:
  static StatusOr<Checkpoint> Open(const std::string& dir);

  bool Has(const std::string& name) const { return index_.count(name) != 0; }
  std::vector<std::string> Names() const;  // sorted
  StatusOr<TensorInfo> Info(const std::string& name) const;
  // A borrowed view; NotFound naming the tensor and the directory if absent.
  StatusOr<Tensor> Get(const std::string& name) const;
  // As Get, and the shape must equal `shape`: otherwise InvalidArgument naming the tensor, its
  // file, the shape found and the shape expected.
  StatusOr<Tensor> GetWithShape(const std::string& name, const Shape& shape) const;
  uint64_t TotalTensorBytes() const;
  // Reads one byte of every page of every tensor, in Names() order, so that the weights are in
  // the page cache (read from disk now, not by a fault under the first request that needs them).
  // Calls progress(bytes done, tensors done) after each tensor when given. Returns Cancelled
  // between tensors once `*cancel` is true. The mapping is read-only: nothing is written.
  Status Prefetch(const std::atomic<bool>* cancel = nullptr,
                  const std::function<void(uint64_t, size_t)>& progress = {}) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<int, TensorInfo>> index_;  // name -> (file index, info)
};

// Writes `tensors` (contiguous) to `path` in safetensors format with optional string metadata.
// Writes to a temporary file in the same directory and renames it into place.
// Layout: compact JSON header ("__metadata__" first when non-empty, then the tensors in the given
// order), padded with spaces so that the data section starts at a multiple of 64 bytes of the
// file (so of 8, as the Python library pads), then the data packed without gaps: first the tensors
// whose size is a multiple of 64 bytes, then the others, each group in the given order. Every
// tensor of the first group (all large weights of real shapes) thus starts on a cache line in the
// mapping.
// Bad input (duplicate or reserved name, invalid or non-contiguous tensor, packed F4 with an odd
// element count, names/metadata not UTF-8) is InvalidArgument; I/O errors map errno (ENOENT ->
// NotFound, ...). On failure the temp file `path + ".tmp.<pid>"` is removed and `path` untouched.
Status WriteSafetensors(const std::string& path,
                        const std::vector<std::pair<std::string, Tensor>>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace lucid
