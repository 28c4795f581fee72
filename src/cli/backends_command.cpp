// `lucid backends [--json] [--self-test]`: every backend of every kernel family, whether it is
// compiled in and usable on this machine (and why not), what it supports; --self-test runs each
// usable kernel on random inputs against a double-precision evaluation of the op and prints the
// max error and pass/fail (exit status 1 if any check fails); in a CUDA build a run on a device
// is kept as the self-test record that generate and serve gate their kernels on
// (cli/kernel_gate.h).
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "config/backends_report.h"
#include "config/cli_options.h"
#ifdef LUCID_HAVE_CUDA
#include "backends/cuda/cuda_conformance_report.h"
#include "backends/cuda/cuda_ops.h"
#include "cli/cuda_self_test_record.h"
#include "cli/kernel_gate.h"
#endif

namespace lucid::cli {
namespace {

#ifdef LUCID_HAVE_CUDA
// The CUDA conformance run as self-test lines: one per op and format, and one SKIPPED line per
// op without a CUDA kernel (or one for everything when there is no device). A run on a device
// is kept as this binary's self-test record for its compute capability (cli/kernel_gate.h), the
// one `generate` and `serve` check their plan's kernels against; where it went is returned.
std::string AddCudaSelfTest(const std::string& dir, std::vector<config::SelfTestResult>* tests) {
  const cuda::CudaSelfTest r = cuda::RunCudaSelfTest();
  std::string kept;
  if (r.skipped_reason.empty()) {
    StatusOr<std::string> build = BinaryIdentity();
    StatusOr<SelfTestRecord> rec =
        build.ok() ? CudaRecord(r, *build) : StatusOr<SelfTestRecord>(build.status());
    StatusOr<std::string> path = rec.ok() ? WriteRecord(dir, *rec) : rec.status();
    kept = path.ok() ? "self-test recorded in " + *path
                     : "self-test record not kept: " + path.status().message();
  }
  for (const cuda::CudaOpsSet& set : cuda::CudaOpsSets()) {
    if (!r.skipped_reason.empty()) {
      tests->push_back(
          {"cuda conformance", set.kernel, "every op", 0, 0, false, true, r.skipped_reason});
      continue;
    }
    for (const std::string& op : r.not_implemented)
      tests->push_back({"cuda conformance", set.kernel, op, 0, 0, false, true,
                        "no CUDA kernel yet: " + r.device + " cannot run it"});
  }
  for (const cuda::CudaOpResult& o : r.ops)
    tests->push_back(
        {"cuda conformance", o.set,
         o.op + " " + o.format + ": " + std::to_string(o.cases) + " cases (error/tolerance)",
         o.worst, 1.0, o.passed, false, o.failures});
  return kept;
}
#endif

}  // namespace

void RegisterBackendsCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<config::CliOptions>();
  CLI::App* cmd = app.add_subcommand("backends", "List every kernel backend and what it supports");
  opts->AddTo(cmd, config::kBackends);
  cmd->callback([opts, exit_code] {
    StatusOr<config::ExplicitSettings> settings = opts->Collect();
    if (!settings.ok()) {
      std::fprintf(stderr, "lucid backends: %s\n", settings.status().message().c_str());
      *exit_code = 2;
      return;
    }
    const bool json_out = settings->Bool("json"), self_test = settings->Bool("self-test");
    const std::vector<config::BackendRow> rows = config::BackendRows();
    std::vector<config::SelfTestResult> tests;
    std::string record_note;  // where a device run's record was kept
    if (self_test) tests = config::RunSelfTest(rows);
#ifdef LUCID_HAVE_CUDA
    if (self_test)
      record_note = AddCudaSelfTest(SelfTestDir(settings->String("self-test-dir")), &tests);
#endif
    bool all_pass = true;
    for (const config::SelfTestResult& t : tests) all_pass = all_pass && (t.passed || t.skipped);
    if (json_out) {
      nlohmann::json j = {{"backends", config::BackendsJson(rows)}};
#ifdef LUCID_HAVE_CUDA
      j["cuda"] = cuda::CudaStatusLine();
#endif
      if (self_test) {
        nlohmann::json tj = nlohmann::json::array();
        for (const config::SelfTestResult& t : tests)
          tj.push_back({{"family", t.family},
                        {"kernel", t.kernel},
                        {"check", t.check},
                        {"max_error", t.max_error},
                        {"tolerance", t.tolerance},
                        {"passed", t.passed},
                        {"skipped", t.skipped},
                        {"note", t.note}});
        j["self_test"] = tj;
        if (!record_note.empty()) j["self_test_record"] = record_note;
      }
      std::cout << j.dump(2) << "\n";
    } else {
      std::cout << config::BackendsText(rows);
#ifdef LUCID_HAVE_CUDA
      std::cout << "\n" << cuda::CudaStatusLine() << "\n";
#endif
      if (self_test) {
        std::cout << "\nSelf-test (against a double-precision evaluation of each op)\n";
        for (const config::SelfTestResult& t : tests) {
          char line[256];
          std::snprintf(line, sizeof line, "  %-18s %-6s %-40s max error %.3g  %s\n",
                        t.family.c_str(), t.kernel.c_str(), t.check.c_str(), t.max_error,
                        t.skipped  ? "SKIPPED"
                        : t.passed ? "PASS"
                                   : "FAIL");
          std::cout << line;
          if (!t.note.empty()) std::cout << "      " << t.note << "\n";
        }
        if (!record_note.empty()) std::cout << "\n" << record_note << "\n";
      }
    }
    *exit_code = all_pass ? 0 : 1;
  });
}

}  // namespace lucid::cli
