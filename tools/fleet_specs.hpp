// fleet_specs.hpp — every kernel spec a serving fleet of one model config can dispatch, for
// `nsajit precompile`.
//
// The enumeration is a list of sources (fleet_spec_sources()); each adds the specs it knows for
// one target arch, and the result keeps the first of equal specs. The sources: the runtime's own
// choices (the default tiles and top-k's launch plan, run over a grid of shape buckets) and the
// choices of the tuning databases (the shipped ones and any given).
#pragma once

#include <string>
#include <vector>

#include "nsajit/spec.hpp"
#include "runtime/tuning_db.hpp"
#include "tools/model_config.hpp"

namespace nsajit::tools {

struct FleetConfig {
  ModelConfig model;             // its tp is replaced by each of tps
  std::vector<int> tps = {1};    // attention tensor parallelism: h_q = num_attention_heads / tp
  std::vector<Arch> archs = {Arch{}};
  std::vector<int> next_ns = {1};  // MTP query tokens per request (fused decode top-k)
  bool sorted_topk = false;        // also the sorted top-k forms (a second, sorting launch)
  std::vector<tuning::TuningDb> tuning_dbs;  // databases whose choices are enumerated besides the shipped ones
  std::vector<ScoreDtype> score_dtypes = {ScoreDtype::fp32};  // the indexer logits' dtypes (top-k)
};

struct FleetSpec {
  KernelSpec spec;     // default tile filled, validated
  std::string origin;  // why it is dispatched, e.g. "top-k launch plan: 1024 threads (1 x 131072 rows)"
};

// A source of specs: appends those it knows for `arch` to `out` (duplicates allowed).
struct FleetSpecSource {
  const char* name;  // "heuristics", ...
  void (*add)(const FleetConfig& fleet, Arch arch, std::vector<FleetSpec>& out);
};

// The sources precompile consults, in order.
const std::vector<FleetSpecSource>& fleet_spec_sources();

// SM counts of the parts an arch runs on (top-k's plan depends on them).
std::vector<int> sm_counts_of(Arch arch);

// Every spec of the fleet, each once, by arch then source order. Throws InvalidArgument for a tp
// that does not give a supported h_q (validate_model_config names it) or an empty list.
std::vector<FleetSpec> enumerate_fleet_specs(const FleetConfig& fleet);

}  // namespace nsajit::tools
