#include "cli/local_gpus.h"

#ifdef LUCID_HAVE_CUDA
#include "backends/cuda/cuda_device.h"
#endif

namespace lucid::cli {

config::LocalGpus ProbeLocalGpus() {
  config::LocalGpus gpus;
#ifdef LUCID_HAVE_CUDA
  StatusOr<std::vector<cuda::CudaDeviceInfo>> found = cuda::ProbeCudaDevices();
  if (!found.ok()) {
    gpus.none_reason = found.status().message();
    return gpus;
  }
  for (const cuda::CudaDeviceInfo& d : *found)
    gpus.devices.push_back({d.index, d.name, d.sm, d.total_memory, d.free_memory});
#else
  gpus.none_reason = "this build has no CUDA backend (configure with -DLUCID_CUDA=ON)";
#endif
  return gpus;
}

StatusOr<config::ResolvedConfig> ResolveOnThisMachine(const config::ExplicitSettings& settings) {
  const config::ExplicitValue* target = settings.Get("target");
  const bool local = target == nullptr || !target->value.is_string() ||
                     target->value.get<std::string>() == "local" ||
                     target->value.get<std::string>() == "auto";
  if (!local) return config::Resolve(settings);
  const config::LocalGpus gpus = ProbeLocalGpus();
  config::ResolveOptions options;
  options.local_gpus = &gpus;
  return config::Resolve(settings, options);
}

}  // namespace lucid::cli
