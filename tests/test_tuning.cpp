// test_tuning.cpp — the tuning database and `nsajit autotune`: config and database parsing errors,
// the pure bucket lookups, dry-run listings, atomic writes, the fleet enumeration of a database's
// choices (CPU); the dispatcher applying a database's choices (GPU).
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "families/sparse_mla/heuristics.hpp"
#include "families/sparse_mla/launch.hpp"
#include "generator/embedded_templates.hpp"
#include "nsajit/errors.hpp"
#include "nsajit/jit.hpp"
#include "nsajit/kernels.hpp"
#include "reference/bf16.hpp"
#include "reference/sparse_mla.hpp"
#include "reference/topk.hpp"
#include "runtime/json_text.hpp"
#include "runtime/small_file.hpp"
#include "runtime/tuning_db.hpp"
#include "tests/cli_helpers.hpp"
#include "tests/gpu_support.hpp"
#include "tests/process_helpers.hpp"
#include "tests/test_dirs.hpp"
#include "tools/fleet_specs.hpp"
#include "tools/progress.hpp"
#include "tools/tuning_config.hpp"

using namespace nsajit;
using namespace nsajit::test;  // contains, error_of, run_cli, count_of (tests/*_helpers.hpp)
namespace fs = std::filesystem;

namespace {

void write_file(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// A small valid config: one top-k and one sparse MLA bucket group.
nlohmann::json small_config() {
  return nlohmann::json::parse(R"({
    "schema": 1, "iters": 5,
    "topk": {"search": {"ctas_per_row": ["auto", 1, 8], "threads": ["auto", 256]},
             "buckets": [{"name": "8x131072", "rows": [2, 16], "width": [65537, 262144], "topk": 2048,
                          "tune": {"rows": 8, "width": 131072}}]},
    "sparse_mla": {"search": {"kernel": ["mma_sync", "wgmma"], "heads_per_cta": [16, 64], "num_splits": ["auto", 1]},
                   "buckets": [{"h_q": [16, 64], "kv_dtype": "bf16", "topk": 2048,
                                "rows": [[1, 4], [5, null]], "tune_rows": [2, 64]}]}})");
}

tuning::TuningKey key_of(const std::string& gpu, int sm_count) {
  return {.gpu = gpu, .sm_count = sm_count, .arch = "sm_90a", .driver = "CUDA 13.0", .nvrtc = nvrtc_version(),
          .nsajit = version()};
}

// A database with one sparse MLA entry (h_q, bf16, rows range -> choice) and one top-k entry.
nlohmann::json db_json(const tuning::TuningKey& key, int h_q, tuning::Range rows, const tuning::SparseMlaChoice& mla,
                       tuning::Range topk_rows, tuning::Range topk_width, const detail::TopkPlanConstraints& topk) {
  tools::TunedEntry m;
  m.bucket = tuning::sparse_mla_bucket_json(
      {.name = "test", .h_q = h_q, .kv_dtype = KvDtype::bf16, .rows = rows, .topk = {2048, 2048}});
  m.choice = tuning::sparse_mla_choice_json(mla);
  tools::TunedEntry t;
  t.bucket = detail::topk_bucket_json({.name = "test", .rows = topk_rows, .width = topk_width, .topk = {2048, 2048}});
  t.choice = detail::topk_choice_json(topk);
  return tools::tuning_db_json(key, "test", 5, {t}, {m});
}

#ifdef NSAJIT_CLI_PATH
#endif

}  // namespace

TEST_CASE("tune config: a valid config expands its bucket groups; bad input names the file and field") {
  const tools::TuneConfig c = tools::parse_tune_config(small_config().dump(), "t.json");
  CHECK(c.iters == 5);
  REQUIRE(c.topk.size() == 1);
  CHECK(c.topk[0].rows == 8);
  CHECK(c.topk[0].search.at("ctas_per_row").size() == 3);
  REQUIRE(c.sparse_mla.size() == 4);  // h_q 16, 64 x two rows ranges
  CHECK(c.sparse_mla[1].bucket.h_q == 16);
  CHECK(c.sparse_mla[1].rows == 64);
  CHECK(c.sparse_mla[1].bucket.rows.hi == tuning::Range{}.hi);
  CHECK(c.mla_kv_tokens == tools::kDefaultMlaKvTokens);
  {  // kv_tokens: the timed rows' context, for the sparse MLA family only
    nlohmann::json j = small_config();
    j["sparse_mla"]["kv_tokens"] = 8192;
    CHECK(tools::parse_tune_config(j.dump(), "t.json").mla_kv_tokens == 8192);
    for (int edge : {64, 1 << 20}) {
      j["sparse_mla"]["kv_tokens"] = edge;
      CHECK(tools::parse_tune_config(j.dump(), "t.json").mla_kv_tokens == edge);
    }
    j["sparse_mla"]["kv_tokens"] = 8192;
    CHECK(contains(tools::dry_run_listing(tools::parse_tune_config(j.dump(), "t.json"), Arch{90, 'a'}, 132),
                   "over 8192 KV tokens"));
  }
  {  // score_dtype: a list gives a bucket per dtype, the bf16 one named as the bench's case
    nlohmann::json j = small_config();
    j["topk"]["buckets"][0]["score_dtype"] = {"fp32", "bf16"};
    const tools::TuneConfig d = tools::parse_tune_config(j.dump(), "t.json");
    REQUIRE(d.topk.size() == 2);
    CHECK(d.topk[0].bucket.score_dtype == ScoreDtype::fp32);
    CHECK(d.topk[0].bucket.name == "8x131072");
    CHECK(d.topk[1].bucket.score_dtype == ScoreDtype::bf16);
    CHECK(d.topk[1].bucket.name == "8x131072 bf16");
    CHECK(detail::topk_bucket_json(d.topk[1].bucket)["score_dtype"] == "bf16");
    CHECK(detail::parse_topk_bucket(detail::topk_bucket_json(d.topk[1].bucket), "b").score_dtype == ScoreDtype::bf16);
    CHECK_FALSE(c.topk[0].bucket.score_dtype);  // none given: either
    j["topk"]["buckets"][0].erase("name");
    CHECK(tools::parse_tune_config(j.dump(), "t.json").topk[1].bucket.name == "bf16");
  }

  struct Bad {
    const char* pointer;  // JSON pointer to replace
    nlohmann::json value;
    std::vector<std::string> expected;  // parts of the message
  };
  const std::vector<Bad> bad = {
      {"/topk/search/tile_size", {1}, {"t.json", "topk.search.tile_size", "unknown field"}},
      {"/topk/search/threads", {300}, {"t.json", "topk.search.threads[0]", "300", "256, 512, 1024"}},
      {"/topk/search/threads", {4294967552LL}, {"topk.search.threads[0]", "4294967552"}},  // 256 mod 2^32
      {"/sparse_mla/search/kernel", {"tensor"}, {"t.json", "sparse_mla.search.kernel[0]", "mma_sync"}},
      {"/sparse_mla/search/num_splits", {65}, {"sparse_mla.search.num_splits[0]", "[1, 64]"}},
      {"/topk/search/speculate", nlohmann::json::array(), {"topk.search.speculate", "non-empty list"}},
      {"/topk/buckets/0/tune/rows", 17, {"topk.buckets[0].tune.rows", "inside the bucket's rows range [2,16]"}},
      {"/topk/buckets/0/rows", {16, 2}, {"topk.buckets[0].rows", "lo <= hi"}},
      {"/topk/buckets/0/colour", 1, {"topk.buckets[0].colour", "unknown field"}},
      {"/topk/buckets/0/score_dtype", "fp16", {"topk.buckets[0].score_dtype", "fp16", "\"fp32\" or \"bf16\""}},
      {"/topk/buckets/0/score_dtype",
       {"bf16", 2},
       {"topk.buckets[0][score_dtype 2].score_dtype", "\"fp32\" or \"bf16\""}},
      {"/topk/buckets/0/score_dtype", nlohmann::json::array(), {"topk.buckets[0].score_dtype", "list of distinct"}},
      {"/topk/buckets/0/score_dtype", {"bf16", "bf16"}, {"topk.buckets[0].score_dtype", "list of distinct"}},
      {"/topk/buckets/0", {{"name", 5}, {"score_dtype", {"bf16"}}}, {"topk.buckets[0].name", "a string"}},
      {"/sparse_mla/buckets/0/h_q", 48, {"sparse_mla.buckets[0]", "h_q", "8, 16, 32, 64, 128"}},
      {"/sparse_mla/buckets/0/kv_dtype", "fp16", {"kv_dtype", "\"bf16\" or \"fp8\""}},
      {"/sparse_mla/buckets/0/tune_rows", {2}, {"sparse_mla.buckets[0].tune_rows", "one value per rows range"}},
      {"/sparse_mla/buckets/0/tune_rows", {9, 64}, {"tune_rows[0]", "inside its rows range [1,4]"}},
      {"/schema", 2, {"t.json: schema", "expected 1"}},
      {"/sparse_mla/buckets/0/name", 5, {"sparse_mla.buckets[0].name", "a string"}},
      {"/sparse_mla/buckets/0/kv_dtype", nlohmann::json::array(), {"sparse_mla.buckets[0]", "kv_dtype"}},
      {"/iters", 0, {"t.json: iters = 0"}},
      {"/topk/buckets/0",
       {{"rows", {1, 1000}}, {"width", {1, 1 << 22}}, {"topk", 2048}, {"tune", {{"rows", 1000}, {"width", 1 << 22}}}},
       {"topk.buckets[0].tune", "rows x width <= 1073741824"}},
      {"/sparse_mla/buckets/0/tune_rows", {2, 100000}, {"tune_rows[1]", "rows x h_q <= 1048576"}},
      {"/sparse_mla/buckets/0/rows", nlohmann::json::array(), {"sparse_mla.buckets[0].rows"}},
      {"/gpu", "H200", {"t.json: gpu: unknown field"}},
      {"/sparse_mla/kv_tokens", 0, {"t.json: sparse_mla.kv_tokens = 0", "a multiple of 64 in [64, 1048576]"}},
      {"/sparse_mla/kv_tokens", 2097152, {"sparse_mla.kv_tokens = 2097152", "[64, 1048576]"}},
      {"/sparse_mla/kv_tokens", 8200, {"sparse_mla.kv_tokens = 8200", "a multiple of 64"}},
      {"/sparse_mla/kv_tokens", 8192.0, {"sparse_mla.kv_tokens = 8192.0", "a multiple of 64"}},
      {"/sparse_mla/kv_tokens", -64, {"sparse_mla.kv_tokens = -64", "a multiple of 64"}},
      {"/sparse_mla/kv_tokens", "32K", {"sparse_mla.kv_tokens = \"32K\"", "a multiple of 64"}},
      {"/topk/kv_tokens", 8192, {"topk.kv_tokens", "unknown field"}},
  };
  for (const Bad& b : bad) {
    nlohmann::json j = small_config();
    j[nlohmann::json::json_pointer(b.pointer)] = b.value;
    const std::string e = error_of([&] { tools::parse_tune_config(j.dump(), "t.json"); });
    CAPTURE(b.pointer);
    CAPTURE(e);
    CHECK(!e.empty());
    for (const std::string& part : b.expected) CHECK(contains(e, part));
  }
  CHECK(contains(error_of([] { tools::parse_tune_config("{\"schema\": 1, \"topk\": {", "t.json"); }),
                 "t.json: not valid JSON"));
}

TEST_CASE("tuning database: parse errors name the file and field; a round trip keeps every entry") {
  const tuning::SparseMlaChoice mla{.tile = {.heads_per_cta = 16, .kernel = MlaKernel::mma_sync, .producer_warps = 2},
                                    .num_splits = 4};
  const detail::TopkPlanConstraints topk{.ctas_per_row = 2, .threads = 1024, .speculate = 0};
  const nlohmann::json j = db_json(key_of("NVIDIA H200", 132), 64, {1, 4}, mla, {1, 1}, {65537, 262144}, topk);
  const std::string text = j.dump(1);
  const tuning::TuningDb db = tuning::parse_tuning_db(text, "db.json");
  CHECK(db.key.gpu == "NVIDIA H200");
  CHECK(db.key.sm_count == 132);
  REQUIRE(db.sparse_mla.size() == 1);
  CHECK(db.sparse_mla[0].choice == mla);
  CHECK(db.sparse_mla[0].bucket.rows == tuning::Range{1, 4});
  REQUIRE(db.topk.size() == 1);
  CHECK(db.topk[0].choice.ctas_per_row == 2);
  CHECK(db.topk[0].choice.threads == 1024);
  CHECK(db.topk[0].choice.speculate == 0);
  CHECK(db.topk[0].choice.prefetch_slice == -1);

  // Truncated anywhere: a message naming the file, never a partial database.
  std::mt19937 rng(std::random_device{}());
  for (int i = 0; i < 20; ++i) {
    const std::size_t cut = 1 + rng() % (text.size() - 2);
    const std::string e = error_of([&] { tuning::parse_tuning_db(text.substr(0, cut), "db.json"); });
    CAPTURE(cut);
    CHECK(contains(e, "db.json: not valid JSON"));
  }
  struct Bad {
    const char* pointer;
    nlohmann::json value;
    std::vector<std::string> expected;
  };
  const std::vector<Bad> bad = {
      {"/schema", 2, {"db.json: schema = 2", "expected 1"}},
      {"/key/sm_count", "132", {"db.json: key.sm_count"}},
      {"/key/gpu", "", {"db.json: key.gpu"}},
      {"/key/arch", "sm_77z", {"db.json: key.arch"}},
      {"/families/index_transform", nlohmann::json::array(), {"families.index_transform", "unknown field"}},
      {"/families/topk/0/choice/threads", 300, {"families.topk[0].choice.threads", "300"}},
      {"/families/topk/0/choice/cluster", 2, {"families.topk[0].choice.cluster", "unknown top-k field"}},
      {"/families/topk/0/bucket/width", "wide", {"families.topk[0].bucket.width"}},
      {"/families/sparse_mla/0/choice/kernel", "wgmma", {"families.sparse_mla[0].choice", "not a valid kernel", "producer_warps"}},
      {"/families/sparse_mla/0/bucket/h_q", 12, {"families.sparse_mla[0].bucket.h_q", "12"}},
  };
  for (const Bad& b : bad) {
    nlohmann::json k = j;
    k[nlohmann::json::json_pointer(b.pointer)] = b.value;
    const std::string e = error_of([&] { tuning::parse_tuning_db(k.dump(), "db.json"); });
    CAPTURE(b.pointer);
    CAPTURE(e);
    for (const std::string& part : b.expected) CHECK(contains(e, part));
  }
  // Every shipped database parses (a bad one would be skipped silently at run time).
  for (const embedded::File& f : embedded::tuning_databases())
    if (!f.name.empty()) CHECK_NOTHROW(tuning::parse_tuning_db(f.text, std::string(f.name)));
}

TEST_CASE("tuning database: a long bad value is cut in its message at a character boundary, so the message stays UTF-8") {
  CHECK(utf8_prefix("a\xc3\xa9", 2) == "a");  // never half of é
  CHECK(utf8_prefix("a\xc3\xa9", 3) == "a\xc3\xa9");
  CHECK(utf8_prefix("\xf0\x9f\x99\x82x", 3).empty());
  CHECK(utf8_prefix("abc", 2) == "ab");
  CHECK(dump_json(nlohmann::json("k\xff")) == "\"k\xef\xbf\xbd\"");  // U+FFFD, not type_error 316
  nlohmann::json j = db_json(key_of("NVIDIA H200", 132), 64, {1, 4}, {}, {1, 1}, {65537, 262144}, {});
  std::string value = "a";
  for (int i = 0; i < 60; ++i) value += "\xc3\xa9";  // é: the 80-character cut falls inside one at 77 bytes
  j["families"]["sparse_mla"][0]["choice"]["kernel"] = value;
  const std::string message = error_of([&] { tuning::parse_tuning_db(j.dump(), "db.json"); });
  CAPTURE(message);
  CHECK(contains(message, "db.json: families.sparse_mla[0].choice.kernel = \"a\xc3\xa9"));
  CHECK(contains(message, "\xc3\xa9...: expected"));
  // `nsajit info --json` dumps tuning_db_in_use(), which holds such a message.
  CHECK(nlohmann::json(message).dump() == dump_json(nlohmann::json(message)));
}

TEST_CASE("tuning database and tune config: a key twice in one object is an error naming the file, line and key") {
  const std::string db_text =
      "{\"schema\": 1,\n\"key\": {\"gpu\": \"X\", \"sm_count\": 132, \"arch\": \"sm_90a\", \"driver\": \"d\", "
      "\"nvrtc\": \"13.0\", \"nsajit\": \"0\"},\n\"families\": {\"sparse_mla\": [{\"bucket\": {\"h_q\": 16, "
      "\"rows\": 1, \"topk\": 2048},\n\"choice\": {\"num_splits\": 4, \"num_splits\": 8}}]}}";
  CHECK(error_of([&] { tuning::parse_tuning_db(db_text, "db.json"); }) ==
        "db.json: line 4: duplicate key \"num_splits\" (each key may appear once)");
  std::string once = db_text;
  once.replace(once.find("\"num_splits\": 4, "), 17, "");
  CHECK(tuning::parse_tuning_db(once, "db.json").sparse_mla.at(0).choice.num_splits == 8);
  std::string top = once;
  top.replace(top.size() - 1, 1, ", \"schema\": 1}");
  CHECK(contains(error_of([&] { tuning::parse_tuning_db(top, "db.json"); }), "duplicate key \"schema\""));

  const std::string config = small_config().dump(1);
  std::string twice = config;
  twice.insert(twice.find("\"iters\""), "\"iters\": 50,\n");
  const std::string e = error_of([&] { tools::parse_tune_config(twice, "t.json"); });
  CHECK(contains(e, "t.json: line "));
  CHECK(contains(e, "duplicate key \"iters\""));
  CHECK(tools::parse_tune_config(config, "t.json").iters == 5);
}

TEST_CASE("tuning database and tune config: an integer beyond its field's range is refused, never wrapped") {
  const nlohmann::json j = db_json(key_of("NVIDIA H200", 132), 64, {1, 4}, {}, {1, 1}, {65537, 262144}, {});
  auto db_error = [&](const char* pointer, const nlohmann::json& value) {
    nlohmann::json k = j;
    k[nlohmann::json::json_pointer(pointer)] = value;
    return error_of([&] { tuning::parse_tuning_db(k.dump(), "db.json"); });
  };
  CHECK(db_error("/key/sm_count", 4294967428ull) ==  // 2^32 + 132: get<int>() would read 132
        "db.json: key.sm_count = 4294967428: expected a positive integer (at most 2147483647)");
  CHECK(contains(db_error("/key/sm_count", 2147483648ull), "key.sm_count = 2147483648"));
  CHECK(contains(db_error("/key/sm_count", 0), "key.sm_count = 0"));
  CHECK(db_error("/key/sm_count", 2147483647).empty());
  // 2^64 - 1: a uint64 that int64 cannot hold (read as int64 it is -1)
  CHECK(contains(db_error("/families/sparse_mla/0/bucket/rows", nlohmann::json::array({0, 18446744073709551615ull})),
                 "families.sparse_mla[0].bucket.rows = [0,18446744073709551615]"));
  CHECK(contains(db_error("/families/topk/0/bucket/rows", 18446744073709551615ull),
                 "families.topk[0].bucket.rows = 18446744073709551615"));
  CHECK(tuning::json_int64(nlohmann::json(9223372036854775807ull)) == 9223372036854775807LL);
  CHECK_FALSE(tuning::json_int64(nlohmann::json(9223372036854775808ull)));
  CHECK_FALSE(tuning::json_int64(nlohmann::json(1.0)));

  auto config_error = [&](const char* pointer, const nlohmann::json& value) {
    nlohmann::json c = small_config();
    c[nlohmann::json::json_pointer(pointer)] = value;
    return error_of([&] { tools::parse_tune_config(c.dump(), "t.json"); });
  };
  CHECK(contains(config_error("/iters", 4294967301ull),
                 "t.json: iters = 4294967301: expected an integer in [1, 10000]"));
  CHECK(contains(config_error("/sparse_mla/kv_tokens", 4294967360ull), "sparse_mla.kv_tokens = 4294967360"));
  CHECK(contains(config_error("/sparse_mla/kv_tokens", 18446744073709551552ull), "sparse_mla.kv_tokens"));
  CHECK(contains(config_error("/topk/buckets/0/tune/rows", 4294967304ull), "tune.rows = 4294967304"));
  CHECK(config_error("/sparse_mla/kv_tokens", 4096).empty());
}

TEST_CASE("tuning database: a database for another GPU, arch, NVRTC or nsajit version does not apply") {
  const tuning::TuningKey here = key_of("NVIDIA H200", 132);
  CHECK(tuning::key_mismatch(here, here).empty());
  tuning::TuningKey other = here;
  other.driver = "CUDA 12.9";  // recorded only
  CHECK(tuning::key_mismatch(other, here).empty());
  other = here;
  other.gpu = "NVIDIA H100 80GB HBM3";
  CHECK(contains(tuning::key_mismatch(other, here), "made for NVIDIA H100 80GB HBM3 (132 SMs)"));
  other = here;
  other.sm_count = 114;
  CHECK(contains(tuning::key_mismatch(other, here), "114 SMs"));
  other = here;
  other.nvrtc = "12.4";
  CHECK(contains(tuning::key_mismatch(other, here), "NVRTC 12.4"));
  other = here;
  other.nsajit = "0.0.1";
  CHECK(contains(tuning::key_mismatch(other, here), "nsajit 0.0.1"));
}

TEST_CASE("tuning database: bucket lookups are pure and take the first bucket that holds the shape") {
  std::vector<tuning::SparseMlaTuningEntry> mla = {
      {.bucket = {.h_q = 64, .kv_dtype = KvDtype::bf16, .rows = {1, 4}, .topk = {2048, 2048}},
       .choice = {.tile = {.heads_per_cta = 16, .kernel = MlaKernel::mma_sync, .producer_warps = 2}, .num_splits = 8}},
      {.bucket = {.h_q = 64, .rows = {1, 8}, .next_n = {2, 8}, .topk = {2048, 2048}}, .choice = {.num_splits = 16}},
      {.bucket = {.h_q = 64, .rows = {5, 100}, .topk = {1024, 4096}}, .choice = {.num_splits = 2}},
  };
  CHECK(tuning::find_sparse_mla_entry(mla, 1, 64, 1, 2048, KvDtype::bf16, false) == &mla[0]);
  CHECK(tuning::find_sparse_mla_entry(mla, 4, 64, 2, 2048, KvDtype::bf16, false) == &mla[0]);  // first match
  CHECK(tuning::find_sparse_mla_entry(mla, 4, 64, 2, 2048, KvDtype::fp8_e4m3, false) == &mla[1]);
  CHECK(tuning::find_sparse_mla_entry(mla, 4, 64, 1, 2048, KvDtype::fp8_e4m3, false) == nullptr);
  CHECK(tuning::find_sparse_mla_entry(mla, 6, 64, 1, 4096, KvDtype::fp8_e4m3, false) == &mla[2]);
  CHECK(tuning::find_sparse_mla_entry(mla, 6, 128, 1, 4096, KvDtype::fp8_e4m3, false) == nullptr);
  CHECK(tuning::find_sparse_mla_entry(mla, 101, 64, 1, 2048, KvDtype::bf16, false) == nullptr);
  // A seesaw choice serves only the calls its kernel takes; the others get the next entry or none.
  std::vector<tuning::SparseMlaTuningEntry> seesaw = {
      {.bucket = {.h_q = 64, .kv_dtype = KvDtype::bf16, .rows = {1, 8192}, .topk = {64, 4096}},
       .choice = {.tile = {.threads = 384, .block_tokens = 64, .heads_per_cta = 64, .kernel = MlaKernel::wgmma,
                           .producer_warps = 4, .schedule = MlaSchedule::seesaw}}},
      {.bucket = {.h_q = 64, .rows = {1, 8192}, .topk = {64, 4096}}, .choice = {.num_splits = 2}},
  };
  CHECK(tuning::find_sparse_mla_entry(seesaw, 4096, 64, 1, 2048, KvDtype::bf16, false) == &seesaw[0]);
  CHECK(tuning::find_sparse_mla_entry(seesaw, 4096, 64, 1, 1984, KvDtype::bf16, false) == &seesaw[1]);
  CHECK(tuning::find_sparse_mla_entry(seesaw, 4096, 64, 1, 2048, KvDtype::bf16, true) == &seesaw[1]);
  CHECK(tuning::find_sparse_mla_entry(std::span(seesaw).first(1), 4096, 64, 1, 192, KvDtype::bf16, false) == nullptr);
  // The FP8 direct kernel (2 producer warps; kernel mma_sync or left automatic) serves no precise
  // FP8 call, which gets the next entry; precise bf16 calls (the bf16 2-producer-warp kernel) it serves.
  for (const MlaKernel kernel : {MlaKernel::mma_sync, MlaKernel::automatic}) {
    std::vector<tuning::SparseMlaTuningEntry> direct = {
        {.bucket = {.h_q = 16, .rows = {1, 8192}, .topk = {64, 4096}},
         .choice = {.tile = {.kernel = kernel, .producer_warps = 2}}},
        {.bucket = {.h_q = 16, .rows = {1, 8192}, .topk = {64, 4096}}, .choice = {.num_splits = 2}},
    };
    CHECK(tuning::find_sparse_mla_entry(direct, 64, 16, 1, 2048, KvDtype::fp8_e4m3, false) == &direct[0]);
    CHECK(tuning::find_sparse_mla_entry(direct, 64, 16, 1, 2048, KvDtype::fp8_e4m3, true) == &direct[1]);
    CHECK(tuning::find_sparse_mla_entry(direct, 64, 16, 1, 2048, KvDtype::bf16, true) == &direct[0]);
  }
  CHECK(tuning::max_tuned_splits(mla, 4, 64, 2048) == 16);  // any KV dtype or next_n
  CHECK(tuning::max_tuned_splits(mla, 6, 64, 2048) == 16);
  CHECK(tuning::max_tuned_splits(mla, 9, 64, 2048) == 2);
  CHECK(tuning::max_tuned_splits(mla, 9, 16, 2048) == 0);

  std::vector<detail::TopkTuningEntry> topk = {
      {.bucket = {.rows = {1, 1}, .width = {65537, 262144}, .topk = {2048, 2048}}, .choice = {.threads = 256}},
      {.bucket = {.rows = {1, 16}, .width = {0, 262144}, .topk = {0, 4096}, .score_dtype = ScoreDtype::bf16},
       .choice = {.ctas_per_row = 2}},
      {.bucket = {.rows = {1, 16}, .width = {0, 262144}, .topk = {0, 4096}}, .choice = {.ctas_per_row = 4}},
  };
  const ScoreDtype fp32 = ScoreDtype::fp32, bf16 = ScoreDtype::bf16;
  CHECK(detail::find_topk_entry(topk, 1, 131072, 2048, fp32) == &topk[0]);  // no dtype: either
  CHECK(detail::find_topk_entry(topk, 1, 131072, 2048, bf16) == &topk[0]);
  CHECK(detail::find_topk_entry(topk, 1, 65536, 2048, fp32) == &topk[2]);
  CHECK(detail::find_topk_entry(topk, 1, 65536, 2048, bf16) == &topk[1]);  // its dtype's bucket first
  CHECK(detail::find_topk_entry(topk, 2, 131072, 1024, fp32) == &topk[2]);
  CHECK(detail::find_topk_entry(topk, 17, 131072, 2048, bf16) == nullptr);
  CHECK(detail::find_topk_entry(topk, 1, 262145, 2048, fp32) == nullptr);
  CHECK(detail::find_topk_entry({}, 1, 1, 1, fp32) == nullptr);
  CHECK(detail::find_topk_entry(std::span(topk).subspan(1, 1), 1, 65536, 2048, fp32) == nullptr);
}

TEST_CASE("autotune dry run: the heuristics' choice first, distinct candidates, invalid points dropped and named") {
  nlohmann::json j = small_config();
  j["topk"]["buckets"][0]["tune"] = {{"rows", 1}, {"width", 1 << 22}};
  j["topk"]["buckets"][0]["rows"] = {1, 16};
  j["topk"]["buckets"][0]["width"] = {65537, 1 << 22};
  const tools::TuneConfig c = tools::parse_tune_config(j.dump(), "t.json");
  std::vector<tools::Dropped> dropped;
  const auto topk = tools::topk_candidates(c.topk[0], 2048, 132, dropped);
  REQUIRE(!topk.empty());
  CHECK(topk[0].heuristic);
  CHECK(detail::same_topk_launch(topk[0].plan,
                                 detail::plan_topk_launch(1, 1 << 22, 2048, nsajit::ScoreDtype::fp32, 132)));
  for (std::size_t a = 0; a < topk.size(); ++a)
    for (std::size_t b = a + 1; b < topk.size(); ++b) CHECK(!detail::same_topk_launch(topk[a].plan, topk[b].plan));
  // One CTA per row of 4M positions: its bitmaps do not fit shared memory.
  bool bitmaps = false;
  for (const tools::Dropped& d : dropped) bitmaps = bitmaps || contains(d.why, "bitmaps do not fit");
  CHECK(bitmaps);

  dropped.clear();
  const auto mla = tools::sparse_mla_candidates(c.sparse_mla[0], KvDtype::bf16, Arch{90, 'a'}, 132, dropped);
  REQUIRE(!mla.empty());
  CHECK(mla[0].heuristic);
  CHECK(mla[0].spec == tuning::sparse_mla_spec_of({}, 16, 2048, KvDtype::bf16, Arch{90, 'a'}));
  CHECK(mla[0].splits == sparse_mla::auto_splits(2, 16, 2048, 132));
  for (const auto& m : mla) CHECK(m.spec.tile.heads_per_cta <= 16);
  bool hpc = false;
  for (const tools::Dropped& d : dropped) hpc = hpc || contains(d.why, "heads_per_cta");
  CHECK(hpc);  // 64 heads per CTA for h_q 16
  {  // the seesaw splits as the single schedule does: one candidate a split count
    nlohmann::json s = small_config();
    s["sparse_mla"]["search"] = {{"kernel", {"wgmma"}},
                                 {"heads_per_cta", {64}},
                                 {"schedule", {"single", "seesaw"}},
                                 {"num_splits", {"auto", 4}}};
    const tools::TuneConfig sc = tools::parse_tune_config(s.dump(), "t.json");
    REQUIRE(sc.sparse_mla.size() == 4);
    const tools::SparseMlaTuneBucket& decode = sc.sparse_mla[2];
    REQUIRE(decode.bucket.h_q == 64);
    REQUIRE(decode.rows == 2);
    dropped.clear();
    std::set<int> seesaw_splits;
    for (const auto& m : tools::sparse_mla_candidates(decode, KvDtype::bf16, Arch{90, 'a'}, 132, dropped))
      if (m.spec.tile.schedule == MlaSchedule::seesaw) seesaw_splits.insert(m.splits);
    CHECK(seesaw_splits == std::set<int>{4, sparse_mla::auto_splits(2, 64, 2048, 132)});
    CHECK(sparse_mla::auto_splits(2, 64, 2048, 132) == 16);
  }
  {  // the cluster combine: the seesaw at 2 splits only (one 2-CTA cluster a row and head group)
    nlohmann::json s = small_config();
    s["sparse_mla"]["search"] = {{"kernel", {"wgmma"}},
                                 {"heads_per_cta", {64}},
                                 {"schedule", {"seesaw"}},
                                 {"combine", {"kernel", "cluster"}},
                                 {"num_splits", {"auto", 1, 2, 4}}};
    const tools::TuneConfig sc = tools::parse_tune_config(s.dump(), "t.json");
    const tools::SparseMlaTuneBucket& decode = sc.sparse_mla[2];
    dropped.clear();
    int clusters = 0;
    for (const auto& m : tools::sparse_mla_candidates(decode, KvDtype::bf16, Arch{90, 'a'}, 132, dropped))
      if (m.spec.tile.combine == MlaCombine::cluster) {
        ++clusters;
        CHECK(m.splits == 2);
      }
    CHECK(clusters == 1);  // "auto" and 2 are one launch; 1 is the plain seesaw's
    bool four = false;
    for (const tools::Dropped& d : dropped) four = four || contains(d.why, "combine cluster takes 2 splits");
    CHECK(four);
  }
  {  // a database choice names it; a split count other than 2 with it is an error naming the field
    tuning::SparseMlaChoice choice;
    tuning::set_sparse_mla_choice_field(choice, "combine", "cluster", "c");
    CHECK(choice.tile.combine == MlaCombine::cluster);
    CHECK(tuning::sparse_mla_choice_json(choice)["combine"] == "cluster");
    CHECK(!tuning::sparse_mla_choice_json({}).contains("combine"));
    CHECK_THROWS_WITH_AS(tuning::set_sparse_mla_choice_field(choice, "combine", "tree", "c"),
                         doctest::Contains("\"kernel\" or \"cluster\""), InvalidArgument);
    const nlohmann::json entry = {{"bucket", {{"h_q", 64}, {"kv_dtype", "bf16"}, {"rows", {64, 64}}, {"topk", 2048}}},
                                  {"choice", {{"kernel", "wgmma"}, {"heads_per_cta", 64}, {"schedule", "seesaw"},
                                              {"combine", "cluster"}, {"num_splits", 4}}}};
    CHECK_THROWS_WITH_AS(tuning::parse_sparse_mla_entry(entry, "db.sparse_mla[0]", Arch{90, 'a'}),
                         doctest::Contains("num_splits"), InvalidArgument);
    // Without a named schedule it is the seesaw's (the only schedule it takes), and it serves only
    // the calls the seesaw takes.
    tuning::SparseMlaChoice open{.tile = {.heads_per_cta = 64, .kernel = MlaKernel::wgmma, .combine = MlaCombine::cluster}};
    REQUIRE(!tuning::schedule_chosen(open));
    CHECK(tuning::sparse_mla_spec_of(open, 64, 2048, KvDtype::bf16, Arch{90, 'a'}).tile.schedule == MlaSchedule::seesaw);
    CHECK(tuning::choice_serves(open, 2048, KvDtype::bf16, false));
    CHECK(!tuning::choice_serves(open, 2048, KvDtype::bf16, true));
    CHECK(!tuning::choice_serves(open, 1984, KvDtype::bf16, false));
  }

  const std::string listing = tools::dry_run_listing(c, Arch{90, 'a'}, 132);
  CHECK(contains(listing, "t.json"));
  CHECK(contains(listing, "[heuristic]"));
  CHECK(contains(listing, "dropped"));
  CHECK(contains(listing, "sparse_mla bucket h64 bf16 rows [5,null]"));
}

TEST_CASE("sparse MLA schedule: the seesaw wherever its kernel takes the spec; an unnamed database schedule is the heuristics'") {
  const Arch sm90a{90, 'a'};
  auto filled = [&](int h_q, int topk, KvDtype kv, bool precise) {
    KernelSpec s{.family = Family::sparse_mla, .h_q = h_q, .topk = topk, .kv_dtype = kv, .precise = precise, .arch = sm90a};
    return with_default_tile(s);
  };
  const KernelSpec h64 = filled(64, 2048, KvDtype::bf16, false), h128 = filled(128, 2048, KvDtype::bf16, false);
  const MlaSchedule seesaw = MlaSchedule::seesaw, single = MlaSchedule::single;
  // The seesaw wherever its kernel takes the spec, whatever the rows, splits and mode.
  CHECK(sparse_mla::default_schedule(h64) == seesaw);
  CHECK(sparse_mla::default_schedule(h128) == seesaw);
  // Specs the seesaw does not take.
  CHECK(sparse_mla::default_schedule(filled(64, 2048, KvDtype::fp8_e4m3, false)) == single);
  CHECK(sparse_mla::default_schedule(filled(64, 2048, KvDtype::bf16, true)) == single);
  CHECK(sparse_mla::default_schedule(filled(64, 1984, KvDtype::bf16, false)) == single);
  CHECK(sparse_mla::default_schedule(filled(32, 2048, KvDtype::bf16, false)) == single);
  KernelSpec mma = filled(64, 2048, KvDtype::bf16, false);
  mma.tile = {.kernel = MlaKernel::mma_sync};
  CHECK(sparse_mla::default_schedule(with_default_tile(mma)) == single);
  const KernelSpec sm90 = with_default_tile(
      KernelSpec{.family = Family::sparse_mla, .h_q = 64, .topk = 2048, .arch = Arch{90, '\0'}});
  CHECK(sparse_mla::default_schedule(sm90) == single);  // no wgmma off sm_90a

  // A database choice names its schedule only when it was searched; "single" then stays single.
  tuning::SparseMlaChoice c;
  tuning::set_sparse_mla_choice_field(c, "kernel", "wgmma", "kernel");
  CHECK(!c.schedule_named);
  CHECK(!tuning::sparse_mla_choice_json(c).contains("schedule"));
  CHECK(!tuning::schedule_chosen(c));
  tuning::set_sparse_mla_choice_field(c, "schedule", "single", "schedule");
  CHECK(c.schedule_named);
  CHECK(tuning::schedule_chosen(c));
  CHECK(tuning::sparse_mla_choice_json(c)["schedule"] == "single");
  // A seesaw choice fixes its schedule however it was made (the dispatcher's rule leaves it alone).
  tuning::SparseMlaChoice made{.tile = {.kernel = MlaKernel::wgmma, .schedule = MlaSchedule::seesaw}};
  CHECK(tuning::schedule_chosen(made));
  CHECK(tuning::sparse_mla_choice_json(made)["schedule"] == "seesaw");

  // autotune times what the dispatcher would run: an unsearched schedule resolved by the rule.
  nlohmann::json j = small_config();
  j["sparse_mla"]["search"] = {{"kernel", {"wgmma"}}, {"heads_per_cta", {64}}, {"num_splits", {"auto"}}};
  j["sparse_mla"]["buckets"] = nlohmann::json::parse(
      R"([{"h_q": [64], "kv_dtype": "bf16", "topk": 2048, "rows": [[1025, null]], "tune_rows": [4096]}])");
  const tools::TuneConfig tc = tools::parse_tune_config(j.dump(), "t.json");
  REQUIRE(tc.sparse_mla.size() == 1);
  std::vector<tools::Dropped> dropped;
  const auto cands = tools::sparse_mla_candidates(tc.sparse_mla[0], KvDtype::bf16, sm90a, 132, dropped);
  REQUIRE(cands.size() == 1);  // the heuristics' own choice
  CHECK(cands[0].heuristic);
  CHECK(cands[0].spec.tile.schedule == MlaSchedule::seesaw);
  CHECK(cands[0].splits == 1);
  j["sparse_mla"]["search"]["schedule"] = {"single", "seesaw"};
  const auto named = tools::sparse_mla_candidates(tools::parse_tune_config(j.dump(), "t.json").sparse_mla[0],
                                                  KvDtype::bf16, sm90a, 132, dropped);
  REQUIRE(named.size() == 2);  // the heuristics' seesaw, then the named single (the named seesaw is the same launch)
  CHECK(named[1].spec.tile.schedule == MlaSchedule::single);
  CHECK(named[1].choice.schedule_named);
}

TEST_CASE("atomic write: a failed write leaves no file and no temporary file behind") {
  test::TempDir dir("tune-write");
  const std::string path = dir.path() + "/db.json";
  tools::write_atomically(path, "{\"a\": 1}\n", "--db");
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  CHECK(text == "{\"a\": 1}\n");
  // A directory in the way of the rename, and a directory that does not exist.
  fs::create_directory(dir.path() + "/taken");
  fs::create_directory(dir.path() + "/taken/x");
  const std::string e1 = error_of([&] { tools::write_atomically(dir.path() + "/taken", "x", "--db"); });
  CHECK(contains(e1, "--db " + dir.path() + "/taken: cannot write the file"));
  const std::string e2 = error_of([&] { tools::write_atomically(dir.path() + "/missing/db.json", "x", "--db"); });
  CHECK(contains(e2, "nothing was written"));
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir.path())) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"db.json", "taken"});
  CHECK(fs::is_directory(dir.path() + "/taken/x"));
}

TEST_CASE("atomic write: never through a link planted at a predictable temporary name; no temporary file left") {
  test::TempDir dir("tune-write-link");
  const std::string victim = dir.path() + "/victim";
  write_file(victim, "precious");
  const std::string path = dir.path() + "/db.json";
  const std::string planted = path + ".tmp." + std::to_string(::getpid());  // the name main's writer used
  REQUIRE(::symlink(victim.c_str(), planted.c_str()) == 0);
  tools::write_atomically(path, "{}\n", "--db");
  std::ifstream in(victim);
  CHECK(std::string((std::istreambuf_iterator<char>(in)), {}) == "precious");
  CHECK_FALSE(fs::is_symlink(fs::symlink_status(path)));
  std::ifstream out(path);
  CHECK(std::string((std::istreambuf_iterator<char>(out)), {}) == "{}\n");
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir.path())) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"db.json", fs::path(planted).filename(), "victim"});
  CHECK(fs::is_symlink(fs::symlink_status(planted)));  // left alone
}

TEST_CASE("input files: a FIFO, a device, a directory or a file over 16 MiB is refused by type or size, never read") {
  test::TempDir dir("small-file");
  const std::string good = dir.path() + "/good.json";
  write_file(good, "{\"a\": 1}");
  CHECK(read_small_file(good, "--config " + good) == "{\"a\": 1}");
  write_file(dir.path() + "/empty.json", "");
  CHECK(read_small_file(dir.path() + "/empty.json", "x").empty());
  const std::string fifo = dir.path() + "/db.fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(error_of([&] { read_small_file(fifo, "--tuning-db " + fifo); }) ==
        "--tuning-db " + fifo + ": cannot read the file: it is a FIFO; expected a regular file of at most 16 MiB");
  CHECK(error_of([&] { read_small_file("/dev/zero", "/dev/zero"); }) ==
        "/dev/zero: cannot read the file: it is a character device; expected a regular file of at most 16 MiB");
  CHECK(contains(error_of([&] { read_small_file(dir.path(), dir.path()); }), "it is a directory"));
  const std::string big = dir.path() + "/big.json";
  write_file(big, "");
  fs::resize_file(big, kMaxSmallFileBytes + 1);  // sparse: nothing is written, nothing may be read
  CHECK(contains(error_of([&] { read_small_file(big, big); }),
                 fmt::format("it is {} bytes; expected a regular file of at most 16 MiB", kMaxSmallFileBytes + 1)));
  fs::resize_file(big, kMaxSmallFileBytes);
  CHECK(read_small_file(big, big).size() == kMaxSmallFileBytes);
  CHECK(contains(error_of([&] { read_small_file(dir.path() + "/absent", "--config x"); }),
                 "--config x: cannot read the file: No such file or directory"));
  const std::string link = dir.path() + "/link.json";  // a link to a regular file is followed
  REQUIRE(::symlink(good.c_str(), link.c_str()) == 0);
  CHECK(read_small_file(link, link) == "{\"a\": 1}");
}

TEST_CASE("fleet enumeration: a tuning database's choices for the arch are enumerated, named by the database") {
  // A variant neither the heuristics nor the shipped H200 database choose.
  const tuning::SparseMlaChoice mla{.tile = {.heads_per_cta = 32, .kernel = MlaKernel::mma_sync, .producer_warps = 2}};
  const nlohmann::json j = db_json(key_of("NVIDIA H200", 132), 64, {1, 4}, mla, {1, 1}, {65537, 262144},
                                   detail::TopkPlanConstraints{.threads = 256});
  tools::FleetConfig fleet;
  fleet.tps = {2};  // h_q 64
  fleet.archs = {Arch{90, 'a'}, Arch{100, 'a'}};
  const auto without = tools::enumerate_fleet_specs(fleet);
  fleet.tuning_dbs.push_back(tuning::parse_tuning_db(j.dump(), "test-db.json"));
  const auto with = tools::enumerate_fleet_specs(fleet);
  KernelSpec want = tuning::sparse_mla_spec_of(mla, 64, 2048, KvDtype::bf16, Arch{90, 'a'});
  auto find = [&](const std::vector<tools::FleetSpec>& list, const KernelSpec& s) -> const tools::FleetSpec* {
    for (const auto& f : list)
      if (f.spec == s) return &f;
    return nullptr;
  };
  CHECK(find(without, want) == nullptr);
  const tools::FleetSpec* found = find(with, want);
  REQUIRE(found != nullptr);
  CHECK(contains(found->origin, "tuning database: test-db.json: sparse MLA bucket test"));
  // The database is for sm_90a: nothing of it for sm_100a, and h_q outside the fleet is left out.
  want.arch = Arch{100, 'a'};
  CHECK(find(with, want) == nullptr);
  // The sparse MLA choice, and top-k's single long rows at 256 threads (exact sweeps over a cluster,
  // no heuristic choice) in its four forms on sm_90a.
  CHECK(with.size() == without.size() + 1 + 4);
  for (const char* name : {"topk.topk2048.t256.cluster_sweeps.sm_90a", "topk.topk2048.fused.ragged.t256.cluster_sweeps.sm_90a"})
    CHECK(std::ranges::any_of(with, [&](const tools::FleetSpec& f) {
      return readable_name(f.spec) == name && contains(f.origin, "top-k bucket");
    }));
  fleet.tps = {1};  // h_q 128: the database's h_q 64 choice is not for this fleet
  const auto h128 = tools::enumerate_fleet_specs(fleet);
  fleet.tuning_dbs.clear();
  CHECK(h128.size() == tools::enumerate_fleet_specs(fleet).size() + 4);  // the top-k choice is for any h_q
}

#ifdef NSAJIT_CLI_PATH
TEST_CASE("nsajit autotune: bad configs exit 2 naming file and field and write nothing; --dry-run lists candidates") {
  test::TempDir dir("tune-cli");
  const std::string db = dir.path() + "/db.json";
  nlohmann::json bad = small_config();
  bad["sparse_mla"]["search"]["producer_warp"] = {2};
  write_file(dir.path() + "/bad.json", bad.dump());
  CliResult r = run_cli("", "autotune --config " + dir.path() + "/bad.json --db " + db);
  CAPTURE(r.output);
  CHECK(r.code == 2);
  CHECK(contains(r.output, dir.path() + "/bad.json: sparse_mla.search.producer_warp: unknown field"));
  CHECK(!fs::exists(db));
  write_file(dir.path() + "/trunc.json", small_config().dump().substr(0, 100));
  r = run_cli("", "autotune --config " + dir.path() + "/trunc.json --db " + db);
  CHECK(r.code == 2);
  CHECK(contains(r.output, "trunc.json: not valid JSON"));
  CHECK(!fs::exists(db));
  write_file(dir.path() + "/good.json", small_config().dump());
  r = run_cli("", "autotune --config " + dir.path() + "/good.json --dry-run --sm-count 132 --arch sm_90a");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "topk bucket 8x131072"));
  CHECK(contains(r.output, "[heuristic] sparse_mla.h64.topk2048.kv_bf16"));
  CHECK(!fs::exists(db));
  // The repository's H200 config is valid.
  r = run_cli("", "autotune --config " NSAJIT_SOURCE_DIR "/tune/h200.json --dry-run --sm-count 132 --arch sm_90a");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "candidates in all"));
}

TEST_CASE("nsajit precompile --tuning-db: the database's choices are enumerated; a bad database exits 2") {
  test::TempDir dir("tune-precompile");
  const tuning::SparseMlaChoice mla{.tile = {.heads_per_cta = 32, .kernel = MlaKernel::mma_sync, .producer_warps = 0}};
  const nlohmann::json j = db_json(key_of("NVIDIA H200", 132), 128, {1, 4}, mla, {1, 1}, {65537, 262144}, {});
  write_file(dir.path() + "/db.json", j.dump());
  const std::string env = "NSAJIT_CACHE_DIR='" + dir.path() + "/cache'";
  CliResult r = run_cli(env, "precompile --tp 1 --check --quiet --manifest " + dir.path() + "/m.json --tuning-db " +
                                 dir.path() + "/db.json");
  CAPTURE(r.output);
  CHECK(r.code == 1);  // --check on an empty cache: every kernel missing
  std::ifstream in(dir.path() + "/m.json");
  const nlohmann::json manifest = nlohmann::json::parse(in);
  const std::string want = readable_name(tuning::sparse_mla_spec_of(mla, 128, 2048, KvDtype::bf16, Arch{90, 'a'}));
  bool found = false;
  for (const auto& k : manifest["kernels"])
    found = found || (k["name"] == want && contains(k["origin"].get<std::string>(), "db.json: sparse MLA bucket test"));
  CHECK(found);
  nlohmann::json bad = j;
  bad["families"]["sparse_mla"][0]["choice"]["heads_per_cta"] = 7;
  write_file(dir.path() + "/bad.json", bad.dump());
  r = run_cli(env, "precompile --tp 1 --check --quiet --tuning-db " + dir.path() + "/bad.json");
  CHECK(r.code == 2);
  CHECK(contains(r.output, "error: --tuning-db " + dir.path() + "/bad.json: families.sparse_mla[0].choice.heads_per_cta = 7"));
  // A file that cannot be read is named with where it came from: the flag, or the variable.
  r = run_cli(env, "precompile --tp 1 --check --quiet --tuning-db " + dir.path() + "/absent.json");
  CHECK(r.code == 2);
  CHECK(contains(r.output, "error: --tuning-db " + dir.path() + "/absent.json: cannot read the file"));
  r = run_cli(env + " NSAJIT_TUNING_DB='" + dir.path() + "/absent.json'", "precompile --tp 1 --check --quiet");
  CHECK(r.code == 2);
  CHECK(contains(r.output, "error: NSAJIT_TUNING_DB " + dir.path() + "/absent.json: cannot read the file"));
}

TEST_CASE("NSAJIT_TUNING_DB, --tuning-db and --config naming a FIFO or /dev/zero neither hang nor exhaust memory") {
  test::TempDir dir("tune-fifo");
  const std::string fifo = dir.path() + "/db.fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::string env = "NSAJIT_CACHE_DIR='" + dir.path() + "/cache'";
  CliResult r = run_cli(env + " NSAJIT_TUNING_DB='" + fifo + "' timeout 30", "info");
  CAPTURE(r.output);
  CHECK(r.code == 0);  // the database is ignored, as a malformed one is
  CHECK(contains(r.output, "tuning database " + fifo + " (NSAJIT_TUNING_DB): cannot read the file: it is a FIFO; "
                           "expected a regular file of at most 16 MiB: ignored"));
  // 4 GB of address space: a read of /dev/zero to its end would fail with std::bad_alloc.
  r = run_cli("ulimit -v 4000000; " + env + " NSAJIT_TUNING_DB=/dev/zero timeout 30", "info");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "/dev/zero (NSAJIT_TUNING_DB): cannot read the file: it is a character device"));
  for (const std::string& args : {"autotune --dry-run --config '" + fifo + "'", "precompile --config '" + fifo + "'",
                                  "precompile --check --tuning-db '" + fifo + "'", "run --config '" + fifo + "'"}) {
    r = run_cli(env + " timeout 30", args);
    CAPTURE(args);
    CHECK(r.code == 2);
    CHECK(contains(r.output, fifo + ": cannot read the file: it is a FIFO"));
  }
  r = run_cli(env + " NSAJIT_TUNING_DB=/dev/zero timeout 30", "precompile --check");
  CHECK(r.code == 2);
  CHECK(contains(r.output, "NSAJIT_TUNING_DB /dev/zero: cannot read the file: it is a character device"));
}

TEST_CASE("NSAJIT_TUNING_DB: a truncated or other-schema database is reported once, naming the file and field") {
  test::TempDir dir("tune-env");
  const nlohmann::json j = db_json(key_of("NVIDIA H200", 132), 64, {1, 4}, {}, {1, 1}, {65537, 262144}, {});
  write_file(dir.path() + "/trunc.json", j.dump().substr(0, 60));
  CliResult r = run_cli("NSAJIT_TUNING_DB=" + dir.path() + "/trunc.json", "info");
  CAPTURE(r.output);
  CHECK(r.code == 0);
  CHECK(count_of(r.output, "nsajit: tuning database") == 1);
  CHECK(contains(r.output, "trunc.json (NSAJIT_TUNING_DB): not valid JSON"));
  CHECK(contains(r.output, "tuning database: none ("));
  nlohmann::json other = j;
  other["schema"] = 7;
  write_file(dir.path() + "/other.json", other.dump());
  r = run_cli("NSAJIT_TUNING_DB=" + dir.path() + "/other.json", "info --json");
  CHECK(count_of(r.output, "nsajit: tuning database") == 1);
  CHECK(contains(r.output, "schema = 7: expected 1"));
  r = run_cli("NSAJIT_TUNING_DB=none", "info");
  CHECK(count_of(r.output, "nsajit: tuning database") == 0);
  CHECK(contains(r.output, "tuning database: none (NSAJIT_TUNING_DB \"none\")"));
}
#endif

// ---- GPU: the dispatcher applies a database's choices ------------------------------------------

namespace {

bool loaded(const std::string& name) {
  for (const KernelRecord& r : jit_records())
    if (r.name == name) return true;
  return false;
}

}  // namespace

TEST_CASE("tuning database gpu: sparse MLA and top-k dispatch take the database's choices; batch-invariant calls and another GPU's database do not") {
  NSAJIT_REQUIRE_GPU();
  test::TempDir dir("tune-gpu");
  const tuning::TuningKey here = tuning::current_key();
  if (here.arch != "sm_90a") {
    MESSAGE("skipped: the test's variants are sm_90a ones");
    return;
  }
  std::mt19937_64 rng(std::random_device{}());
  // Sparse MLA: h_q 64 rows 1..4 -> mma_sync, 16 heads per CTA, 2 producer warps, 4 splits (the
  // heuristics: wgmma at 64 heads per CTA).
  const tuning::SparseMlaChoice mla{.tile = {.heads_per_cta = 16, .kernel = MlaKernel::mma_sync, .producer_warps = 2},
                                    .num_splits = 4};
  // Top-k: one row of 131072 -> 2 CTAs per row at 256 threads (the heuristics: 16 CTAs, 512 threads).
  const detail::TopkPlanConstraints topk{.ctas_per_row = 2, .threads = 256};
  write_file(dir.path() + "/db.json",
             db_json(here, 64, {1, 4}, mla, {1, 1}, {65537, 262144}, topk).dump());
  set_tuning_db(dir.path() + "/db.json");
  CHECK(tuning_db_in_use() == dir.path() + "/db.json");

  const int rows = 3, h_q = 64, topk_n = 2048, slots = 4096;
  std::vector<std::uint16_t> q(std::size_t(rows) * h_q * 576), kv(std::size_t(slots) * 576);
  std::normal_distribution<float> normal;
  for (auto& x : q) x = reference::float_to_bf16(normal(rng));
  for (auto& x : kv) x = reference::float_to_bf16(normal(rng));
  std::vector<std::int32_t> idx(std::size_t(rows) * topk_n);
  for (auto& v : idx) v = std::int32_t(rng() % slots);
  DeviceBuffer<std::uint16_t> d_q(q), d_kv(kv), d_out(std::size_t(rows) * h_q * 512);
  DeviceBuffer<std::int32_t> d_idx(idx);
  DeviceBuffer<float> d_lse(std::size_t(rows) * h_q);
  CHECK(sparse_mla_num_splits(rows, h_q, topk_n) >= 4);
  DeviceBuffer<std::uint8_t> ws(sparse_mla_workspace_bytes(rows, h_q, topk_n));
  SparseMlaDecodeArgs a;
  a.q = d_q.get();
  a.kv = d_kv.get();
  a.num_slots = slots;
  a.indices = d_idx.get();
  a.out = d_out.get();
  a.lse = d_lse.get();
  a.rows = rows;
  a.h_q = h_q;
  a.topk = topk_n;
  a.sm_scale = 0.1f;
  a.workspace = ws.get();
  a.workspace_bytes = ws.bytes();
  CHECK(detail::plan_sparse_mla(a).num_splits == 4);
  // Batch-invariant calls do not consult the database (its choice for rows 1..4 would make a row's
  // bits depend on the batch size): the heuristics' 64-head wgmma kernel, one split.
  SparseMlaDecodeArgs invariant = a;
  invariant.workspace = nullptr;
  invariant.workspace_bytes = 0;
  const auto inv = detail::plan_sparse_mla(invariant);
  CHECK(inv.spec.tile.kernel == MlaKernel::wgmma);
  CHECK(inv.spec.tile.heads_per_cta == 64);
  CHECK(inv.num_splits == 1);
  d_out.poison();
  d_lse.poison();
  sparse_mla_decode(a);
  const KernelSpec chosen = tuning::sparse_mla_spec_of(mla, h_q, topk_n, KvDtype::bf16, Arch{90, 'a'});
  CHECK(loaded(readable_name(chosen)));
  reference::SparseMlaInput in{.q = q, .kv = kv, .num_slots = slots, .indices = idx, .rows = rows, .h_q = h_q,
                               .topk = topk_n, .sm_scale = 0.1};
  const auto cmp = reference::compare_sparse_mla(d_out.download(), d_lse.download(), reference::sparse_mla(in), rows, h_q);
  CHECK_MESSAGE(cmp.ok, cmp.message);

  std::vector<float> scores(131072);
  for (float& x : scores) x = normal(rng);
  DeviceBuffer<float> d_scores(scores);
  DeviceBuffer<std::int32_t> d_len(std::vector<std::int32_t>{131072}), d_top(topk_n);
  TopkArgs t{.scores = d_scores.get(), .lengths = d_len.get(), .out = d_top.get(), .rows = 1, .width = 131072,
             .topk = topk_n};
  // The database's plan (2-CTA clusters at 256 threads: the cluster_sweeps kernel), not the heuristics'.
  const detail::TopkPlanConstraints* tuned =
      detail::tuned_topk_constraints(1, 131072, topk_n, nsajit::ScoreDtype::fp32, here.sm_count);
  REQUIRE(tuned != nullptr);
  CHECK(tuned->ctas_per_row == 2);
  const TileConfig topk_tile = detail::topk_tile(
      detail::plan_topk_launch(1, 131072, topk_n, nsajit::ScoreDtype::fp32, here.sm_count, 16, *tuned));
  CHECK(topk_tile == TileConfig{.threads = 256, .algorithm = TopkAlgorithm::cluster_sweeps});
  KernelSpec topk_spec{.family = Family::topk, .topk = topk_n, .tile = topk_tile, .arch = Arch{90, 'a'}};
  d_top.poison();
  nsajit::topk(t);
  CHECK(loaded(readable_name(with_default_tile(topk_spec))));
  reference::TopkProblem p;
  p.scores = scores;
  p.lengths = {131072};
  p.rows = 1;
  p.width = 131072;
  p.topk = topk_n;
  CHECK(d_top.download() == reference::topk_index_order(p));

  // A database made for another GPU: ignored (heuristics), said in tuning_db_in_use.
  tuning::TuningKey other = here;
  other.gpu = "Some Other GPU";
  write_file(dir.path() + "/other.json", db_json(other, 64, {1, 4}, mla, {1, 1}, {65537, 262144}, topk).dump());
  set_tuning_db(dir.path() + "/other.json");
  detail::SparseMlaLaunchPlan heuristic;
  const std::string said = test::capture_stderr([&] {
    heuristic = detail::plan_sparse_mla(a);
    detail::plan_sparse_mla(a);
    nsajit::topk(t);
    CHECK(contains(tuning_db_in_use(), "made for Some Other GPU"));
  });
  CAPTURE(said);
  CHECK(count_of(said, "nsajit: tuning database") == 1);
  CHECK(contains(said, "other.json"));
  CHECK(heuristic.spec == detail::plan_sparse_mla(a, TileConfig{}).spec);
  CHECK(heuristic.spec.tile.kernel == MlaKernel::wgmma);
  set_tuning_db("none");
  CHECK(detail::plan_sparse_mla(a).spec == heuristic.spec);
  set_tuning_db("");
}

#ifdef NSAJIT_CLI_PATH
TEST_CASE("tuning database gpu: nsajit autotune on a small config writes a database for this GPU, nothing dropped") {
  NSAJIT_REQUIRE_GPU();
  const tuning::TuningKey here = tuning::current_key();
  if (here.arch != "sm_90a") {
    MESSAGE("skipped: the config's variants are sm_90a ones");
    return;
  }
  test::TempDir dir("tune-run");
  const std::string db = dir.path() + "/db.json";
  nlohmann::json config = small_config();
  config["sparse_mla"]["kv_tokens"] = 8192;  // the rows' context, recorded in each entry's shape
  write_file(dir.path() + "/config.json", config.dump());
  // Bounded: a candidate that never finishes fails this test (exit 124), not the whole suite's run.
  const CliResult r = run_cli("timeout 180", "autotune --config " + dir.path() + "/config.json --db " + db);
  CAPTURE(r.output);
  CHECK(r.code == 0);
  // Every candidate launches and matches the reference on this GPU (a drop here is a kernel bug).
  CHECK_FALSE(contains(r.output, ": dropped "));
  CHECK(contains(r.output, "autotune: "));
  std::ifstream in(db);
  REQUIRE(in);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const tuning::TuningDb parsed = tuning::parse_tuning_db(text, db);
  CHECK(tuning::key_mismatch(parsed.key, here).empty());
  CHECK(parsed.topk.size() == 1);
  CHECK(parsed.sparse_mla.size() == 4);  // h_q 16 and 64, rows [1, 4] and [5, null], bf16
  const nlohmann::json written = nlohmann::json::parse(text);
  REQUIRE(written["families"]["sparse_mla"].size() == 4);
  for (const nlohmann::json& e : written["families"]["sparse_mla"]) {
    CHECK(e["shape"]["num_slots"] == 8192);
    CHECK(!e["choice"].contains("schedule"));  // not searched: left to the dispatcher's rule per call
  }
  for (const tuning::SparseMlaTuningEntry& e : parsed.sparse_mla) CHECK(!e.choice.schedule_named);
}
#endif
