// generator.hpp — renders one self-contained CUDA translation unit per spec.
#pragma once

#include <string>

#include "nsajit/spec.hpp"

namespace nsajit {

// The source of `spec` (validated, default tile filled): a comment naming the spec, one #define
// per compile-time constant, then the family's template with every #include "<file>" replaced by
// that embedded template (each once, depth first). No #include remains, so NVRTC needs no include
// path and no toolkit header. Byte-identical for equal specs.
std::string render_source(const KernelSpec& spec);

}  // namespace nsajit
