// This machine's GPUs for `--target local` (config/target.h): the commands that plan for or run
// a model here (explain, generate, serve) resolve through ResolveOnThisMachine, so that on a GPU
// machine the plan is for its GPU and the memory it has free; the config layer itself does not
// link CUDA. `lucid bench` resolves through it with --device cuda, without a probe on the CPU.
// Thread-safety: reentrant (the CUDA runtime's device probe is).
#pragma once

#include "config/resolved_config.h"
#include "config/resolver.h"
#include "config/settings.h"
#include "config/target.h"
#include "core/status.h"

namespace lucid::cli {

// A CUDA build's devices (backends/cuda/cuda_device.h: ProbeCudaDevices), else why there are
// none ("no CUDA device: ...", "this build has no CUDA backend ...").
config::LocalGpus ProbeLocalGpus();

// config::Resolve(settings), with this machine's GPUs probed when the target is local (unset,
// "auto" or "local"); a described target is resolved as given.
StatusOr<config::ResolvedConfig> ResolveOnThisMachine(const config::ExplicitSettings& settings);

}  // namespace lucid::cli
