// test_inputs.cpp — strict parsing of what users type: arch names and NSAJIT_* variables.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "compiler/nvrtc_compiler.hpp"
#include "nsajit/errors.hpp"
#include "nsajit/spec.hpp"
#include "runtime/env.hpp"
#include "tests/process_helpers.hpp"

using namespace nsajit;

TEST_CASE("parse_arch: numbers are range-checked, not wrapped") {
  for (const char* text : {"sm_4294967386", "sm_4294967296", "sm_18446744073709551706", "sm_99999999999a", "sm_1090"}) {
    INFO(text);
    CHECK_THROWS_WITH_AS(parse_arch(text), doctest::Contains(text), InvalidArgument);
  }
  CHECK(to_string(parse_arch("sm_199")) == "sm_199");
  CHECK(to_string(parse_arch("sm_90a")) == "sm_90a");
}

TEST_CASE("check_arch_supported: what this NVRTC cannot compile is refused, listing what it can") {
  const std::vector<int> archs = nvrtc_supported_archs();
  REQUIRE_FALSE(archs.empty());
  CHECK_NOTHROW(check_arch_supported({90, 'a'}));
  CHECK_NOTHROW(check_arch_supported({90, 0}));
  // 'f' (family) targets start at sm_100: sm_90f does not exist for any NVRTC.
  CHECK_THROWS_WITH_AS(check_arch_supported({90, 'f'}), doctest::Contains("sm_90f"), InvalidArgument);
  CHECK_THROWS_WITH_AS(check_arch_supported({90, 'f'}), doctest::Contains("sm_90,"), InvalidArgument);
  CHECK_THROWS_WITH_AS(check_arch_supported({199, 0}), doctest::Contains("sm_199"), InvalidArgument);
  CHECK_THROWS_AS(nvrtc_options({199, 'a'}), InvalidArgument);  // before anything is compiled
}

TEST_CASE("NSAJIT_* integer variables: a bad value warns once naming the variable, value and accepted values") {
  const env::IntVariable range{.name = "NSAJIT_TEST_RANGE", .fallback = 7, .min = 0, .max = 9};
  const env::IntVariable choice{.name = "NSAJIT_TEST_CHOICE", .fallback = -1, .values = {0, 1, 64}};
  ::unsetenv("NSAJIT_TEST_RANGE");
  CHECK(env::read(range) == 7);
  ::setenv("NSAJIT_TEST_RANGE", "9", 1);
  CHECK(env::read(range) == 9);
  for (const char* bad : {"garbage", "10", "-1", "1x", "", " 1", "99999999999999999999"}) {
    ::setenv("NSAJIT_TEST_RANGE", bad, 1);
    INFO(bad);
    CHECK(env::read(range) == 7);
  }
  ::setenv("NSAJIT_TEST_CHOICE", "64", 1);
  CHECK(env::read(choice) == 64);
  ::setenv("NSAJIT_TEST_CHOICE", "2", 1);
  const std::string messages = test::capture_stderr([&] {
    CHECK(env::read(choice) == -1);
    CHECK(env::read(choice) == -1);
  });
  CHECK(test::count_of(messages, "NSAJIT_TEST_CHOICE=\"2\"") == 1);  // once
  CHECK(test::count_of(messages, "0, 1, 64") == 1);
  ::unsetenv("NSAJIT_TEST_RANGE");
  ::unsetenv("NSAJIT_TEST_CHOICE");
}
