// main.cpp — doctest runner. Points the JIT cache at a fresh directory (removed at exit) unless
// NSAJIT_CACHE_DIR is set, so tests never read or pollute the user's cache.
//
// --expect-cases=N (ctest passes 1) makes the run fail unless exactly N cases passed the filters:
// an entry whose name filter matches nothing must not pass. A temporary directory a test left
// behind also fails the run (and is removed).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/test_dirs.hpp"

namespace {

int g_cases_run = -1;  // cases that passed the filters in the last run; -1: no run (a query)

struct CaseCounter : doctest::IReporter {
  explicit CaseCounter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override { g_cases_run = int(stats.numTestCasesPassingFilters); }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
DOCTEST_REGISTER_LISTENER("nsajit_case_counter", 1, CaseCounter);

}  // namespace

int main(int argc, char** argv) {
  int expect_cases = -1;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--expect-cases=", 15) == 0) expect_cases = std::atoi(argv[i] + 15);
    else args.push_back(argv[i]);
  }
  std::string own_cache;
  if (!std::getenv("NSAJIT_CACHE_DIR")) {
    own_cache = nsajit::test::make_temp_dir("cache");
    setenv("NSAJIT_CACHE_DIR", own_cache.c_str(), 1);
  }
  doctest::Context context(int(args.size()), args.data());
  int result = context.run();
  std::error_code ec;
  if (!own_cache.empty()) std::filesystem::remove_all(own_cache, ec);
  for (const std::string& dir : nsajit::test::created_temp_dirs()) {
    if (dir == own_cache || !std::filesystem::exists(dir, ec)) continue;
    std::fprintf(stderr, "nsajit_tests: a test left %s behind (removed now)\n", dir.c_str());
    std::filesystem::remove_all(dir, ec);
    result = result ? result : 1;
  }
  if (expect_cases >= 0 && g_cases_run >= 0 && g_cases_run != expect_cases) {
    std::fprintf(stderr, "nsajit_tests: %d test case(s) passed the filters, expected %d (--expect-cases)\n",
                 g_cases_run, expect_cases);
    result = result ? result : 1;
  }
  return result;
}
