// nvrtc_compiler.hpp — CUDA source -> cubin through NVRTC, for an explicit target.
#pragma once

#include <string>
#include <vector>

#include "nsajit/spec.hpp"

namespace nsajit {

struct NvrtcVersion {
  int major = 0;
  int minor = 0;
};
NvrtcVersion nvrtc_version_numbers();

// The real architectures this NVRTC compiles for (nvrtcGetSupportedArchs), e.g. {75, 80, ..., 121}.
std::vector<int> nvrtc_supported_archs();

// Throws InvalidArgument naming `arch` and listing what this NVRTC supports unless NVRTC can
// compile for it: its number is in nvrtc_supported_archs(), an 'a' suffix needs sm_90 or newer,
// an 'f' suffix sm_100 or newer and NVRTC 12.9 or newer.
void check_arch_supported(Arch arch);

// The NVRTC options used for `arch` (fixed order; part of the cache key). Throws as
// check_arch_supported() for an arch this NVRTC cannot compile for.
std::vector<std::string> nvrtc_options(Arch arch);

struct CompileResult {
  std::vector<char> cubin;  // SASS for the target arch (nvrtcGetCUBIN)
  std::string log;          // NVRTC's log (warnings), may be empty
  double compile_ms = 0;
};

// Compiles `source` with `options`. On failure throws CompileError whose message holds `name`,
// the options and NVRTC's whole log.
CompileResult compile_cubin(const std::string& name, const std::string& source,
                            const std::vector<std::string>& options);

}  // namespace nsajit
