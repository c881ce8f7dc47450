// env.cpp — strict parsing of NSAJIT_* variables, with one warning per bad variable.
#include "runtime/env.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string_view>

namespace nsajit::env {

const IntVariable kPdl{.name = "NSAJIT_PDL", .fallback = 1, .min = 0, .max = 1,
                       .meaning = "programmatic dependent launch of the split-KV combine"};
const IntVariable kCacheLockTimeout{.name = "NSAJIT_CACHE_LOCK_TIMEOUT", .fallback = 120, .min = 0, .max = 86400,
                                    .meaning = "seconds to wait for another process compiling a cache entry"};

namespace {

void warn_once(const char* name, std::string_view value, const std::string& accepted, const std::string& used) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  {
    std::lock_guard lock(mutex);
    if (!warned.insert(name).second) return;
  }
  std::fflush(stdout);
  std::fprintf(stderr, "nsajit: %s\n",
               fmt::format("{}=\"{}\" is not accepted (expected {}); using {}", name, value, accepted, used).c_str());
}

std::string accepted_text(const IntVariable& v) {
  if (v.values.empty()) return fmt::format("an integer in [{}, {}]", v.min, v.max);
  return fmt::format("one of {}", fmt::join(v.values, ", "));
}

}  // namespace

std::int64_t read(const IntVariable& v) {
  const char* text = std::getenv(v.name);
  if (text == nullptr) return v.fallback;
  const std::string_view s(text);
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  bool ok = !s.empty() && ec == std::errc() && end == s.data() + s.size();
  if (ok && v.values.empty()) ok = value >= v.min && value <= v.max;
  if (ok && !v.values.empty()) {
    ok = false;
    for (std::int64_t allowed : v.values) ok = ok || value == allowed;
  }
  if (ok) return value;
  warn_once(v.name, s, accepted_text(v),
            v.fallback < 0 ? std::string("the default") : fmt::format("the default ({})", v.fallback));
  return v.fallback;
}

std::string read_path(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return "";
  if (*text == '\0') warn_once(name, "", "a directory path", "the default");
  return text;
}

void check_all() {
  read(kPdl);
  read(kCacheLockTimeout);
  read_path("NSAJIT_CACHE_DIR");
}

}  // namespace nsajit::env
