// The self-test gate of the commands that run a model on a GPU (generate, serve): a device kernel
// starts only after the ops conformance suite (backends/cpu/ops_conformance.h) has run it on this
// device's compute capability, with this binary, and it passed.
//
// A self-test record is what `lucid backends --self-test` (or the gate itself) measured: one row
// per op set, op and conformance format ("cuda-bf16act" "Linear" "fp8-ue8m0", "cuda-reference"
// "MlaAttention" "kv:bf16", "cuda-reference" "RmsNorm" "-"),
// for one binary (`build`, a hash of the executable: a rebuilt kernel is a new binary) on one
// compute capability. It is kept as JSON in the self-test directory, one file per (sm, build).
//
// VerifyKernels: the record for this device is read, or, when there is none (or it is unreadable,
// or another device's), the suite is run now through the given runner and its record written. The
// plan's kernels are the rows of its op set whose format the plan uses (RequiredFormats); the plan
// is refused
// (FailedPrecondition, exit status 2) when one of them failed, or when a format it uses has no row
// at all (never run here), naming each and the flag that forces a start; with
// --allow-unverified-kernels it starts with one warning per such kernel. Nothing is skipped
// silently: the outcome's notes say which record was used and how it was obtained.
// Thread-safety: functions of their arguments and the files they name; VerifyKernels writes the
// record through a temporary file and a rename, so concurrent starts see a whole file or none.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/resolved_config.h"
#include "core/status.h"

namespace lucid::cli {

struct KernelResult {
  std::string set;         // the op set's kernel name ("cuda-reference")
  std::string op, format;  // ops/ops.h method name; conformance format ("-" where none)
  int cases = 0;
  double worst = 0.0;  // worst case's error / its tolerance
  bool passed = false;
  std::string failures;  // the first failing cases
};

struct SelfTestRecord {
  std::string build;   // BinaryIdentity() of the binary whose kernels ran
  std::string device;  // "cuda:0 NVIDIA H200 (sm_90, ...)"
  int sm = 0;          // compute capability, major*10+minor
  int64_t ran_at = 0;  // unix seconds
  std::vector<KernelResult> kernels;
  std::vector<std::string> not_implemented;  // ops with no kernel on this backend
};

nlohmann::json RecordToJson(const SelfTestRecord& r);
// InvalidArgument naming the first missing or mistyped field.
StatusOr<SelfTestRecord> RecordFromJson(const nlohmann::json& j);

// "xxh3:<16 hex digits>" of /proc/self/exe; Internal when it cannot be read.
StatusOr<std::string> BinaryIdentity();
// The self-test directory: `configured` when not empty, else $XDG_CACHE_HOME/lucid/self-test,
// else $HOME/.cache/lucid/self-test (else ./.lucid-self-test).
std::string SelfTestDir(const std::string& configured);
// DIR/self-test-sm<NN>-<hex of build>.json.
std::string RecordPath(const std::string& dir, int sm, const std::string& build);
// Writes `r` to RecordPath(dir, r.sm, r.build) (creating dir), via a temporary file and rename.
StatusOr<std::string> WriteRecord(const std::string& dir, const SelfTestRecord& r);

// The conformance formats the plan's kernels run with: "-" (ops without weights or KV), "f32" and
// "bf16" (what every checkpoint keeps unquantized: the router bias and indexer head weights in
// f32, lm_head in bf16 even in FP8 and NVFP4 checkpoints), each matmul and MoE weight format of
// the plan ("nvfp4"; FP8 block weights as "fp8" and "fp8-ue8m0": the load may convert one into
// the other), and the KV rows' "kv:<kv-cache-dtype>". GGUF weights: "ggml", which
// requires every row of the op GgufWeights.
std::vector<std::string> RequiredFormats(const std::vector<config::KernelChoice>& kernels,
                                         KvDtype kv_dtype);

struct GateInputs {
  std::string dir;     // SelfTestDir(...)
  std::string build;   // BinaryIdentity()
  std::string device;  // DescribeDevice of the device the plan runs on
  int sm = 0;
  std::string set;                   // the op set the plan runs ("cuda-bf16act")
  std::vector<std::string> formats;  // RequiredFormats(...)
  bool allow_unverified = false;     // --allow-unverified-kernels
};

struct GateOutcome {
  SelfTestRecord record;
  bool ran_now = false;               // the suite ran during this call
  std::string record_path;            // where the record is (empty when it could not be written)
  std::vector<std::string> notes;     // which record, how obtained, how many kernels checked
  std::vector<std::string> warnings;  // forced unverified kernels; a record that could not be kept
};

// Runs the suite on the plan's device; its error (e.g. no device) is returned as is.
using SelfTestRunner = std::function<StatusOr<SelfTestRecord>()>;

StatusOr<GateOutcome> VerifyKernels(const GateInputs& in, const SelfTestRunner& run);

}  // namespace lucid::cli
