#include "cli/kernel_gate.h"

#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace lucid::cli {
namespace {

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

void AddOnce(std::vector<std::string>& v, const std::string& s) {
  if (!Contains(v, s)) v.push_back(s);
}

// A row is one of the plan's kernels when it is of the plan's op set and its format is one the
// plan uses (GGUF: every row of the op that runs the GGUF block types).
bool Required(const KernelResult& k, const GateInputs& in) {
  if (k.set != in.set) return false;
  if (k.op == "GgufWeights") return Contains(in.formats, "ggml");
  return Contains(in.formats, k.format);
}

std::string Hex(const std::string& build) {
  const size_t colon = build.find(':');
  return colon == std::string::npos ? build : build.substr(colon + 1);
}

// The record at `path` if it is a readable record of this build on this compute capability;
// otherwise why not (for the note).
StatusOr<SelfTestRecord> ReadMatching(const std::string& path, const GateInputs& in) {
  std::ifstream f(path);
  if (!f) return NotFound("no self-test record at " + path);
  nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return DataLoss(path + " is not JSON");
  StatusOr<SelfTestRecord> r = RecordFromJson(j);
  if (!r.ok()) return DataLoss(path + ": " + r.status().message());
  if (r->build != in.build || r->sm != in.sm)
    return DataLoss(path + " is of another binary or compute capability");
  return r;
}

}  // namespace

nlohmann::json RecordToJson(const SelfTestRecord& r) {
  nlohmann::json kernels = nlohmann::json::array();
  for (const KernelResult& k : r.kernels)
    kernels.push_back({{"set", k.set},
                       {"op", k.op},
                       {"format", k.format},
                       {"cases", k.cases},
                       {"worst", k.worst},
                       {"passed", k.passed},
                       {"failures", k.failures}});
  return {{"lucid_self_test", 1},
          {"build", r.build},
          {"device", r.device},
          {"sm", r.sm},
          {"ran_at", r.ran_at},
          {"kernels", kernels},
          {"not_implemented", r.not_implemented}};
}

StatusOr<SelfTestRecord> RecordFromJson(const nlohmann::json& j) {
  if (!j.is_object() || j.value("lucid_self_test", 0) != 1)
    return InvalidArgument("not a lucid self-test record (lucid_self_test: 1)");
  const auto field = [&j](const char* name, nlohmann::json::value_t type) -> Status {
    if (!j.contains(name) || j[name].type() != type)
      return InvalidArgument(std::string("self-test record: \"") + name + "\" missing or mistyped");
    return OkStatus();
  };
  using V = nlohmann::json::value_t;
  LUCID_RETURN_IF_ERROR(field("build", V::string));
  LUCID_RETURN_IF_ERROR(field("device", V::string));
  LUCID_RETURN_IF_ERROR(field("kernels", V::array));
  LUCID_RETURN_IF_ERROR(field("not_implemented", V::array));
  if (!j.contains("sm") || !j["sm"].is_number_integer())
    return InvalidArgument("self-test record: \"sm\" missing or mistyped");
  SelfTestRecord r;
  r.build = j["build"];
  r.device = j["device"];
  r.sm = j["sm"];
  r.ran_at = j.value("ran_at", int64_t{0});
  for (const nlohmann::json& k : j["kernels"]) {
    const auto text = [&k](const char* name) { return k.contains(name) && k[name].is_string(); };
    if (!k.is_object() || !text("set") || !text("op") || !text("format") || !k.contains("passed") ||
        !k["passed"].is_boolean())
      return InvalidArgument("self-test record: a kernel row lacks set, op, format or passed");
    r.kernels.push_back({k["set"], k["op"], k["format"], k.value("cases", 0), k.value("worst", 0.0),
                         k["passed"], k.value("failures", std::string())});
  }
  for (const nlohmann::json& o : j["not_implemented"])
    if (o.is_string()) r.not_implemented.push_back(o);
  return r;
}

StatusOr<std::string> BinaryIdentity() {
  std::ifstream f("/proc/self/exe", std::ios::binary);
  if (!f) return Internal("cannot read /proc/self/exe to identify this binary");
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::vector<char> buf(1 << 20);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    XXH3_64bits_update(st, buf.data(), static_cast<size_t>(f.gcount()));
  }
  const unsigned long long h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  char out[32];
  std::snprintf(out, sizeof out, "xxh3:%016llx", h);
  return std::string(out);
}

std::string SelfTestDir(const std::string& configured) {
  if (!configured.empty()) return configured;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0')
    return std::string(x) + "/lucid/self-test";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0')
    return std::string(h) + "/.cache/lucid/self-test";
  return ".lucid-self-test";
}

std::string RecordPath(const std::string& dir, int sm, const std::string& build) {
  return dir + "/self-test-sm" + std::to_string(sm) + "-" + Hex(build) + ".json";
}

StatusOr<std::string> WriteRecord(const std::string& dir, const SelfTestRecord& r) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Internal("cannot create " + dir + ": " + ec.message());
  const std::string path = RecordPath(dir, r.sm, r.build);
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << RecordToJson(r).dump(2) << "\n";
    f.close();
    if (!f) return Internal("cannot write " + tmp);
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return Internal("cannot rename the record into " + path);
  }
  return path;
}

std::vector<std::string> RequiredFormats(const std::vector<config::KernelChoice>& kernels,
                                         KvDtype kv_dtype) {
  std::vector<std::string> f = {"-", "f32", "bf16"};
  for (const config::KernelChoice& k : kernels) {
    if (k.family != config::KernelFamily::kMatmul && k.family != config::KernelFamily::kMoe)
      continue;
    for (const config::Situation& s : k.situations) {
      switch (s.weight_format) {
        case WeightFormat::kF32:
          AddOnce(f, "f32");
          break;
        case WeightFormat::kBF16:
          AddOnce(f, "bf16");
          break;
        case WeightFormat::kFp8Block:
          AddOnce(f, "fp8");
          AddOnce(f, "fp8-ue8m0");
          break;
        case WeightFormat::kNvfp4:
          AddOnce(f, "nvfp4");
          break;
        case WeightFormat::kGgml:
          AddOnce(f, "ggml");
          break;
      }
    }
  }
  AddOnce(f, std::string("kv:") + KvDtypeName(kv_dtype));
  return f;
}

StatusOr<GateOutcome> VerifyKernels(const GateInputs& in, const SelfTestRunner& run) {
  GateOutcome out;
  const std::string path = RecordPath(in.dir, in.sm, in.build);
  StatusOr<SelfTestRecord> kept = ReadMatching(path, in);
  if (kept.ok()) {
    out.record = std::move(*kept);
    out.record_path = path;
    out.notes.push_back("self-test record " + path + " (this binary on sm_" +
                        std::to_string(in.sm) + ", " + out.record.device + ")");
  } else {
    const std::string why = kept.status().message();
    const std::time_t t0 = std::time(nullptr);
    LUCID_ASSIGN_OR_RETURN(out.record, run());
    out.ran_now = true;
    out.record.build = in.build;
    out.record.sm = in.sm;
    if (out.record.device.empty()) out.record.device = in.device;
    if (out.record.ran_at == 0) out.record.ran_at = static_cast<int64_t>(t0);
    out.notes.push_back(why + ": ran the self-test on " + in.device + " (" +
                        std::to_string(std::time(nullptr) - t0) + " s)");
    StatusOr<std::string> written = WriteRecord(in.dir, out.record);
    if (written.ok()) {
      out.record_path = *written;
      out.notes.push_back("self-test recorded in " + *written);
    } else {
      out.warnings.push_back("self-test record not kept (" + written.status().message() +
                             "): the next start runs it again");
    }
  }
  std::vector<std::string> unverified;
  int checked = 0, passed = 0;
  for (const KernelResult& k : out.record.kernels) {
    if (!Required(k, in)) continue;
    ++checked;
    passed += k.passed ? 1 : 0;
    if (!k.passed) {
      char worst[32];
      std::snprintf(worst, sizeof worst, "%.3g", k.worst);
      unverified.push_back(k.set + " " + k.op + " " + k.format + " failed (worst error/tolerance " +
                           worst + (k.failures.empty() ? "" : "; " + k.failures) + ")");
    }
  }
  for (const std::string& f : in.formats) {
    if (f == "ggml") continue;  // GgufWeights' rows are named by block type
    const bool ran =
        std::any_of(out.record.kernels.begin(), out.record.kernels.end(),
                    [&](const KernelResult& k) { return k.set == in.set && k.format == f; });
    if (!ran)
      unverified.push_back("no " + in.set + " kernel with format " + f + " was run on sm_" +
                           std::to_string(in.sm));
  }
  for (const std::string& op : out.record.not_implemented)
    unverified.push_back(op + " has no kernel on this backend (never run)");
  out.notes.push_back(
      std::to_string(passed) + " of the plan's " + std::to_string(checked) + " " + in.set +
      " kernels passed on sm_" + std::to_string(in.sm) + " by this record" +
      (unverified.empty() ? "" : "; " + std::to_string(unverified.size()) + " unverified"));
  if (unverified.empty()) return out;
  std::string text;
  for (const std::string& u : unverified) text += (text.empty() ? "" : "; ") + u;
  if (!in.allow_unverified)
    return FailedPrecondition("the plan's kernels did not all pass the self-test on " + in.device +
                              ": " + text + " (record " +
                              (out.record_path.empty() ? path : out.record_path) +
                              "; --allow-unverified-kernels starts anyway)");
  for (const std::string& u : unverified)
    out.warnings.push_back("--allow-unverified-kernels: starting with " + u);
  return out;
}

}  // namespace lucid::cli
