// main.cpp — doctest runner. Points the JIT cache at a fresh directory (removed at exit) unless
// NSAJIT_CACHE_DIR is set, so tests never read or pollute the user's cache.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/test_dirs.hpp"

int main(int argc, char** argv) {
  std::string own_cache;
  if (!std::getenv("NSAJIT_CACHE_DIR")) {
    own_cache = nsajit::test::make_temp_dir("cache");
    setenv("NSAJIT_CACHE_DIR", own_cache.c_str(), 1);
  }
  doctest::Context context(argc, argv);
  const int result = context.run();
  if (!own_cache.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(own_cache, ec);
  }
  return result;
}
