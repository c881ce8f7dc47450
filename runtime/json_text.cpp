// json_text.cpp — strict JSON parsing and safe dumping (see json_text.hpp).
#include "runtime/json_text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "nsajit/errors.hpp"

namespace nsajit {
namespace {

// A char iterator that records how far the parser has read, so that a duplicate key found in the
// parser's callback can be reported with its line.
struct TrackedChars {
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  const char* p;
  std::size_t* read;  // characters consumed so far
  const char& operator*() const { return *p; }
  TrackedChars& operator++() {
    ++p;
    ++*read;
    return *this;
  }
  TrackedChars operator++(int) {
    TrackedChars old = *this;
    ++*this;
    return old;
  }
  friend bool operator==(const TrackedChars& a, const TrackedChars& b) { return a.p == b.p; }
};

}  // namespace

nlohmann::json parse_json_strict(std::string_view text, const std::string& origin, std::string_view not_json) {
  std::size_t read = 0;
  std::vector<std::set<std::string>> keys;  // one set per open object
  auto callback = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) keys.emplace_back();
    if (event == E::object_end && !keys.empty()) keys.pop_back();
    if (event == E::key && !keys.empty() && !keys.back().insert(parsed.get<std::string>()).second) {
      const auto line = 1 + std::count(text.begin(), text.begin() + std::ptrdiff_t(std::min(read, text.size())), '\n');
      throw InvalidArgument(fmt::format("{}: line {}: duplicate key {} (each key may appear once)", origin, line,
                                        dump_json(parsed)));
    }
    return true;
  };
  try {
    return nlohmann::json::parse(TrackedChars{text.data(), &read}, TrackedChars{text.data() + text.size(), &read},
                                 callback);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(fmt::format("{}: {}: {}", origin, not_json, e.what()));
  }
}

std::string dump_json(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string_view utf8_prefix(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  std::size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;  // a continuation byte
  return text.substr(0, end);
}

}  // namespace nsajit
