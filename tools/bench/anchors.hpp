// anchors.hpp — recorded anchor figures (the fastest public kernel per bench case, measured on one
// GPU with the benches' inputs and case names) and how a case finds its own.
#pragma once

#include <map>
#include <string>

namespace nsajit::tools::bench {

// The anchors file's figures for a case name: the fastest anchor recorded for it.
struct Anchor {
  std::string name;
  double us = 0;
};
// Reads an anchors file (../shared/baselines/h200-anchors-*.json: {"cases": [{"case", "anchor",
// "anchor_us", ...}]}) into the fastest anchor per case name. Throws Error naming the file and field.
std::map<std::string, Anchor> load_anchors(const std::string& path);

// The anchor of a case named `name` that is compared with the anchors file's case `anchor_case`
// ("" = its own name), or nullptr when the file has none.
const Anchor* find_anchor(const std::map<std::string, Anchor>& anchors, const std::string& name,
                          const std::string& anchor_case);

// The default anchors file: ../shared/baselines/<kDefaultAnchors> when present (a developer's
// checkout), else bench/anchors/<kDefaultAnchors> (the copy that travels with the repository),
// else "" (run outside a checkout: no anchors unless --anchors names a file).
inline constexpr const char* kDefaultAnchors = "h200-anchors-2026-12-02.json";
std::string default_anchors_path();

}  // namespace nsajit::tools::bench
