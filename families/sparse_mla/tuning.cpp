// tuning.cpp — sparse MLA's tuning database entries: JSON fields, buckets and the dispatcher's lookup.
#include "families/sparse_mla/tuning.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "families/sparse_mla/heuristics.hpp"
#include "nsajit/errors.hpp"
#include "runtime/tuning_db.hpp"

namespace nsajit::tuning {
namespace {

int integer_or_auto(const nlohmann::json& value, int auto_value, int lo, int hi, const std::string& where) {
  if (value.is_string() && value.get<std::string>() == "auto") return auto_value;
  if (!value.is_number_integer() || value.get<long long>() < lo || value.get<long long>() > hi)
    bad_field(where, value, fmt::format("\"auto\" or an integer in [{}, {}]", lo, hi));
  return value.get<int>();
}

std::optional<KvDtype> parse_kv(const nlohmann::json& v, const std::string& where) {
  if (v.is_string() && v.get<std::string>() == "bf16") return KvDtype::bf16;
  if (v.is_string() && (v.get<std::string>() == "fp8" || v.get<std::string>() == "fp8_e4m3")) return KvDtype::fp8_e4m3;
  bad_field(where, v, "\"bf16\" or \"fp8\"");
}

}  // namespace

const std::vector<std::string>& sparse_mla_choice_fields() {
  static const std::vector<std::string> f = {"kernel", "producer_warps", "heads_per_cta", "schedule", "combine",
                                             "num_splits"};
  return f;
}

void set_sparse_mla_choice_field(SparseMlaChoice& c, const std::string& field, const nlohmann::json& value,
                                 const std::string& where) {
  if (field == "kernel") {
    const std::string v = value.is_string() ? value.get<std::string>() : "";
    if (v == "auto") c.tile.kernel = MlaKernel::automatic;
    else if (v == "mma_sync") c.tile.kernel = MlaKernel::mma_sync;
    else if (v == "wgmma") c.tile.kernel = MlaKernel::wgmma;
    else bad_field(where, value, "\"auto\", \"mma_sync\" or \"wgmma\"");
  } else if (field == "producer_warps") {
    c.tile.producer_warps = integer_or_auto(value, -1, 0, 8, where);
  } else if (field == "heads_per_cta") {
    c.tile.heads_per_cta = integer_or_auto(value, 0, 8, 64, where);
  } else if (field == "schedule") {
    const std::string v = value.is_string() ? value.get<std::string>() : "";
    if (v == "single") c.tile.schedule = MlaSchedule::single;
    else if (v == "seesaw") c.tile.schedule = MlaSchedule::seesaw;
    else bad_field(where, value, "\"single\" or \"seesaw\"");
    c.schedule_named = true;
  } else if (field == "combine") {
    const std::string v = value.is_string() ? value.get<std::string>() : "";
    if (v == "kernel") c.tile.combine = MlaCombine::kernel;
    else if (v == "cluster") c.tile.combine = MlaCombine::cluster;
    else bad_field(where, value, "\"kernel\" or \"cluster\"");
  } else if (field == "num_splits") {
    c.num_splits = integer_or_auto(value, 0, 1, 64, where);
  } else {
    throw InvalidArgument(fmt::format("{}: unknown sparse MLA field (expected one of {})", where,
                                      fmt::join(sparse_mla_choice_fields(), ", ")));
  }
}

nlohmann::json sparse_mla_choice_json(const SparseMlaChoice& c) {
  nlohmann::json j = nlohmann::json::object();
  if (c.tile.kernel != MlaKernel::automatic) j["kernel"] = to_string(c.tile.kernel);
  if (c.tile.producer_warps >= 0) j["producer_warps"] = c.tile.producer_warps;
  if (c.tile.heads_per_cta > 0) j["heads_per_cta"] = c.tile.heads_per_cta;
  if (schedule_chosen(c)) j["schedule"] = to_string(c.tile.schedule);
  if (c.tile.combine != MlaCombine::kernel) j["combine"] = to_string(c.tile.combine);
  j["num_splits"] = c.num_splits > 0 ? nlohmann::json(c.num_splits) : nlohmann::json("auto");
  return j;
}

SparseMlaBucket parse_sparse_mla_bucket(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) bad_field(where, j, "an object with h_q, rows and topk");
  reject_unknown_fields(j, {"name", "h_q", "kv_dtype", "rows", "next_n", "topk"}, where);
  for (const char* required : {"h_q", "rows", "topk"})
    if (!j.contains(required)) throw InvalidArgument(fmt::format("{}.{}: missing", where, required));
  SparseMlaBucket b;
  if (j.contains("name")) {
    if (!j["name"].is_string()) bad_field(where + ".name", j["name"], "a string");
    b.name = j["name"].get<std::string>();
  }
  const nlohmann::json& h = j["h_q"];
  if (!h.is_number_integer() || (h != 8 && h != 16 && h != 32 && h != 64 && h != 128))
    bad_field(where + ".h_q", h, "one of 8, 16, 32, 64, 128");
  b.h_q = h.get<int>();
  if (j.contains("kv_dtype")) b.kv_dtype = parse_kv(j["kv_dtype"], where + ".kv_dtype");
  b.rows = parse_range(j["rows"], where + ".rows");
  if (j.contains("next_n")) b.next_n = parse_range(j["next_n"], where + ".next_n");
  b.topk = parse_range(j["topk"], where + ".topk");
  return b;
}

nlohmann::json sparse_mla_bucket_json(const SparseMlaBucket& b) {
  nlohmann::json j = {{"h_q", b.h_q}, {"rows", range_json(b.rows)}, {"topk", range_json(b.topk)}};
  if (b.kv_dtype) j["kv_dtype"] = *b.kv_dtype == KvDtype::bf16 ? "bf16" : "fp8";
  if (!(b.next_n == Range{})) j["next_n"] = range_json(b.next_n);
  if (!b.name.empty()) j["name"] = b.name;
  return j;
}

KernelSpec sparse_mla_spec_of(const SparseMlaChoice& c, int h_q, int topk, KvDtype kv, Arch arch) {
  KernelSpec s;
  s.family = Family::sparse_mla;
  s.h_q = h_q;
  s.topk = topk;
  s.kv_dtype = kv;
  s.arch = arch;
  s.tile = c.tile;
  s = with_default_tile(s);
  if (!schedule_chosen(c)) s.tile.schedule = sparse_mla::default_schedule(s);  // as plan_sparse_mla does
  validate(s);
  return s;
}

SparseMlaTuningEntry parse_sparse_mla_entry(const nlohmann::json& j, const std::string& where, Arch arch) {
  SparseMlaTuningEntry e;
  parse_entry(
      j, where, "an object of sparse MLA variant fields",
      [&](const nlohmann::json& b, const std::string& w) { e.bucket = parse_sparse_mla_bucket(b, w); },
      [&](const std::string& f, const nlohmann::json& v, const std::string& w) {
        set_sparse_mla_choice_field(e.choice, f, v, w);
      });
  if (e.choice.tile.combine == MlaCombine::cluster && e.choice.num_splits > 0 &&
      e.choice.num_splits != sparse_mla::kClusterSplits)
    bad_field(where + ".choice.num_splits", e.choice.num_splits,
              fmt::format("\"auto\" or {} with combine \"cluster\"", sparse_mla::kClusterSplits));
  for (KvDtype kv : {KvDtype::bf16, KvDtype::fp8_e4m3}) {
    if (e.bucket.kv_dtype && *e.bucket.kv_dtype != kv) continue;
    try {
      sparse_mla_spec_of(e.choice, e.bucket.h_q, 2048, kv, arch);
    } catch (const InvalidArgument& err) {
      throw InvalidArgument(fmt::format("{}.choice: not a valid kernel for h_q {} with {} KV on {}: {}", where,
                                        e.bucket.h_q, to_string(kv), to_string(arch), err.what()));
    }
  }
  return e;
}

bool choice_serves(const SparseMlaChoice& c, int topk, KvDtype kv, bool precise) {
  const bool seesaw = c.tile.schedule == MlaSchedule::seesaw || c.tile.combine == MlaCombine::cluster;
  if (seesaw && !sparse_mla::seesaw_takes(topk, precise)) return false;
  // wgmma never takes 2 producer warps: a choice of 2 with the kernel left automatic is mma_sync too.
  const bool fp8_direct =
      kv == KvDtype::fp8_e4m3 && c.tile.kernel != MlaKernel::wgmma && c.tile.producer_warps == 2;
  return !(fp8_direct && precise);
}

const SparseMlaTuningEntry* find_sparse_mla_entry(std::span<const SparseMlaTuningEntry> entries, int rows, int h_q,
                                                  int next_n, int topk, KvDtype kv, bool precise) {
  for (const SparseMlaTuningEntry& e : entries) {
    const SparseMlaBucket& b = e.bucket;
    if (b.h_q == h_q && (!b.kv_dtype || *b.kv_dtype == kv) && b.rows.contains(rows) && b.next_n.contains(next_n) &&
        b.topk.contains(topk) && choice_serves(e.choice, topk, kv, precise))
      return &e;
  }
  return nullptr;
}

int max_tuned_splits(std::span<const SparseMlaTuningEntry> entries, int rows, int h_q, int topk) {
  int most = 0;
  for (const SparseMlaTuningEntry& e : entries)
    if (e.bucket.h_q == h_q && e.bucket.rows.contains(rows) && e.bucket.topk.contains(topk))
      most = std::max(most, e.choice.num_splits);
  return most;
}

const SparseMlaTuningEntry* tuned_sparse_mla(int rows, int h_q, int next_n, int topk, KvDtype kv, bool precise,
                                             int sm_count) {
  const TuningDb* db = active_tuning_db();
  if (db == nullptr || db->sparse_mla.empty() || db->key.sm_count != sm_count) return nullptr;
  return find_sparse_mla_entry(db->sparse_mla, rows, h_q, next_n, topk, kv, precise);
}

int tuned_max_splits(int rows, int h_q, int topk, int sm_count) {
  const TuningDb* db = active_tuning_db();
  if (db == nullptr || db->sparse_mla.empty() || db->key.sm_count != sm_count) return 0;
  return max_tuned_splits(db->sparse_mla, rows, h_q, topk);
}

}  // namespace nsajit::tuning
