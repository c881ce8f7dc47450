#include "tools/bench/anchors.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "nsajit/errors.hpp"
#include "runtime/json_text.hpp"
#include "runtime/small_file.hpp"

namespace nsajit::tools::bench {

std::string default_anchors_path() {
  for (const std::string dir : {"../shared/baselines/", "bench/anchors/"})
    if (std::filesystem::exists(dir + kDefaultAnchors)) return dir + kDefaultAnchors;
  return "";
}

std::map<std::string, Anchor> load_anchors(const std::string& path) {
  const std::string origin = "--anchors " + path;
  const nlohmann::json j = parse_json_strict(read_small_file(path, origin), origin, "not JSON");
  if (!j.is_object() || !j.contains("cases") || !j["cases"].is_array())
    throw Error(fmt::format("--anchors {}: expected an object with a \"cases\" array", path));
  std::map<std::string, Anchor> fastest;
  for (std::size_t i = 0; i < j["cases"].size(); ++i) {
    const nlohmann::json& c = j["cases"][i];
    if (!c.is_object() || !c.contains("case") || !c["case"].is_string() || !c.contains("anchor_us") ||
        !c["anchor_us"].is_number() || c["anchor_us"].get<double>() <= 0)
      throw Error(fmt::format("--anchors {}: cases[{}] needs a string \"case\" and a positive \"anchor_us\"", path, i));
    const std::string name = c["case"].get<std::string>();
    const Anchor a{c.value("anchor", std::string("anchor")), c["anchor_us"].get<double>()};
    if (auto it = fastest.find(name); it == fastest.end() || a.us < it->second.us) fastest[name] = a;
  }
  return fastest;
}

const Anchor* find_anchor(const std::map<std::string, Anchor>& anchors, const std::string& name,
                          const std::string& anchor_case) {
  const auto it = anchors.find(anchor_case.empty() ? name : anchor_case);
  return it == anchors.end() ? nullptr : &it->second;
}

}  // namespace nsajit::tools::bench
