// main.cpp — doctest runner. Points the JIT cache at a fresh directory unless NSAJIT_CACHE_DIR is
// set, so tests never read or pollute the user's cache.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "tests/test_dirs.hpp"

int main(int argc, char** argv) {
  if (!std::getenv("NSAJIT_CACHE_DIR")) setenv("NSAJIT_CACHE_DIR", nsajit::test::make_temp_dir("cache").c_str(), 1);
  doctest::Context context(argc, argv);
  return context.run();
}
