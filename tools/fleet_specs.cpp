// fleet_specs.cpp — the specs a model config's fleet can dispatch (see fleet_specs.hpp).
#include "tools/fleet_specs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "nsajit/errors.hpp"
#include "families/topk/heuristics.hpp"
#include "tools/tuning_config.hpp"

namespace nsajit::tools {
namespace {

FleetSpec make(KernelSpec spec, Arch arch, std::string origin) {
  spec.arch = arch;
  spec = with_default_tile(spec);
  validate(spec);
  return {spec, std::move(origin)};
}

// Top-k, plain and fused with the transform (decode at every MTP depth, prefill, ragged), in each
// kernel tile (threads, algorithm) of `tiles`.
void add_topk_forms(const FleetConfig& fleet, Arch arch, const std::vector<detail::TopkTileChoice>& tiles,
                    const std::string& why, std::vector<FleetSpec>& out) {
  const ModelConfig& m = fleet.model;
  struct Form {
    bool fused;
    IndexMode mode;
    int page_size, next_n;
  };
  std::vector<Form> forms = {{false, IndexMode::decode, 1, 1}};
  for (int n : fleet.next_ns) forms.push_back({true, IndexMode::decode, m.page_size, n});
  forms.push_back({true, IndexMode::prefill, m.page_size, 1});
  forms.push_back({true, IndexMode::ragged, 1, 1});
  for (bool sorted : {false, true}) {
    if (sorted && !fleet.sorted_topk) continue;
    for (ScoreDtype score_dtype : fleet.score_dtypes)
      for (const Form& f : forms)
        for (const detail::TopkTileChoice& c : tiles) {
          KernelSpec s{.family = Family::topk, .topk = m.index_topk, .page_size = f.page_size, .mode = f.mode,
                       .next_n = f.next_n, .fused_transform = f.fused, .sorted = sorted,
                       .score_dtype = score_dtype, .tile = c.tile};
          out.push_back(make(s, arch, fmt::format("{}: {} threads, {} (e.g. {})", why, c.tile.threads,
                                                  to_string(c.tile.algorithm), c.example)));
        }
  }
}

void add_heuristic_specs(const FleetConfig& fleet, Arch arch, std::vector<FleetSpec>& out) {
  const ModelConfig& m = fleet.model;
  // The tiles nsajit::topk's launch plan picks over a grid of batch shapes (rows x width) at the
  // arch's SM counts, with and without 16-CTA clusters, for the fleet's score dtypes (every tile
  // then in every dtype: a few more kernels than the plan reaches).
  add_topk_forms(fleet, arch, detail::topk_tile_choices(m.index_topk, fleet.score_dtypes, sm_counts_of(arch)),
                 "top-k launch plan", out);
  // The §1 transform on its own, each mode.
  for (IndexMode mode : {IndexMode::decode, IndexMode::prefill, IndexMode::ragged})
    out.push_back(make({.family = Family::index_transform, .topk = m.index_topk,
                        .page_size = mode == IndexMode::ragged ? 1 : m.page_size, .mode = mode},
                       arch, "index transform (" + to_string(mode) + ")"));
  // The FP8 KV cache writer and reader.
  out.push_back(make({.family = Family::fp8_kv_quantize, .page_size = m.page_size}, arch, "FP8 KV cache writer"));
  out.push_back(make({.family = Family::fp8_kv_gather, .page_size = m.page_size}, arch, "FP8 KV cache reader"));
  // Sparse MLA: each tp's h_q, both KV dtypes, on the default tile and schedule (the variant the
  // runtime picks for every shape without a database entry: decode, MTP and prefill rows share
  // it; batch-invariant and split modes too), plus the split-KV combine.
  for (int tp : fleet.tps) {
    ModelConfig c = m;
    c.tp = tp;
    for (KvDtype kv : {KvDtype::bf16, KvDtype::fp8_e4m3}) {
      // The heuristics' tile with the dispatcher's schedule: what an empty tuning choice gives.
      const KernelSpec s = tuning::sparse_mla_spec_of({}, c.h_q(), m.index_topk, kv, arch);
      out.push_back(make(s, arch, fmt::format("sparse MLA, tp {} (h_q {}), {} KV, default tile, {} schedule", tp,
                                              c.h_q(), to_string(kv), to_string(s.tile.schedule))));
    }
  }
  out.push_back(make({.family = Family::sparse_mla_combine}, arch, "sparse MLA split-KV combine"));
}

// The choices of the tuning databases (the shipped ones and fleet.tuning_dbs) for this arch: sparse
// MLA variants at the fleet's h_q, top-k tiles in every form.
void add_tuning_db_specs(const FleetConfig& fleet, Arch arch, std::vector<FleetSpec>& out) {
  std::vector<const tuning::TuningDb*> dbs;
  for (const tuning::TuningDb& db : tuning::shipped_tuning_dbs()) dbs.push_back(&db);
  for (const tuning::TuningDb& db : fleet.tuning_dbs) dbs.push_back(&db);
  std::set<int> h_qs;
  for (int tp : fleet.tps) {
    ModelConfig c = fleet.model;
    c.tp = tp;
    h_qs.insert(c.h_q());
  }
  for (const tuning::TuningDb* db : dbs) {
    std::vector<detail::TopkTileChoice> tiles;
    for (const DbSpec& d : tuning_db_specs(*db, arch, fleet.model.index_topk)) {
      if (d.spec.family != Family::topk) {
        if (h_qs.contains(d.spec.h_q)) out.push_back({d.spec, d.origin});
      } else if (std::none_of(tiles.begin(), tiles.end(), [&](const auto& c) { return c.tile == d.spec.tile; })) {
        tiles.push_back({d.spec.tile, d.origin});
      }
    }
    add_topk_forms(fleet, arch, tiles, db->origin, out);
  }
}

}  // namespace

// sm_90a: H100 SXM / H200 (132), H100 PCIe (114), H20 (78); sm_100a: B200 (148). Other archs: the same spread.
std::vector<int> sm_counts_of(Arch arch) {
  if (arch.sm == 100) return {148, 132};
  return {132, 114, 78};
}

const std::vector<FleetSpecSource>& fleet_spec_sources() {
  static const std::vector<FleetSpecSource> sources = {{"heuristics", &add_heuristic_specs},
                                                       {"tuning database", &add_tuning_db_specs}};
  return sources;
}

std::vector<FleetSpec> enumerate_fleet_specs(const FleetConfig& fleet) {
  if (fleet.tps.empty()) throw InvalidArgument("--tp: expected at least one value");
  if (fleet.archs.empty()) throw InvalidArgument("--arch: expected at least one value");
  if (fleet.next_ns.empty()) throw InvalidArgument("--next-n: expected at least one value");
  for (int tp : fleet.tps) {
    ModelConfig c = fleet.model;
    c.tp = tp;
    validate_model_config(c);
  }
  for (int n : fleet.next_ns)
    if (n < 1 || n > 8) throw InvalidArgument(fmt::format("--next-n: {}: expected an integer in [1, 8]", n));
  std::vector<FleetSpec> all, unique;
  for (Arch arch : fleet.archs)
    for (const FleetSpecSource& source : fleet_spec_sources()) {
      std::vector<FleetSpec> found;
      source.add(fleet, arch, found);
      for (FleetSpec& f : found) {
        f.origin = std::string(source.name) + ": " + f.origin;
        all.push_back(std::move(f));
      }
    }
  for (FleetSpec& f : all) {
    bool seen = false;
    for (const FleetSpec& u : unique) seen = seen || u.spec == f.spec;
    if (!seen) unique.push_back(std::move(f));
  }
  return unique;
}

}  // namespace nsajit::tools
