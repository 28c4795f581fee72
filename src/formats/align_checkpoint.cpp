// See align_checkpoint.h.
#include "formats/align_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <utility>
#include <vector>

namespace lucid {
namespace fs = std::filesystem;

uint64_t MisalignedWeightBytes(const Checkpoint& ckpt) {
  uint64_t bytes = 0;
  for (const std::string& name : ckpt.Names()) {
    auto t = ckpt.Get(name);
    if (!t.ok()) continue;  // e.g. packed F4 with an odd last dimension: not a lucid weight
    const uint64_t n = t->nbytes();
    if (n > 0 && n % 64 == 0 && reinterpret_cast<uintptr_t>(t->raw()) % 64 != 0) bytes += n;
  }
  return bytes;
}

std::string MisalignedWeightsMessage(uint64_t bytes) {
  char size[32];
  if (bytes >= 1000000000)
    std::snprintf(size, sizeof size, "%.2f GB", static_cast<double>(bytes) / 1e9);
  else
    std::snprintf(size, sizeof size, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return std::string(size) +
         " of weights start off a 64-byte line of their files, which the CPU kernels read more "
         "slowly; `lucid align --model-path DIR --out OUT` writes a copy with every weight on a "
         "line";
}

namespace {

// The safetensors files of `dir`, sorted by name.
std::vector<fs::path> SafetensorsFiles(const std::string& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// Writes `in` again as `out`: its tensors in their data order, and its metadata.
Status RewriteFile(const fs::path& in, const fs::path& out) {
  LUCID_ASSIGN_OR_RETURN(std::shared_ptr<SafetensorsFile> f, SafetensorsFile::Open(in.string()));
  std::vector<const TensorInfo*> infos;
  for (const auto& [name, info] : f->tensors()) infos.push_back(&info);
  std::sort(infos.begin(), infos.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->data_begin < b->data_begin || (a->data_begin == b->data_begin && a->name < b->name);
  });
  std::vector<std::pair<std::string, Tensor>> tensors;
  tensors.reserve(infos.size());
  for (const TensorInfo* info : infos) {
    LUCID_ASSIGN_OR_RETURN(Tensor t, f->Get(info->name));
    tensors.emplace_back(info->name, t);
  }
  return WriteSafetensors(out.string(), tensors, f->metadata());
}

}  // namespace

StatusOr<AlignResult> AlignCheckpoint(
    const std::string& in_dir, const std::string& out_dir,
    const std::function<void(size_t, size_t, const std::string&)>& progress) {
  LUCID_ASSIGN_OR_RETURN(Checkpoint in, Checkpoint::Open(in_dir));
  std::error_code ec;
  if (fs::exists(out_dir, ec) && fs::equivalent(in_dir, out_dir, ec))
    return FailedPrecondition(out_dir + " is the input directory; align writes a copy");
  if (fs::exists(out_dir, ec) && !(fs::is_directory(out_dir, ec) && fs::is_empty(out_dir, ec)))
    return FailedPrecondition(out_dir + " exists and is not an empty directory");
  AlignResult r;
  r.misaligned_before = MisalignedWeightBytes(in);
  fs::create_directories(out_dir, ec);
  if (ec) return Internal("cannot create " + out_dir + ": " + ec.message());
  const std::vector<fs::path> files = SafetensorsFiles(in_dir);
  for (const fs::path& p : files) {
    LUCID_RETURN_IF_ERROR(RewriteFile(p, fs::path(out_dir) / p.filename()));
    ++r.files;
    if (progress) progress(r.files, files.size(), p.filename().string());
  }
  for (const auto& e : fs::directory_iterator(in_dir, ec)) {
    if (!e.is_regular_file() || e.path().extension() == ".safetensors") continue;
    fs::copy_file(e.path(), fs::path(out_dir) / e.path().filename(),
                  fs::copy_options::overwrite_existing, ec);
    if (ec) return Internal("cannot copy " + e.path().string() + ": " + ec.message());
  }
  if (ec) return Internal("cannot list " + in_dir + ": " + ec.message());
  return r;
}

}  // namespace lucid
