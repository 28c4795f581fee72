#include "config/fp8_scale_plan.h"

namespace lucid::config {

const char* ScaleReadName(ScaleRead r) {
  switch (r) {
    case ScaleRead::kAsStored:
      return "as stored";
    case ScaleRead::kF32:
      return "f32";
    case ScaleRead::kUe8m0:
      return "ue8m0";
  }
  return "?";
}

ScaleRead KernelScaleRead(const KernelDecl& d, int sm) {
  if (d.device == Device::kCpu || d.name == kCudaReference || d.name == kCudaBf16Act ||
      d.name == kCudaFp8Act)
    return ScaleRead::kAsStored;
  if (d.requires_ue8m0_on_sm100 && sm >= 100) return ScaleRead::kUe8m0;
  return ScaleRead::kF32;
}

std::string Fp8ScaleDecision::Line() const {
  return kernel + " reads " +
         (read == ScaleRead::kAsStored ? "either scale format (" + as_stored_how + ")"
                                       : std::string(ScaleReadName(read)) + " scales") +
         "; checkpoint " + checkpoint + ": " + conversion;
}

Fp8ScaleDecision DecideFp8Scales(const KernelDecl& d, int sm, bool declared_ue8m0,
                                 bool stored_ue8m0) {
  Fp8ScaleDecision r;
  r.kernel = std::string(FamilyName(d.family)) + " " + d.name;
  r.read = KernelScaleRead(d, sm);
  if (d.name == kCudaFp8Act) r.as_stored_how = "laid out as f32 for cuBLASLt per call, exactly";
  r.checkpoint = stored_ue8m0     ? "ue8m0 bytes"
                 : declared_ue8m0 ? "f32, scale_fmt ue8m0 (powers of two, checked at load)"
                                  : "f32 (weight_scale_inv)";
  const bool as_stored = r.read == ScaleRead::kAsStored ||
                         (r.read == ScaleRead::kF32 && !stored_ue8m0) ||
                         (r.read == ScaleRead::kUe8m0 && stored_ue8m0);
  if (as_stored) {
    r.conversion = "none, read as stored (exact)";
  } else if (r.read == ScaleRead::kF32) {
    r.conversion = "ue8m0 -> f32 once at load (exact: 2^(e-127), 255 -> NaN)";
  } else if (declared_ue8m0) {
    r.conversion = "f32 -> ue8m0 once at load (exact: every scale is a power of two)";
  } else {
    r.exact = false;
    r.refused = true;
    r.conversion =
        "refused: f32 -> ue8m0 would round scales that are not powers of two up and re-round "
        "their blocks' weights (lossy); lucid does not change weights at load";
  }
  return r;
}

}  // namespace lucid::config
