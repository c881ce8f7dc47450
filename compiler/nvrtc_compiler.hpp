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

// The NVRTC options used for `arch` (fixed order; part of the cache key).
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
