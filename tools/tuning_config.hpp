// tuning_config.hpp — `nsajit autotune`'s search space (a JSON config, tune/*.json), its
// candidates per shape bucket, and the tuning database it writes (runtime/tuning_db.hpp reads it).
//
// Config: {"schema": 1, "iters": 20,
//   "topk": {"search": {field: [values]}, "buckets": [{"name", "rows", "width", "topk",
//            "tune": {"rows", "width", "len_lo"?}, "search"?}]},
//   "sparse_mla": {"kv_tokens"?, "search": {...}, "buckets": [{"name"?, "h_q": n | [n...], "kv_dtype": k | [k...],
//            "rows": range | [ranges], "tune_rows": n | [n per range], "next_n"?, "topk", "search"?}]}}
// kv_tokens: the KV tokens the timed rows' indices are drawn from, i.e. the served contexts'
// length (default kDefaultMlaKvTokens, the bench's largest pool): whether the rows' gather hits L2
// decides between some variants (docs/design/sparse_mla.md, the seesaw schedule).
// Fields of a search: topk_choice_fields() / sparse_mla_choice_fields(), each a list of values
// ("auto" = the heuristics' value). A bucket's "search" replaces the family's fields it names.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "families/sparse_mla/tuning.hpp"
#include "families/topk/tuning.hpp"
#include "runtime/tuning_db.hpp"

namespace nsajit::tools {

using SearchSpace = std::map<std::string, std::vector<nlohmann::json>>;  // field -> values, in order

struct TopkTuneBucket {
  detail::TopkBucket bucket;
  int rows = 0, width = 0, len_lo = 0;  // the shape timed: row r has min(width, len_lo + r) scores
  SearchSpace search;
};

struct SparseMlaTuneBucket {
  tuning::SparseMlaBucket bucket;
  int rows = 0;  // the shape timed (next_n 1)
  SearchSpace search;
};

inline constexpr int kDefaultMlaKvTokens = 262144;
inline constexpr int kMaxMlaKvTokens = 1 << 20;  // ~3 GB of host copies (bf16 pool, FP8 cache, dequantized)
inline constexpr int kMlaKvTokensPage = 64;       // autotune's FP8 page size

struct TuneConfig {
  std::string path;
  int iters = 20;  // timed launches per candidate (median)
  int mla_kv_tokens = kDefaultMlaKvTokens;  // sparse_mla.kv_tokens
  std::vector<TopkTuneBucket> topk;
  std::vector<SparseMlaTuneBucket> sparse_mla;
};

// Reads and checks a config; InvalidArgument "<path>: <field>: <what is wrong>" for a file that
// cannot be read or parsed, an unknown field, an invalid value or a bad bucket (a tune shape
// outside its bucket's ranges, an empty list).
TuneConfig load_tune_config(const std::string& path);
TuneConfig parse_tune_config(const std::string& text, const std::string& path);

// A dropped candidate and why.
struct Dropped {
  std::string what;
  std::string why;
};

struct TopkCandidate {
  detail::TopkPlanConstraints constraints;  // the first search point giving this launch plan
  detail::TopkLaunchPlan plan;
  bool heuristic = false;                   // the plan the heuristics choose
  std::string describe() const;             // e.g. "ctas 8 x 1024 threads, cluster_lists, slice prefetch"
};
// The distinct launch plans of the bucket's search space at `sm_count` SMs (the heuristics' plan
// first); impossible constraints are dropped (listed).
std::vector<TopkCandidate> topk_candidates(const TopkTuneBucket& b, int topk, int sm_count, std::vector<Dropped>& dropped);

struct SparseMlaCandidate {
  tuning::SparseMlaChoice choice;  // as searched (fields "auto" left to the heuristics)
  KernelSpec spec;                 // the kernel it runs (tile filled)
  int splits = 1;                  // the split count it launches with (a workspace given)
  bool heuristic = false;
  std::string describe() const;    // readable name and splits
};
// The distinct (kernel, split count) pairs of the bucket's search space for each KV dtype the
// bucket covers at `sm_count` SMs on `arch` (the heuristics' choice first). Invalid specs and
// splits of a grid that already fills the GPU are dropped (listed).
std::vector<SparseMlaCandidate> sparse_mla_candidates(const SparseMlaTuneBucket& b, KvDtype kv, Arch arch, int sm_count,
                                                      std::vector<Dropped>& dropped);

// `nsajit autotune --dry-run`: every bucket's candidates and dropped points, as text.
std::string dry_run_listing(const TuneConfig& config, Arch arch, int sm_count);

// One tuned bucket of the database.
struct TunedEntry {
  nlohmann::json bucket;      // the bucket's JSON (topk_bucket_json / sparse_mla_bucket_json)
  nlohmann::json choice;      // what the dispatcher applies (topk_choice_json / sparse_mla_choice_json)
  nlohmann::json shape;       // the shape timed
  std::string winner;         // the candidate chosen, described
  double us = 0;              // its median time
  std::string heuristic;      // the heuristics' candidate, described
  double heuristic_us = 0;
  int candidates = 0;         // timed
  std::vector<Dropped> dropped;
};

// The database JSON (schema kSchemaVersion): the key, the config and per family its entries.
nlohmann::json tuning_db_json(const tuning::TuningKey& key, const std::string& config_path, int iters,
                              const std::vector<TunedEntry>& topk, const std::vector<TunedEntry>& sparse_mla);

// Every spec a database chooses for `arch` (readable names in `origin`), for the fleet enumeration:
// sparse MLA choices at the bucket's h_q and KV dtype(s) and topk; top-k choices at each of its
// thread counts, plain.
struct DbSpec {
  KernelSpec spec;
  std::string origin;
};
std::vector<DbSpec> tuning_db_specs(const tuning::TuningDb& db, Arch arch, int topk);

// The tuning databases a fleet's processes read besides the shipped ones: `paths` (given by `flag`),
// else the file $NSAJIT_TUNING_DB names (unless "none"). InvalidArgument names the flag or the
// variable and the path of a file that cannot be read; a parse error names the file.
std::vector<tuning::TuningDb> read_tuning_dbs(std::vector<std::string> paths, const std::string& flag);

}  // namespace nsajit::tools
