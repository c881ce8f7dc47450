// nvrtc_compiler.cpp — NVRTC driver.
#include "compiler/nvrtc_compiler.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "nsajit/errors.hpp"
#include "nsajit/jit.hpp"

namespace nsajit {

NvrtcVersion nvrtc_version_numbers() {
  NvrtcVersion v;
  if (nvrtcVersion(&v.major, &v.minor) != NVRTC_SUCCESS) return {};
  return v;
}

std::string nvrtc_version() {
  const NvrtcVersion v = nvrtc_version_numbers();
  return fmt::format("{}.{}", v.major, v.minor);
}

std::vector<int> nvrtc_supported_archs() {
  static const std::vector<int> archs = [] {
    int count = 0;
    std::vector<int> list;
    if (nvrtcGetNumSupportedArchs(&count) == NVRTC_SUCCESS && count > 0) {
      list.resize(std::size_t(count));
      if (nvrtcGetSupportedArchs(list.data()) != NVRTC_SUCCESS) list.clear();
    }
    return list;
  }();
  return archs;
}

void check_arch_supported(Arch arch) {
  const std::vector<int> archs = nvrtc_supported_archs();
  const NvrtcVersion v = nvrtc_version_numbers();
  const bool family_suffix = v.major > 12 || (v.major == 12 && v.minor >= 9);
  const bool listed = std::find(archs.begin(), archs.end(), arch.sm) != archs.end();
  const bool ok = listed && (arch.suffix == 0 || (arch.suffix == 'a' && arch.sm >= 90) ||
                             (arch.suffix == 'f' && arch.sm >= 100 && family_suffix));
  if (ok) return;
  std::vector<std::string> names;
  for (int sm : archs) names.push_back(fmt::format("sm_{}", sm));
  throw InvalidArgument(fmt::format(
      "arch {}: NVRTC {} cannot compile for it; it supports {} (an 'a' suffix from sm_90, {}); nsajit's kernels "
      "need sm_90 or newer",
      to_string(arch), nvrtc_version(), names.empty() ? std::string("nothing (nvrtcGetSupportedArchs failed)")
                                                      : fmt::format("{}", fmt::join(names, ", ")),
      family_suffix ? "an 'f' suffix from sm_100" : "no 'f' suffix before NVRTC 12.9"));
}

std::vector<std::string> nvrtc_options(Arch arch) {
  check_arch_supported(arch);
  // A real arch gives SASS directly (no PTX JIT in the driver). No -I: generated sources are
  // self-contained. No fast-math: expf/logf accuracy matters for lse.
  return {fmt::format("--gpu-architecture={}", to_string(arch)), "--std=c++17", "--dopt=on"};
}

CompileResult compile_cubin(const std::string& name, const std::string& source,
                            const std::vector<std::string>& options) {
  const auto start = std::chrono::steady_clock::now();
  auto fail = [&](const std::string& what, const std::string& log) -> CompileError {
    return CompileError(fmt::format("NVRTC {} failed for kernel {} (NVRTC {}; options: {})\n{}", what, name,
                                    nvrtc_version(), fmt::join(options, " "), log));
  };

  nvrtcProgram program = nullptr;
  const std::string file_name = name + ".cu";
  if (nvrtcResult r = nvrtcCreateProgram(&program, source.c_str(), file_name.c_str(), 0, nullptr, nullptr);
      r != NVRTC_SUCCESS)
    throw fail("nvrtcCreateProgram", nvrtcGetErrorString(r));
  std::unique_ptr<nvrtcProgram, void (*)(nvrtcProgram*)> guard(&program, [](nvrtcProgram* p) { nvrtcDestroyProgram(p); });

  std::vector<const char*> argv;
  for (const auto& o : options) argv.push_back(o.c_str());
  const nvrtcResult compiled = nvrtcCompileProgram(program, int(argv.size()), argv.data());

  CompileResult result;
  std::size_t log_size = 0;
  if (nvrtcGetProgramLogSize(program, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    result.log.resize(log_size);
    nvrtcGetProgramLog(program, result.log.data());
    result.log.resize(log_size - 1);  // drop the terminating NUL
  }
  if (compiled != NVRTC_SUCCESS)
    throw fail(fmt::format("compilation ({})", nvrtcGetErrorString(compiled)), result.log);

  std::size_t cubin_size = 0;
  if (nvrtcResult r = nvrtcGetCUBINSize(program, &cubin_size); r != NVRTC_SUCCESS || cubin_size == 0)
    throw fail("nvrtcGetCUBINSize (is the target a real architecture?)", nvrtcGetErrorString(r));
  result.cubin.resize(cubin_size);
  if (nvrtcResult r = nvrtcGetCUBIN(program, result.cubin.data()); r != NVRTC_SUCCESS)
    throw fail("nvrtcGetCUBIN", nvrtcGetErrorString(r));
  result.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace nsajit
