// fleet_specs.cpp — the specs a model config's fleet can dispatch (see fleet_specs.hpp).
#include "tools/fleet_specs.hpp"

#include <fmt/format.h>

#include <map>
#include <set>

#include "nsajit/errors.hpp"
#include "families/topk/heuristics.hpp"
#include "tools/tuning_config.hpp"

namespace nsajit::tools {
namespace {

// SM counts of the parts an arch runs on (the top-k plan depends on them): sm_90a H100 SXM / H200
// (132), H100 PCIe (114), H20 (78); sm_100a B200 (148). Other archs: the same spread.
std::vector<int> sm_counts_of(Arch arch) {
  if (arch.sm == 100) return {148, 132};
  return {132, 114, 78};
}

FleetSpec make(KernelSpec spec, Arch arch, std::string origin) {
  spec.arch = arch;
  spec = with_default_tile(spec);
  validate(spec);
  return {spec, std::move(origin)};
}

// Top-k: the thread counts nsajit::topk's launch plan picks over a grid of batch shapes (rows x
// width) at the arch's SM counts, with and without 16-CTA clusters (runtime/topk.cpp).
// Thread count -> one shape that gets it.
std::map<int, std::string> topk_thread_choices(const ModelConfig& m, Arch arch) {
  std::vector<int> rows_grid;
  for (int r = 1; r <= (1 << 16); r *= 2) rows_grid.push_back(r);
  std::vector<int> widths;
  widths.push_back(m.index_topk + 1);
  for (long long w = 1024; w <= detail::kMaxTopkWidth; w *= 2) {
    if (w > m.index_topk) widths.push_back(int(w));
    if (w * 3 / 2 > m.index_topk && w * 3 / 2 <= detail::kMaxTopkWidth) widths.push_back(int(w * 3 / 2));
  }
  std::map<int, std::string> threads;
  for (int sm : sm_counts_of(arch)) {
    std::vector<int> rows = rows_grid;
    for (int r : {sm / 2, sm / 2 + 1, sm, sm + 1, 2 * sm, 4 * sm + 1}) rows.push_back(r);
    for (int max_cluster : {16, 8})
      for (int r : rows)
        for (int w : widths) {
          const int t = detail::plan_topk_launch(r, w, m.index_topk, sm, max_cluster).threads;
          if (!threads.contains(t)) threads[t] = fmt::format("{} rows x {} at {} SMs", r, w, sm);
        }
  }
  return threads;
}

// Top-k, plain and fused with the transform (decode at every MTP depth, prefill, ragged), at each
// thread count of `threads` (-> an example of why it is chosen).
void add_topk_forms(const FleetConfig& fleet, Arch arch, const std::map<int, std::string>& threads,
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
        for (const auto& [t, example] : threads) {
          KernelSpec s{.family = Family::topk, .topk = m.index_topk, .page_size = f.page_size, .mode = f.mode,
                       .next_n = f.next_n, .fused_transform = f.fused, .sorted = sorted,
                       .score_dtype = score_dtype, .tile = {.threads = t}};
          out.push_back(make(s, arch, fmt::format("{}: {} threads (e.g. {})", why, t, example)));
        }
  }
}

void add_heuristic_specs(const FleetConfig& fleet, Arch arch, std::vector<FleetSpec>& out) {
  const ModelConfig& m = fleet.model;
  add_topk_forms(fleet, arch, topk_thread_choices(m, arch), "top-k launch plan", out);
  // The §1 transform on its own, each mode.
  for (IndexMode mode : {IndexMode::decode, IndexMode::prefill, IndexMode::ragged})
    out.push_back(make({.family = Family::index_transform, .topk = m.index_topk,
                        .page_size = mode == IndexMode::ragged ? 1 : m.page_size, .mode = mode},
                       arch, "index transform (" + to_string(mode) + ")"));
  // The FP8 KV cache writer and reader.
  out.push_back(make({.family = Family::fp8_kv_quantize, .page_size = m.page_size}, arch, "FP8 KV cache writer"));
  out.push_back(make({.family = Family::fp8_kv_gather, .page_size = m.page_size}, arch, "FP8 KV cache reader"));
  // Sparse MLA: each tp's h_q, both KV dtypes, on the default tile (the variant the runtime
  // picks for every shape: decode, MTP and prefill rows share it; batch-invariant and split
  // modes too), plus the split-KV combine.
  for (int tp : fleet.tps) {
    ModelConfig c = m;
    c.tp = tp;
    for (KvDtype kv : {KvDtype::bf16, KvDtype::fp8_e4m3})
      out.push_back(make({.family = Family::sparse_mla, .h_q = c.h_q(), .topk = m.index_topk, .kv_dtype = kv},
                         arch, fmt::format("sparse MLA, tp {} (h_q {}), {} KV, default tile", tp, c.h_q(), to_string(kv))));
  }
  out.push_back(make({.family = Family::sparse_mla_combine}, arch, "sparse MLA split-KV combine"));
}

// The choices of the tuning databases (the shipped ones and fleet.tuning_dbs) for this arch: sparse
// MLA variants at the fleet's h_q, top-k thread counts in every form.
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
    std::map<int, std::string> threads;
    for (const DbSpec& d : tuning_db_specs(*db, arch, fleet.model.index_topk)) {
      if (d.spec.family == Family::topk) threads.emplace(d.spec.tile.threads, d.origin);
      else if (h_qs.contains(d.spec.h_q)) out.push_back({d.spec, d.origin});
    }
    add_topk_forms(fleet, arch, threads, db->origin, out);
  }
}

}  // namespace

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
