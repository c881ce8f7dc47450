// generator.cpp — spec -> CUDA source.
#include "generator/generator.hpp"

#include <fmt/format.h>

#include <stdexcept>
#include <string_view>
#include <unordered_set>

#include "generator/embedded_templates.hpp"
#include "generator/family.hpp"
#include "nsajit/jit.hpp"

namespace nsajit {

namespace embedded {
std::string_view file(std::string_view name) {
  for (const File& f : files())
    if (f.name == name) return f.text;
  throw std::logic_error(fmt::format("nsajit: template \"{}\" is not embedded (add it to NSAJIT_TEMPLATES)", name));
}
}  // namespace embedded

namespace {

// `#include "name"` -> name; anything else -> empty.
std::string_view quoted_include(std::string_view line) {
  constexpr std::string_view kInclude = "#include \"";
  if (line.rfind(kInclude, 0) != 0) return {};
  const std::size_t end = line.find('"', kInclude.size());
  return end == std::string_view::npos ? std::string_view{} : line.substr(kInclude.size(), end - kInclude.size());
}

// Appends a template with its #include "..." lines replaced by the included files (each file
// once, as #pragma once would), dropping `#pragma once` (warned about in a main file).
void append_template(std::string& out, std::string_view name, std::unordered_set<std::string_view>& seen) {
  if (!seen.insert(name).second) return;
  const std::string_view text = embedded::file(name);
  out += fmt::format("// ---- templates/{} ----\n", name);
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    if (const std::string_view dep = quoted_include(line); !dep.empty()) {
      append_template(out, dep, seen);
    } else if (line.rfind("#pragma once", 0) != 0) {
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
  std::unordered_set<std::string_view> seen;
  append_template(out, t.template_file(spec), seen);
  return out;
}

std::string generate_source(const KernelSpec& spec) { return render_source(spec); }

}  // namespace nsajit
