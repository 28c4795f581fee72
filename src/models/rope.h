// RoPE tables from a model config, computed as transformers' rope init functions do
// (default, yarn and llama3), in float32.
#pragma once

#include <cstdint>

#include "formats/model_config.h"
#include "ops/ops.h"

namespace lucid {

// Inverse frequencies for `dim` rotary dims and the factor applied to cos/sin.
RopeTable MakeRopeTable(const RopeConfig& rope, int64_t dim);

}  // namespace lucid
