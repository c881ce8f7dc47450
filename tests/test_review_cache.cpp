// test_review_cache.cpp — review findings on the cache, the cache tools, the tuning database and
// the tools' file handling. Every case here fails on main at the time of the review.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cache/cache_admin.hpp"
#include "cache/cubin_cache.hpp"
#include "nsajit/errors.hpp"
#include "runtime/tuning_db.hpp"
#include "tests/cli_helpers.hpp"
#include "tests/test_dirs.hpp"
#include "tools/progress.hpp"

using namespace nsajit;
using nsajit::test::contains;
namespace fs = std::filesystem;

namespace {

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::string db_with_choice(const std::string& choice_json) {
  return R"({"schema":1,"key":{"gpu":"X","sm_count":132,"arch":"sm_90a","driver":"d","nvrtc":"13.0","nsajit":"0"},)"
         R"("families":{"sparse_mla":[{"bucket":{"h_q":16,"rows":1,"topk":2048},"choice":)" +
         choice_json + "}]}}";
}

}  // namespace

#ifdef NSAJIT_CLI_PATH
#endif
