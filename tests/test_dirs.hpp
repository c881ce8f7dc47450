// test_dirs.hpp — fresh temporary directories for tests.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace nsajit::test {

// A new empty directory under $TMPDIR (or /tmp), e.g. /tmp/nsajit-test-cache-AbC123.
inline std::string make_temp_dir(const std::string& tag) {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/nsajit-test-" + tag + "-XXXXXX";
  if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
  return pattern;
}

}  // namespace nsajit::test
