// test_tools.cpp — spec text, the fleet enumeration, cache administration, strict mode, and the
// nsajit tool's precompile and cache commands run as processes (CPU only).
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "cache/cache_admin.hpp"
#include "cache/cubin_cache.hpp"
#include "nsajit/errors.hpp"
#include "nsajit/jit.hpp"
#include "families/topk/heuristics.hpp"
#include "tests/cli_helpers.hpp"
#include "tests/spec_matrix.hpp"
#include "tests/test_dirs.hpp"
#include "tools/bench/anchors.hpp"
#include "tools/fleet_specs.hpp"
#include "tools/model_config.hpp"
#include "tools/tuning_config.hpp"

using namespace nsajit;
using namespace nsajit::test;  // contains, error_of, run_cli (tests/cli_helpers.hpp)
namespace fs = std::filesystem;

namespace {

// Random bytes standing in for a cubin (the cache does not look inside).
std::vector<char> random_bytes(std::mt19937_64& rng, std::size_t n) {
  std::vector<char> out(n);
  for (char& c : out) c = char(rng());
  return out;
}

CacheKey key_for(const std::string& source) {
  return make_cache_key({.nsajit_version = version(), .nvrtc_version = nvrtc_version(), .arch = "sm_90a",
                         .options = {"--gpu-architecture=sm_90a"}, .source = source});
}

// `n` entries of random bytes (size `bytes`, plus up to `extra`) named <tag><i>.sm_90a; their paths.
std::vector<std::string> store_random_entries(const CubinCache& cache, const std::string& tag, int n,
                                              std::size_t bytes, std::size_t extra, std::mt19937_64& rng) {
  std::vector<std::string> paths;
  for (int i = 0; i < n; ++i) {
    const std::string name = tag + std::to_string(i) + ".sm_90a";
    const CacheKey key = key_for(name + " " + std::to_string(rng()));
    REQUIRE(cache.store(name, key, random_bytes(rng, bytes + (extra ? rng() % extra : 0))));
    paths.push_back(cache.entry_path(name, key));
  }
  return paths;
}

// A fresh cache directory holding `n` random entries (see store_random_entries); the shared setup of the tool tests.
struct RandomCache {
  test::TempDir tmp;
  const std::string& dir;
  const CubinCache cache;
  std::mt19937_64 rng;
  const std::vector<std::string> paths;
  RandomCache(const std::string& name, const std::string& tag, int n, std::size_t bytes, std::size_t extra)
      : tmp(name), dir(tmp.path()), cache(dir), rng(std::random_device{}()),
        paths(store_random_entries(cache, tag, n, bytes, extra, rng)) {}
};

void set_times(const std::string& path, std::int64_t seconds_ago) {
  const std::time_t t = std::time(nullptr) - seconds_ago;
  const timespec times[2] = {{t, 0}, {t, 0}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

#ifdef NSAJIT_CLI_PATH
nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

// Cheap kernels (tens of milliseconds each) for the process tests.
const char* const kCheapSpecs =
    "--spec index_transform.decode.ps64.topk2048.sm_90a --spec fp8_kv_quantize.ps64.sm_90a "
    "--spec sparse_mla_combine.sm_90a";
#endif

}  // namespace

TEST_CASE("spec text: readable names and canonical text parse back to the same spec") {
  std::vector<KernelSpec> specs = test::deepseek_v32_matrix();
  tools::FleetConfig fleet;
  fleet.tps = {1, 2, 4, 8};
  fleet.archs = {Arch{90, 'a'}, Arch{100, 'a'}};
  fleet.next_ns = {1, 2, 4};
  fleet.sorted_topk = true;
  fleet.score_dtypes = {ScoreDtype::fp32, ScoreDtype::bf16};
  for (const tools::FleetSpec& f : tools::enumerate_fleet_specs(fleet)) specs.push_back(f.spec);
  for (KvDtype kv : {KvDtype::bf16, KvDtype::fp8_e4m3})
    for (int h_q : {16, 128})
      specs.push_back(with_default_tile({.family = Family::sparse_mla, .h_q = h_q, .kv_dtype = kv, .precise = true}));
  for (const KernelSpec& s : specs) {
    INFO(canonical_text(s));
    CHECK(parse_spec_text(readable_name(s)) == s);
    CHECK(parse_spec_text(canonical_text(s)) == s);
  }
  // Canonical text may leave fields at their defaults; the arch comes from the caller then.
  CHECK(parse_spec_text("family=topk topk=1024", Arch{100, 'a'}) ==
        with_default_tile({.family = Family::topk, .topk = 1024, .arch = {100, 'a'}}));
}

TEST_CASE("spec text: bad input names the part and what is expected") {
  CHECK(contains(error_of([] { parse_spec_text("toppk.topk2048.sm_90a"); }), "\"toppk\": expected a family"));
  CHECK(contains(error_of([] { parse_spec_text("topk.topk2048.sm_70"); }), "\"sm_70\": expected an arch"));
  CHECK(contains(error_of([] { parse_spec_text("topk.topk2048.blue.sm_90a"); }), "\"blue\""));
  CHECK(contains(error_of([] { parse_spec_text("family=topk colour=3"); }), "\"colour\""));
  CHECK(contains(error_of([] { parse_spec_text("family=topk topk=2048 topk=1024"); }),
                 "\"topk=1024\": expected each field once (topk is given twice)"));
  CHECK(contains(error_of([] { parse_spec_text("family=topk family=sparse_mla h_q=16"); }), "family is given twice"));
  CHECK(contains(error_of([] { parse_spec_text("family=topk topk=2x"); }), "expected an integer"));
  // Validation of the parsed spec: the field and value.
  CHECK(contains(error_of([] { parse_spec_text("topk.topk100.sm_90a"); }), "topk = 100"));
  // A name nsajit would not write (the default tile spelled out) is refused with the right one.
  const std::string e = error_of([] { parse_spec_text("topk.topk2048.t512.sm_90a"); });
  CHECK(contains(e, "topk.topk2048.sm_90a"));
}

TEST_CASE("spec text: a lazy default arch is asked only when the text names none, after its fields") {
  int asked = 0;
  const std::function<Arch()> sm100a = [&] { return ++asked, Arch{100, 'a'}; };
  const std::function<Arch()> no_gpu = [&]() -> Arch { ++asked; throw Error("no GPU here"); };
  CHECK(parse_spec_text("topk.topk2048.sm_90a", sm100a).arch == Arch{90, 'a'});
  CHECK(parse_spec_text("family=topk arch=sm_90a", sm100a).arch == Arch{90, 'a'});
  CHECK(asked == 0);
  // sm_100a's own defaults (mma_sync, no wgmma), not sm_90a's: producer_warps=0 is wrong only for wgmma.
  const KernelSpec s = parse_spec_text("family=sparse_mla h_q=64 producer_warps=0", sm100a);
  CHECK(asked == 1);
  CHECK(s == parse_spec_text("family=sparse_mla h_q=64 producer_warps=0", Arch{100, 'a'}));
  CHECK(s.arch == Arch{100, 'a'});
  // Without an answer (no GPU), a misspelled or bad field is named, not the missing GPU.
  CHECK(contains(error_of([&] { parse_spec_text("family=topk threds=512", no_gpu); }), "\"threds\""));
  const std::string sm90a_only = error_of([&] { parse_spec_text("family=topk topk=100", no_gpu); });
  CHECK(contains(sm90a_only, "topk = 100"));
  CHECK(contains(sm90a_only, "checked for sm_90a"));
  CHECK(contains(sm90a_only, "no GPU here"));
  CHECK(contains(error_of([&] { parse_spec_text("family=topk topk=2048", no_gpu); }), "no GPU here"));
}

TEST_CASE("fleet enumeration: every family, KV dtype, tp, arch and MTP depth, each spec once") {
  tools::FleetConfig fleet;
  fleet.tps = {1, 2, 4, 8};
  fleet.archs = {Arch{90, 'a'}, Arch{100, 'a'}};
  fleet.next_ns = {1, 2, 4};
  const std::vector<tools::FleetSpec> all = tools::enumerate_fleet_specs(fleet);
  std::set<std::string> names;
  std::vector<tools::FleetSpec> specs;  // the heuristics' (the shipped tuning databases add theirs)
  for (const tools::FleetSpec& f : all) {
    CHECK(names.insert(readable_name(f.spec)).second);  // no duplicates
    CHECK_NOTHROW(validate(f.spec));
    CHECK((f.origin.starts_with("heuristics: ") || f.origin.starts_with("tuning database: ")));
    if (f.origin.starts_with("heuristics: ")) specs.push_back(f);
  }
  for (const char* arch : {"sm_90a", "sm_100a"}) {
    const std::string a = std::string(".") + arch;
    for (int h : {128, 64, 32, 16})
      for (const char* kv : {"bf16", "fp8"})
        CHECK(std::ranges::any_of(names, [&](const std::string& n) {
          return n.starts_with(fmt::format("sparse_mla.h{}.topk2048.kv_{}.", h, kv)) && n.ends_with(a);
        }));
    CHECK(names.contains("sparse_mla_combine" + a));
    // Every kernel tile top-k's plan picks (families/topk/heuristics.cpp), in every form.
    for (const char* t : {"", ".t1024", ".t1024.cluster_sweeps", ".t1024.cluster_lists", ".cluster_lists",
                          ".t256.dense_registers", ".speculative_sweep", ".t1024.speculative_sweep"}) {
      CHECK(names.contains("topk.topk2048" + std::string(t) + a));
      for (const char* n : {"", ".n2", ".n4"})
        CHECK(names.contains("topk.topk2048.fused.decode.ps64" + std::string(n) + t + a));
      CHECK(names.contains("topk.topk2048.fused.prefill.ps64" + std::string(t) + a));
      CHECK(names.contains("topk.topk2048.fused.ragged" + std::string(t) + a));
    }
    for (const char* m : {"decode.ps64", "prefill.ps64", "ragged.ps1"})
      CHECK(names.contains(fmt::format("index_transform.{}.topk2048{}", m, a)));
    CHECK(names.contains("fp8_kv_quantize.ps64" + a));
    CHECK(names.contains("fp8_kv_gather.ps64" + a));
  }
  // sm_90a's 64-head CTAs take the wgmma kernel, sm_100a's the mma.sync kernel: different specs.
  int wgmma = 0;
  for (const tools::FleetSpec& f : specs) wgmma += f.spec.family == Family::sparse_mla && f.spec.tile.kernel == MlaKernel::wgmma;
  CHECK(wgmma == 4);  // h128 and h64, bf16 (the seesaw) and fp8, on sm_90a only
  // bf16 at 64 heads a CTA: the seesaw the dispatcher takes (sparse_mla::default_schedule), not the single schedule.
  CHECK(names.contains("sparse_mla.h128.topk2048.kv_bf16.wgmma.hpc64.pw4.seesaw.sm_90a"));
  CHECK(names.contains("sparse_mla.h64.topk2048.kv_bf16.wgmma.hpc64.pw4.seesaw.sm_90a"));
  CHECK(!names.contains("sparse_mla.h64.topk2048.kv_bf16.wgmma.hpc64.pw4.sm_90a"));
  CHECK(specs.size() == 4 * 2 + 8 + 6 * 8 * 2 + 1 * 2 + 3 * 2 + 2 * 2);  // MLA, top-k, combine, transform, FP8

  tools::FleetConfig bad = fleet;
  bad.tps = {1, 3};
  CHECK(contains(error_of([&] { tools::enumerate_fleet_specs(bad); }), "tp = 3"));
  bad.tps = {1};
  bad.next_ns = {9};
  CHECK(contains(error_of([&] { tools::enumerate_fleet_specs(bad); }), "--next-n: 9"));
}

TEST_CASE("fleet enumeration holds every top-k kernel tile the launch plan picks on random shapes, either dtype") {
  tools::FleetConfig fleet;
  fleet.score_dtypes = {ScoreDtype::fp32, ScoreDtype::bf16};
  const std::vector<tools::FleetSpec> specs = tools::enumerate_fleet_specs(fleet);
  std::vector<std::pair<TileConfig, ScoreDtype>> kernels;
  for (const tools::FleetSpec& f : specs)
    if (f.spec.family == Family::topk && !f.spec.fused_transform && f.spec.arch == Arch{90, 'a'})
      kernels.push_back({f.spec.tile, f.spec.score_dtype});
  std::mt19937_64 rng(std::random_device{}());
  for (int i = 0; i < 20000; ++i) {
    const int rows = 1 + int(rng() % 70000);
    const int width = 1 + int(rng() % detail::kMaxTopkWidth);
    const ScoreDtype dtype = rng() % 2 ? ScoreDtype::bf16 : ScoreDtype::fp32;
    // Any SM count (MIG slices, parts the fleet does not name), not only the ones it enumerates at.
    const int sm = rng() % 2 ? std::vector<int>{132, 114, 78}[rng() % 3] : 8 + int(rng() % 193);
    const detail::TopkLaunchPlan plan = detail::plan_topk_launch(rows, width, 2048, dtype, sm, rng() % 2 ? 16 : 8);
    INFO(rows, " x ", width, " ", to_string(dtype), " at ", sm, " SMs: ", detail::to_string(plan));
    KernelSpec s{.family = Family::topk, .score_dtype = dtype, .tile = detail::topk_tile(plan)};
    s = with_default_tile(s);
    REQUIRE(std::find(kernels.begin(), kernels.end(), std::pair{s.tile, dtype}) != kernels.end());
  }
}

TEST_CASE("nsajit run's precompile list: top-k's tile at any SM count (MIG slices), the tuning databases' top-k choices") {
  for (const auto& [tp, batch, arch] : {std::tuple{1, 64, Arch{90, 'a'}}, std::tuple{8, 64, Arch{100, 'a'}},
                                        std::tuple{2, 8, Arch{90, 'a'}}, std::tuple{1, 1, Arch{100, 'a'}}}) {
    tools::ModelConfig c;
    c.tp = tp;
    c.batch = batch;
    std::vector<const tuning::TuningDb*> dbs;
    for (const tuning::TuningDb& db : tuning::shipped_tuning_dbs()) dbs.push_back(&db);
    const std::vector<KernelSpec> specs = tools::decode_step_specs(c, arch, dbs);
    auto has = [&](const KernelSpec& s) { return std::find(specs.begin(), specs.end(), s) != specs.end(); };
    // The run's sparse MLA calls are batch-invariant: on sm_90a at 64 and 128 heads, bf16 takes the seesaw.
    KernelSpec seesaw = with_default_tile({.family = Family::sparse_mla, .h_q = c.h_q(), .topk = c.index_topk, .arch = arch});
    seesaw.tile.schedule = MlaSchedule::seesaw;
    CHECK(has(seesaw) == (arch == Arch{90, 'a'} && c.h_q() >= 64));
    // ... and never a tuning database's variant: every sparse MLA spec is the heuristics' tile.
    for (const KernelSpec& s : specs)
      if (s.family == Family::sparse_mla) {
        KernelSpec heuristic = with_default_tile({.family = Family::sparse_mla, .h_q = s.h_q, .topk = s.topk,
                                                  .kv_dtype = s.kv_dtype, .arch = arch});
        heuristic.tile.schedule = s.tile.schedule;
        CHECK(s == heuristic);
      }
    for (const int sm_count : {1, 7, 16, 32, 60, 64, 78, 100, 114, 132, 200}) {
      for (const int max_cluster : {16, 8}) {
        INFO("tp " << tp << ", batch " << batch << ", " << to_string(arch) << ", " << sm_count << " SMs, clusters of at most "
                   << max_cluster);
        const detail::TopkLaunchPlan plan =
            detail::plan_topk_launch(c.batch, c.max_context, c.index_topk, ScoreDtype::fp32, sm_count, max_cluster);
        KernelSpec topk{.family = Family::topk, .topk = c.index_topk, .tile = detail::topk_tile(plan), .arch = arch};
        CHECK(has(with_default_tile(topk)));
      }
    }
    for (const tuning::TuningDb* db : dbs) {
      const detail::TopkTuningEntry* e =
          detail::find_topk_entry(db->topk, c.batch, c.max_context, c.index_topk, ScoreDtype::fp32);
      if (db->key.arch != to_string(arch) || e == nullptr) continue;
      INFO(db->origin << ", top-k bucket " << e->bucket.name);
      const detail::TopkLaunchPlan plan =
          detail::plan_topk_launch(c.batch, c.max_context, c.index_topk, ScoreDtype::fp32, db->key.sm_count, 16,
                                   e->choice);
      CHECK(has(with_default_tile({.family = Family::topk, .topk = c.index_topk, .tile = detail::topk_tile(plan), .arch = arch})));
    }
    std::set<std::string> names;
    for (const KernelSpec& s : specs) CHECK(names.insert(readable_name(s)).second);  // each once
  }
}

TEST_CASE("precompile lists a tuning database's sparse MLA choice only for a topk its kernel takes") {
  tuning::TuningDb db;
  db.origin = "test.json";
  db.key.arch = to_string(Arch{90, 'a'});
  db.sparse_mla = {{.bucket = {.name = "h64 seesaw", .h_q = 64, .kv_dtype = KvDtype::bf16, .rows = {1, 8192}, .topk = {64, 4096}},
                    .choice = {.tile = {.threads = 384, .block_tokens = 64, .heads_per_cta = 64, .kernel = MlaKernel::wgmma,
                                        .producer_warps = 4, .schedule = MlaSchedule::seesaw}}}};
  const std::vector<tools::DbSpec> at_2048 = tools::tuning_db_specs(db, Arch{90, 'a'}, 2048);
  REQUIRE(at_2048.size() == 1);
  CHECK(at_2048[0].spec.tile.schedule == MlaSchedule::seesaw);
  CHECK(tools::tuning_db_specs(db, Arch{90, 'a'}, 2112).empty());  // 2112 % 128 = 64: the seesaw refuses it
  // A choice that leaves the schedule open lists the one the dispatcher takes (sparse_mla::default_schedule).
  db.sparse_mla[0].choice.tile.schedule = MlaSchedule::single;
  REQUIRE(!tuning::schedule_chosen(db.sparse_mla[0].choice));
  const std::vector<tools::DbSpec> open = tools::tuning_db_specs(db, Arch{90, 'a'}, 2048);
  REQUIRE(open.size() == 1);
  CHECK(open[0].spec.tile.schedule == MlaSchedule::seesaw);
  db.sparse_mla[0].choice.schedule_named = true;  // a searched "single" stays single
  CHECK(tools::tuning_db_specs(db, Arch{90, 'a'}, 2048)[0].spec.tile.schedule == MlaSchedule::single);
}

TEST_CASE("top-k plans load a kernel compiled for their CTA layout, under any constraints") {
  // The kernel's C is 1 unless its algorithm is a cluster one (then max(ctas_per_row, 2)); the dense
  // and cluster-list paths exist at 256 and >= 512 threads only (templates/topk.cuh).
  using detail::TopkPlanConstraints;
  using A = TopkAlgorithm;
  const std::vector<TopkPlanConstraints> used = {  // tests/test_topk_gpu.cpp's and the tuning search's
      {}, {.ctas_per_row = 1, .force_streaming = true}, {.force_streaming = true},
      {.ctas_per_row = 1, .threads = 256, .dense_registers = 1}, {.prefetch_slice = 0}, {.prefetch_slice = 1},
      {.speculate = 0}, {.algorithm = A::exact_sweeps}, {.algorithm = A::cluster_sweeps},
      {.algorithm = A::cluster_lists}, {.algorithm = A::speculative_sweep}, {.algorithm = A::dense_registers},
      {.ctas_per_row = 1, .threads = 256, .algorithm = A::dense_registers}, {.cand_capacity = 64},
      {.slots_per_thread = 0}, {.ctas_per_row = 16}, {.ctas_per_row = 2, .speculate = 0},
      {.ctas_per_row = 1, .speculate = 1}, {.ctas_per_row = 1, .speculate = 0}, {.ctas_per_row = 8, .prefetch_slice = 1},
      {.ctas_per_row = 1, .threads = 1024, .speculate = 1}, {.ctas_per_row = 1, .threads = 128, .speculate = 1}};
  std::mt19937_64 rng(std::random_device{}());
  int planned = 0;
  for (int i = 0; i < 40000; ++i) {
    const int rows = rng() % 2 ? 1 + int(rng() % 300) : 1 + int(rng() % 70000);
    const int width = rng() % 3 ? 1 + int(rng() % detail::kMaxTopkWidth) : 1 + int(rng() % 40000);
    const int topk = 64 * (1 + int(rng() % 64));
    const int sm = 8 + int(rng() % 193);
    TopkPlanConstraints c = used[rng() % used.size()];
    if (rng() % 4 == 0) {  // random switches on top
      c.ctas_per_row = std::vector<int>{0, 1, 2, 4, 8, 16}[rng() % 6];
      c.threads = std::vector<int>{0, 128, 256, 512, 1024}[rng() % 5];
      c.speculate = int(rng() % 3) - 1;
      c.dense_registers = int(rng() % 3) - 1;
      c.prefetch_row = int(rng() % 3) - 1;
    }
    detail::TopkLaunchPlan plan;
    try {
      plan = detail::plan_topk_launch(rows, width, topk, ScoreDtype::fp32, sm, rng() % 2 ? 16 : 8, c);
    } catch (const std::invalid_argument&) {
      continue;  // a constraint the shape cannot take: refused before any launch
    }
    ++planned;
    INFO(rows, " x ", width, " topk ", topk, " at ", sm, " SMs: ", detail::to_string(plan));
    const bool clustered = plan.algorithm == A::cluster_sweeps || plan.algorithm == A::cluster_lists;
    REQUIRE(clustered == (plan.cluster_size > 1));
    if (plan.algorithm == A::dense_registers) REQUIRE((plan.threads == 256 && plan.slice <= 9212));
    if (plan.algorithm == A::cluster_lists) REQUIRE(plan.threads >= 512);
    KernelSpec s{.family = Family::topk, .topk = topk, .tile = detail::topk_tile(plan)};
    CHECK_NOTHROW(validate(with_default_tile(s)));
  }
  CHECK(planned > 20000);
}

TEST_CASE("cache verify names a flipped byte and a truncated entry; --fix removes only those") {
  RandomCache fx("verify", "kernel", 4, 1000, 5000);
  const std::string& dir = fx.dir;
  std::mt19937_64& rng = fx.rng;
  const std::vector<std::string>& paths = fx.paths;
  CHECK(verify_cache(dir, false).corrupt.empty());
  CHECK(verify_cache(dir, false).checked == 4);
  const auto size0 = fs::file_size(paths[0]);
  {  // a byte flipped somewhere in the cubin
    std::fstream f(paths[0], std::ios::in | std::ios::out | std::ios::binary);
    const std::streamoff at = std::streamoff(size0 - 1 - rng() % 900);
    f.seekg(at);
    const char c = char(f.get());
    f.seekp(at);
    f.put(char(c ^ 0x01));
  }
  fs::resize_file(paths[1], fs::file_size(paths[1]) - 1 - rng() % 500);  // truncated
  const VerifyResult r = verify_cache(dir, false);
  REQUIRE(r.corrupt.size() == 2);
  std::map<std::string, std::string> corrupt(r.corrupt.begin(), r.corrupt.end());
  CHECK(corrupt[paths[0]] == "cubin checksum mismatch");
  CHECK(contains(corrupt[paths[1]], "truncated"));
  CHECK(r.removed.empty());
  CHECK(fs::exists(paths[0]));
#ifdef NSAJIT_CLI_PATH
  const CliResult cli = run_cli("", "cache --dir '" + dir + "' verify");
  CHECK(cli.code == 1);
  CHECK(contains(cli.output, paths[0]));
  CHECK(contains(cli.output, paths[1]));
  CHECK_FALSE(contains(cli.output, paths[2]));
#endif
  const VerifyResult fixed = verify_cache(dir, true);
  CHECK(fixed.removed.size() == 2);
  CHECK_FALSE(fs::exists(paths[0]));
  CHECK_FALSE(fs::exists(paths[1]));
  CHECK(fs::exists(paths[2]));
  CHECK(fs::exists(paths[3]));
  CHECK(verify_cache(dir, false).corrupt.empty());
}

TEST_CASE("cache prune: entries used within the same second go least recently used first") {
  RandomCache fx("prune-ns", "k", 4, 4096, 0);
  const std::vector<std::string>& paths = fx.paths;
  // One second for all four, used in the order k2, k0, k3, k1 (hundreds of milliseconds apart).
  const std::time_t second = std::time(nullptr) - 60;
  const long order_ns[4] = {200000000, 800000000, 100000000, 500000000};
  for (int i = 0; i < 4; ++i) {
    const timespec times[2] = {{second, order_ns[i]}, {second, order_ns[i]}};
    REQUIRE(::utimensat(AT_FDCWD, paths[i].c_str(), times, 0) == 0);
    struct stat st {};
    REQUIRE(::stat(paths[i].c_str(), &st) == 0);
    if (st.st_mtim.tv_nsec != order_ns[i]) {
      MESSAGE("skipped: this filesystem keeps whole-second times");
      return;
    }
  }
  const std::uint64_t entry_size = fs::file_size(paths[0]);
  const PruneResult r = prune_cache(fx.dir, {.max_bytes = 2 * entry_size});
  CHECK_FALSE(fs::exists(paths[2]));
  CHECK_FALSE(fs::exists(paths[0]));
  CHECK(fs::exists(paths[3]));
  CHECK(fs::exists(paths[1]));
  CHECK(r.removed_entries.size() == 2);
}

TEST_CASE("cache scan: a last use past 2262 (beyond nanoseconds in 64 bits) keeps its date and sorts last") {
  RandomCache fx("scan-2300", "k", 2, 4096, 0);
  const std::time_t year_2300 = 10413792000;  // 2300-01-01 UTC
  const timespec times[2] = {{year_2300, 0}, {year_2300, 0}};
  struct stat st {};
  if (::utimensat(AT_FDCWD, fx.paths[0].c_str(), times, 0) != 0 || ::stat(fx.paths[0].c_str(), &st) != 0 ||
      st.st_mtime != year_2300) {  // some filesystems clamp the time (to 2038) without failing
    MESSAGE("skipped: this filesystem cannot store the year 2300");
    return;
  }
  const CacheScan scan = scan_cache(fx.dir);
  REQUIRE(scan.entries.size() == 2);
  for (const CacheEntryInfo& e : scan.entries)
    if (e.path == fx.paths[0]) CHECK(e.last_used == year_2300);
  const std::uint64_t entry_size = fs::file_size(fx.paths[0]);
  prune_cache(fx.dir, {.max_bytes = entry_size});  // the other entry is the least recently used
  CHECK(fs::exists(fx.paths[0]));
  CHECK_FALSE(fs::exists(fx.paths[1]));
}

TEST_CASE("cache prune: least recently used first, entries being built kept, orphan files removed") {
  RandomCache fx("prune", "k", 5, 4096, 0);
  const std::string& dir = fx.dir;
  const std::vector<std::string>& paths = fx.paths;
  for (int i = 0; i < 5; ++i) set_times(paths[i], 1000 * (5 - i));  // k0 the least recently used
  const std::uint64_t entry_size = fs::file_size(paths[0]);
  // k1 is being rebuilt by "another process": its lock is held (flock is per open file).
  const int held = ::open((paths[1] + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(held >= 0);
  REQUIRE(::flock(held, LOCK_EX) == 0);
  // Orphans: an old lock without an entry, an old temporary file, and a fresh temporary file.
  const std::string orphan_lock = dir + "/gone.0123456789abcdef0123456789abcdef.cubin.lock";
  const std::string old_temp = paths[2] + ".tmp.99999.00000000deadbeef";
  const std::string new_temp = paths[2] + ".tmp.99999.00000000feedface";
  for (const std::string& p : {orphan_lock, old_temp, new_temp}) std::ofstream(p) << "x";
  set_times(orphan_lock, 3600);
  set_times(old_temp, 3600);

  // Keep three entries' worth: k0 goes, k1 is held (kept), so k2 goes too.
  const PruneResult r = prune_cache(dir, {.max_bytes = 3 * entry_size});
  CHECK_FALSE(fs::exists(paths[0]));
  CHECK(fs::exists(paths[1]));
  CHECK_FALSE(fs::exists(paths[2]));
  CHECK(fs::exists(paths[3]));
  CHECK(fs::exists(paths[4]));
  CHECK(r.in_use == std::vector<std::string>{paths[1]});
  CHECK(r.removed_entries.size() == 2);
  CHECK(r.entry_bytes_after == 3 * entry_size);
  CHECK_FALSE(fs::exists(orphan_lock));
  CHECK_FALSE(fs::exists(old_temp));
  CHECK(fs::exists(new_temp));  // its writer may still be running
  ::close(held);

  // --older-than: entries unused for longer than the bound (k1 4000 s ago, k3 2000, k4 1000).
  prune_cache(dir, {.older_than_days = 1500.0 / 86400});
  CHECK_FALSE(fs::exists(paths[1]));  // no longer held
  CHECK_FALSE(fs::exists(paths[3]));
  CHECK(fs::exists(paths[4]));
  CHECK(scan_cache(dir).entries.size() == 1);
  CHECK(contains(error_of([] { parse_byte_count("12Q", "--max-size"); }), "--max-size = \"12Q\""));
  CHECK(parse_byte_count("2G", "x") == (2ull << 30));
}

TEST_CASE("cache prune, clear and verify --fix never follow a planted lock-file link or wait on a FIFO lock") {
  RandomCache fx("lock-link", "k", 3, 1000, 0);
  const std::string& dir = fx.dir;
  const std::vector<std::string>& paths = fx.paths;
  const test::TempDir elsewhere("lock-target");
  const std::string target = elsewhere.path() + "/created-through-the-lock-link";
  REQUIRE(::symlink(target.c_str(), (paths[0] + ".lock").c_str()) == 0);
  REQUIRE(::mkfifo((paths[1] + ".lock").c_str(), 0600) == 0);
  fs::resize_file(paths[0], 10);  // corrupt, for verify --fix
  fs::resize_file(paths[1], 10);

  const VerifyResult v = verify_cache(dir, true);
  CHECK(v.removed.empty());
  std::map<std::string, std::string> bad_lock(v.bad_lock.begin(), v.bad_lock.end());
  CHECK(bad_lock[paths[0]] == "it is a symbolic link");
  CHECK(bad_lock[paths[1]] == "it is a FIFO, not a regular file");
  CHECK_FALSE(fs::exists(target));

  const PruneResult r = prune_cache(dir, {.everything = true});  // `nsajit cache clear`
  CHECK_FALSE(fs::exists(target));
  CHECK(fs::exists(paths[0]));  // kept: its lock cannot be taken
  CHECK(fs::exists(paths[1]));
  CHECK_FALSE(fs::exists(paths[2]));
  CHECK(r.bad_lock.size() == 2);
  CHECK(r.in_use.empty());
#ifdef NSAJIT_CLI_PATH
  const CliResult cli = run_cli("timeout 60", "cache --dir '" + dir + "' clear");
  CHECK(cli.code == 1);
  CHECK(contains(cli.output, "kept (its lock file: it is a symbolic link): " + paths[0]));
  CHECK(contains(cli.output, "kept (its lock file: it is a FIFO, not a regular file): " + paths[1]));
  CHECK_FALSE(fs::exists(target));
#endif
}

#ifdef NSAJIT_CLI_PATH
TEST_CASE("cache clear, prune and verify --fix refuse a directory the cache would not trust; list and verify warn") {
  RandomCache fx("untrusted-admin", "k", 2, 1000, 0);
  const std::string& dir = fx.dir;
  fs::resize_file(fx.paths[0], 10);  // corrupt, for verify --fix
  REQUIRE(::chmod(dir.c_str(), 0777) == 0);
  for (const char* sub : {"clear", "prune --max-size 0", "prune --older-than 0", "verify --fix"}) {
    const CliResult r = run_cli("", "cache --dir '" + dir + "' " + sub);
    INFO(sub, ": ", r.output);
    CHECK(r.code == 2);
    CHECK(contains(r.output, "not removing anything from the cache directory " + dir + ": its mode 0777"));
    CHECK(fs::exists(fx.paths[0]));
    CHECK(fs::exists(fx.paths[1]));
  }
  for (const char* sub : {"list", "stats", "verify"}) {
    const CliResult r = run_cli("", "cache --dir '" + dir + "' " + sub);
    INFO(sub, ": ", r.output);
    CHECK(r.code == (std::string(sub) == "verify" ? 1 : 0));
    CHECK(contains(r.output, "warning: the cache directory " + dir + " is not used by nsajit (its mode 0777"));
  }
  CHECK(contains(error_of([&] { prune_cache(dir, {.everything = true}); }), dir));
  REQUIRE(::chmod(dir.c_str(), 0700) == 0);
  const CliResult r = run_cli("", "cache --dir '" + dir + "' clear");
  CHECK(r.code == 0);
  CHECK_FALSE(contains(r.output, "warning"));
  CHECK(scan_cache(dir).entries.empty());
}
#endif

TEST_CASE("strict mode: a missing cubin is an error naming the kernel and the precompile command") {
  // A spec no other test uses, so neither this process's memory nor its disk cache has it; in a
  // child, so strict mode does not leak into the other tests.
  const KernelSpec spec = with_default_tile({.family = Family::topk, .topk = 1856});
  for (const auto& f : fs::directory_iterator(cache_dir()))
    if (f.path().filename().string().starts_with(readable_name(spec) + ".")) fs::remove(f.path());
  int pipe_fd[2];
  REQUIRE(::pipe(pipe_fd) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(pipe_fd[0]);
    std::string message = "no error";
    set_strict_mode(true);
    try {
      precompile(spec);
    } catch (const KernelNotPrecompiled& e) {
      message = std::string("KernelNotPrecompiled: ") + e.what();
    } catch (const std::exception& e) {
      message = e.what();
    }
    (void)!::write(pipe_fd[1], message.data(), message.size());
    _exit(0);
  }
  ::close(pipe_fd[1]);
  std::string message;
  char buf[1024];
  for (ssize_t n; (n = ::read(pipe_fd[0], buf, sizeof buf)) > 0;) message.append(buf, std::size_t(n));
  ::close(pipe_fd[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO(message);
  CHECK(message.starts_with("KernelNotPrecompiled: "));
  CHECK(contains(message, "kernel topk.topk1856.sm_90a is not in the cache"));
  CHECK(contains(message, "nsajit precompile --spec topk.topk1856.sm_90a"));
  // Nothing was compiled or written.
  for (const auto& f : fs::directory_iterator(cache_dir()))
    CHECK_FALSE(f.path().filename().string().starts_with(readable_name(spec) + "."));
}

#ifdef NSAJIT_CLI_PATH
TEST_CASE("NSAJIT_NO_JIT=1: `nsajit run` fails naming the first kernel it lacks; bad values are named") {
  const test::TempDir dir_tmp("nojit");
  const std::string& dir = dir_tmp.path();
  const CliResult r = run_cli("NSAJIT_NO_JIT=1 NSAJIT_CACHE_DIR='" + dir + "'", "run --arch sm_90a");
  INFO(r.output);
  CHECK(r.code != 0);
  CHECK(contains(r.output, "is not in the cache " + dir));
  CHECK(contains(r.output, "nsajit precompile --spec "));
  CHECK(scan_cache(dir).entries.empty());
  const CliResult bad = run_cli("NSAJIT_NO_JIT=yes NSAJIT_CACHE_DIR='" + dir + "'", "run --arch sm_90a");
  CHECK(bad.code != 0);
  CHECK(contains(bad.output, "NSAJIT_NO_JIT = \"yes\""));
}

TEST_CASE("a cache directory copied to another path keeps hitting") {
  const test::TempDir base_tmp("copy");
  const std::string& base = base_tmp.path();
  const std::string a = base + "/first/cache", b = base + "/elsewhere/deeper/copy";
  fs::create_directories(a);
  const CliResult made = run_cli("NSAJIT_CACHE_DIR='" + a + "'", std::string("precompile -q ") + kCheapSpecs);
  REQUIRE_MESSAGE(made.code == 0, made.output);
  CHECK(made.output.empty());  // --quiet
  // A second run compiles nothing; list and stats see the three entries.
  const CliResult again = run_cli("NSAJIT_CACHE_DIR='" + a + "'",
                                  std::string("precompile --manifest '") + base + "/again.json' " + kCheapSpecs);
  CHECK(again.code == 0);
  CHECK(read_json(base + "/again.json")["compiled"] == 0);
  CHECK(read_json(base + "/again.json")["hits"] == 3);
  const CliResult stats = run_cli("", "cache --dir '" + a + "' stats --json");
  CHECK(nlohmann::json::parse(stats.output)["entries"] == 3);
  const CliResult list = run_cli("", "cache --dir '" + a + "' list");
  CHECK(contains(list.output, "index_transform.decode.ps64.topk2048.sm_90a"));
  fs::create_directories(fs::path(b).parent_path());
  fs::copy(a, b, fs::copy_options::recursive);
  fs::remove_all(base + "/first");  // the original path no longer exists
  const CliResult check = run_cli("NSAJIT_CACHE_DIR='" + b + "'",
                                  std::string("precompile --check --manifest '") + base + "/m.json' " + kCheapSpecs);
  INFO(check.output);
  CHECK(check.code == 0);
  const nlohmann::json m = read_json(base + "/m.json");
  CHECK(m["hits"] == 3);
  for (const auto& k : m["kernels"]) {
    CHECK(k["result"] == "hit");
    CHECK(k["key"].get<std::string>().size() == 64);
  }
  // A cache lacking a kernel fails --check naming it.
  const test::TempDir empty_tmp("copy-empty");
  const std::string& empty = empty_tmp.path();
  const CliResult missing = run_cli("NSAJIT_CACHE_DIR='" + empty + "'", "precompile --check --spec sparse_mla_combine.sm_90a");
  CHECK(missing.code == 1);
  CHECK(contains(missing.output, "missing sparse_mla_combine.sm_90a"));
}

TEST_CASE("16 processes started together on an empty cache compile each key once and all succeed") {
  const test::TempDir base_tmp("sixteen");
  const std::string& base = base_tmp.path();
  const std::string dir = base + "/cache";
  std::string script;
  for (int i = 0; i < 16; ++i)
    script += fmt::format("(NSAJIT_CACHE_DIR='{}' '{}' precompile -q -j 2 --manifest '{}/m{}.json' {}; echo $? > '{}/rc{}') & ",
                          dir, NSAJIT_CLI_PATH, base, i, kCheapSpecs, base, i);
  REQUIRE(std::system((script + "wait").c_str()) == 0);
  std::map<std::string, int> compiled;  // key -> processes that compiled it
  for (int i = 0; i < 16; ++i) {
    std::ifstream rc(fmt::format("{}/rc{}", base, i));
    int code = -1;
    rc >> code;
    CHECK(code == 0);
    const nlohmann::json m = read_json(fmt::format("{}/m{}.json", base, i));
    for (const auto& k : m["kernels"]) compiled[k["key"].get<std::string>()] += k["result"] == "compiled";
  }
  REQUIRE(compiled.size() == 3);
  for (const auto& [key, n] : compiled) CHECK_MESSAGE(n == 1, key);
  CHECK(verify_cache(dir, false).corrupt.empty());
  CHECK(scan_cache(dir).entries.size() == 3);
  CHECK(scan_cache(dir).temp_files.empty());
}

TEST_CASE("NSAJIT_CACHE_MAX_BYTES bounds the cache after each write") {
  const test::TempDir dir_tmp("bound");
  const std::string& dir = dir_tmp.path();
  // Each of these entries is 10-20 KB: a 25000-byte bound holds one or two of them, never all.
  // One process each: every one of them finds its own kernel in the cache at its end.
  for (const char* spec : {"index_transform.decode.ps64.topk2048.sm_90a", "fp8_kv_quantize.ps64.sm_90a",
                           "sparse_mla_combine.sm_90a"}) {
    const CliResult r = run_cli("NSAJIT_CACHE_MAX_BYTES=25000 NSAJIT_CACHE_DIR='" + dir + "'",
                                std::string("precompile -q --spec ") + spec);
    INFO(r.output);
    CHECK(r.code == 0);
  }
  const CacheScan scan = scan_cache(dir);
  CHECK((scan.entry_bytes <= 25000 || scan.entries.size() == 1));  // the entry just written is kept
  CHECK(scan.entries.size() >= 1);
  CHECK(scan.entries.size() < 3);
  const CliResult bad = run_cli("NSAJIT_CACHE_MAX_BYTES=lots NSAJIT_CACHE_DIR='" + dir + "'",
                                "precompile -q --spec sparse_mla_combine.sm_90a");
  CHECK(bad.code == 2);
  CHECK(contains(bad.output, "NSAJIT_CACHE_MAX_BYTES = \"lots\""));
}

TEST_CASE("JSON output holds a file name or cache directory that is not UTF-8 (U+FFFD in its place)") {
  const test::TempDir dir("utf8");
  const std::string cache = dir.path() + "/c\xff";
  REQUIRE(fs::create_directory(cache));
  std::ofstream(cache + "/k\xff.0123456789abcdef0123456789abcdef.cubin") << "junk";
  for (const char* sub : {"list --json", "stats --json"}) {
    const CliResult r = run_cli("", "cache --dir '" + cache + "' " + sub);
    INFO(sub, ": ", r.output);
    CHECK(r.code == 0);
    const nlohmann::json j = nlohmann::json::parse(r.output);
    CHECK(j["dir"] == dir.path() + "/c\xef\xbf\xbd");
  }
  CHECK(nlohmann::json::parse(run_cli("", "cache --dir '" + cache + "' list --json").output)["entries"][0]["name"] ==
        "k\xef\xbf\xbd");
  const std::string env = "NSAJIT_CACHE_DIR='" + cache + "'";
  const CliResult info = run_cli(env, "info --json");
  CHECK(info.code == 0);
  CHECK(contains(info.output, "c\xef\xbf\xbd"));
  const std::string manifest = dir.path() + "/manifest.json";
  const CliResult r = run_cli(env, "precompile -q --spec sparse_mla_combine.sm_90a --manifest '" + manifest + "'");
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(read_json(manifest)["cache_dir"] == dir.path() + "/c\xef\xbf\xbd");
}

TEST_CASE("precompile refuses an unwritable --manifest before compiling anything") {
  const test::TempDir dir("manifest-early");
  const std::string env = "NSAJIT_CACHE_DIR='" + dir.path() + "/cache'";
  for (const std::string& bad : {dir.path() + "/no/such/dir/m.json", dir.path()}) {
    const CliResult r = run_cli(env, "precompile -j 1 --manifest '" + bad + "' " + kCheapSpecs);
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(contains(r.output, "--manifest " + bad + ": "));
    CHECK_FALSE(contains(r.output, "precompile: "));  // refused before the run's first line
    CHECK_FALSE(std::filesystem::exists(dir.path() + "/cache"));
  }
}

TEST_CASE("precompile fails naming the bound when NSAJIT_CACHE_MAX_BYTES evicts kernels it precompiled") {
  const test::TempDir dir_tmp("bound-precompile");
  const std::string dir = dir_tmp.path() + "/cache";
  const std::string env = "NSAJIT_CACHE_DIR='" + dir + "'";
  const std::string first = "index_transform.decode.ps64.topk2048.sm_90a";
  const std::string manifest = dir_tmp.path() + "/manifest.json";
  const CliResult r = run_cli(env + " NSAJIT_CACHE_MAX_BYTES=1",
                              std::string("precompile -j 1 --manifest '") + manifest + "' " + kCheapSpecs);
  INFO(r.output);
  CHECK(r.code == 1);
  // -j 1, longest first: each write evicts the kernels written before it; the last one is kept.
  CHECK(contains(r.output, "nsajit: failed: " + first + " (compiled, then evicted by the cache's size bound "
                           "NSAJIT_CACHE_MAX_BYTES = 1 bytes"));
  CHECK(contains(r.output, "raise the bound or unset it for precompile"));
  CHECK(contains(r.output, "2 missing or failed"));
  const nlohmann::json m = read_json(manifest);
  CHECK(m["failed"] == 2);
  CHECK(m["compiled"] == 1);
  // What precompile reports as done is what --check finds.
  const CliResult check = run_cli(env, std::string("precompile -q --check ") + kCheapSpecs);
  CHECK(check.code == 1);
  CHECK(contains(check.output, "nsajit: missing: " + first));
  CHECK(scan_cache(dir).entries.size() == 1);
  // Without the bound every kernel stays: exit 0.
  CHECK(run_cli(env, std::string("precompile -q ") + kCheapSpecs).code == 0);
  CHECK(run_cli(env, std::string("precompile -q --check ") + kCheapSpecs).code == 0);
}

TEST_CASE("gen prints the generated source of a readable name or canonical text") {
  const KernelSpec spec{.family = Family::index_transform, .topk = 1024, .page_size = 64};
  const std::string source = generate_source(spec);
  CHECK(run_cli("", "gen index_transform.decode.ps64.topk1024.sm_90a").output == source);
  CHECK(run_cli("", "gen 'family=index_transform topk=1024 page_size=64'").output == source);
  const CliResult bad = run_cli("", "gen index_transform.decode.ps64.topk1000.sm_90a");
  CHECK(bad.code == 2);
  CHECK(contains(bad.output, "topk = 1000"));
}
#endif

TEST_CASE("bench anchors: the fastest figure per case, a case compared with another's anchor, bad files named") {
  const test::TempDir tmp("anchors");
  const std::string path = tmp.path() + "/anchors.json";
  std::ofstream(path) << R"({"cases": [
    {"case": "prefill h128 sq4096 skv262144 bf16", "anchor": "slow", "anchor_us": 5000.0},
    {"case": "prefill h128 sq4096 skv262144 bf16", "anchor": "fast", "anchor_us": 4570.5},
    {"case": "1x131072", "anchor": "topk v2", "anchor_us": 11.0}]})";
  const auto anchors = tools::bench::load_anchors(path);
  CHECK(anchors.size() == 2);
  const tools::bench::Anchor* own = tools::bench::find_anchor(anchors, "prefill h128 sq4096 skv262144 bf16", "");
  REQUIRE(own != nullptr);
  CHECK(own->name == "fast");
  CHECK(own->us == 4570.5);
  const tools::bench::Anchor* other =
      tools::bench::find_anchor(anchors, "prefill h128 sq4096 skv262144 fp8 gather", "prefill h128 sq4096 skv262144 bf16");
  CHECK(other == own);
  CHECK(tools::bench::find_anchor(anchors, "prefill h128 sq4096 skv262144 fp8 gather", "") == nullptr);
  CHECK(tools::bench::find_anchor(anchors, "1x131072", "") != nullptr);

  const std::string bad = tmp.path() + "/bad.json";
  std::ofstream(bad) << R"({"cases": [{"case": "1x131072", "anchor_us": 0}]})";
  CHECK(contains(error_of([&] { tools::bench::load_anchors(bad); }), "cases[0] needs a string \"case\" and a positive \"anchor_us\""));
  std::ofstream(bad) << "not json";
  CHECK(contains(error_of([&] { tools::bench::load_anchors(bad); }), "not JSON"));
  CHECK(contains(error_of([&] { tools::bench::load_anchors(tmp.path() + "/none.json"); }), "cannot read the file"));
  // A FIFO or a directory is refused before anything is read (a FIFO would block the read forever).
  const std::string fifo = tmp.path() + "/anchors.fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(contains(error_of([&] { tools::bench::load_anchors(fifo); }), "--anchors " + fifo + ": cannot read the file: it is a FIFO"));
  CHECK(contains(error_of([&] { tools::bench::load_anchors(tmp.path()); }), "cannot read the file: it is a directory"));
  std::ofstream(bad) << R"({"cases": [], "cases": []})";
  CHECK(contains(error_of([&] { tools::bench::load_anchors(bad); }), "duplicate key"));
}
