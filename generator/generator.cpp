// generator.cpp — spec -> CUDA source.
#include "generator/generator.hpp"

#include <fmt/format.h>

#include <string_view>

#include "generator/embedded_templates.hpp"
#include "generator/family.hpp"
#include "nsajit/jit.hpp"

namespace nsajit {
namespace {

// Appends a template file, dropping `#pragma once` (meaningless, and warned about, in a main file).
void append_template(std::string& out, std::string_view file, std::string_view text) {
  out += fmt::format("// ---- templates/{} ----\n", file);
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    if (line.rfind("#pragma once", 0) != 0) {
      out += line;
      out += '\n';
    }
    pos = end + 1;
  }
}

}  // namespace

std::string render_source(const KernelSpec& spec_in) {
  const KernelSpec spec = with_default_tile(spec_in);
  validate(spec);
  const FamilyTraits& t = traits(spec.family);
  std::string out;
  out.reserve(32 * 1024);
  out += fmt::format("// nsajit generated kernel {}\n// spec: {}\n", readable_name(spec), canonical_text(spec));
  for (const auto& [name, value] : t.constants(spec)) out += fmt::format("#define NSAJIT_{} {}\n", name, value);
  append_template(out, "kernel_params.h", embedded::kernel_params());
  append_template(out, "device_common.cuh", embedded::device_common());
  append_template(out, fmt::format("{}.cuh", t.name), t.template_source());
  return out;
}

std::string generate_source(const KernelSpec& spec) { return render_source(spec); }

}  // namespace nsajit
