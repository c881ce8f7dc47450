// tuning.hpp — sparse MLA's part of the tuning database: a bucket of shapes (h_q, KV dtype, rows,
// next_n, topk) mapped to a kernel variant (spec tile fields kernel, producer_warps,
// heads_per_cta) and a split count, the JSON fields that name them, and the pure bucket lookup.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/tuning_range.hpp"
#include "nsajit/spec.hpp"

namespace nsajit::tuning {

struct SparseMlaBucket {
  std::string name;
  int h_q = 0;                       // exact
  std::optional<KvDtype> kv_dtype;   // none: either
  Range rows, next_n, topk;
};

// A variant and split count: tile fields 0 / automatic / -1 and num_splits 0 leave the choice to
// the heuristics.
struct SparseMlaChoice {
  TileConfig tile;
  int num_splits = 0;  // 0: auto_splits; 1..64 (only with a workspace: batch-invariant calls never split)
  bool schedule_named = false;  // false: tile.schedule is left to default_schedule (a database that did not search it)
  friend bool operator==(const SparseMlaChoice&, const SparseMlaChoice&) = default;
};
// Whether a choice fixes its schedule (named, or a schedule other than a spec's default single).
inline bool schedule_chosen(const SparseMlaChoice& c) { return c.schedule_named || c.tile.schedule != MlaSchedule::single; }

struct SparseMlaTuningEntry {
  SparseMlaBucket bucket;
  SparseMlaChoice choice;
};

// Fields a search space or a choice may name: kernel ("mma_sync", "wgmma"), producer_warps,
// heads_per_cta, schedule ("single", "seesaw"; unnamed: the heuristics'), combine ("kernel",
// "cluster": the seesaw's 2-CTA merge), num_splits (integers; "auto" leaves the heuristics' value).
const std::vector<std::string>& sparse_mla_choice_fields();
void set_sparse_mla_choice_field(SparseMlaChoice& c, const std::string& field, const nlohmann::json& value,
                                 const std::string& where);
nlohmann::json sparse_mla_choice_json(const SparseMlaChoice& c);
// A bucket object {"h_q", "kv_dtype"?, "rows", "next_n"?, "topk", "name"?}.
SparseMlaBucket parse_sparse_mla_bucket(const nlohmann::json& j, const std::string& where);
nlohmann::json sparse_mla_bucket_json(const SparseMlaBucket& b);
// A database entry {"bucket": {...}, "choice": {...}, ...}; the choice's tile must be a valid spec
// for the bucket's h_q and KV dtype(s) on `arch` (InvalidArgument naming where otherwise).
SparseMlaTuningEntry parse_sparse_mla_entry(const nlohmann::json& j, const std::string& where, Arch arch);

// The spec a choice gives for (h_q, topk, kv) on arch: the tile filled by the heuristics where the
// choice leaves it, and a schedule it leaves open the dispatcher's (sparse_mla::default_schedule).
// Validated (InvalidArgument).
KernelSpec sparse_mla_spec_of(const SparseMlaChoice& c, int h_q, int topk, KvDtype kv, Arch arch);

// Whether a choice's kernel takes a call of this topk, KV dtype and precision: the per-call limits
// of validation (families/sparse_mla/traits.cpp) that a bucket's ranges do not fix (the seesaw
// schedule and the cluster combine, which runs it: topk a multiple of 128, not precise; the FP8
// direct kernel, 2 producer warps on FP8 KV: not precise). Pure.
bool choice_serves(const SparseMlaChoice& c, int topk, KvDtype kv, bool precise);
// The first entry whose bucket holds the shape and whose choice serves the call (choice_serves), or
// nullptr: a call its bucket's kernel cannot take runs the heuristics' kernel. Pure.
const SparseMlaTuningEntry* find_sparse_mla_entry(std::span<const SparseMlaTuningEntry> entries, int rows, int h_q,
                                                  int next_n, int topk, KvDtype kv, bool precise);
// The largest split count any entry of either KV dtype and any next_n chooses for (rows, h_q,
// topk); 0 when none does (workspace sizing covers what the launch may choose). Pure.
int max_tuned_splits(std::span<const SparseMlaTuningEntry> entries, int rows, int h_q, int topk);

// The active database's entry for the shape, or nullptr (the dispatcher's hook).
const SparseMlaTuningEntry* tuned_sparse_mla(int rows, int h_q, int next_n, int topk, KvDtype kv, bool precise,
                                             int sm_count);
// max_tuned_splits of the active database (0 without one).
int tuned_max_splits(int rows, int h_q, int topk, int sm_count);

}  // namespace nsajit::tuning
