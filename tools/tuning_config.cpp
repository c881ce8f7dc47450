// tuning_config.cpp — autotune's config, candidates and database JSON (see tuning_config.hpp).
#include "tools/tuning_config.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <set>
#include <stdexcept>

#include "families/sparse_mla/heuristics.hpp"
#include "nsajit/errors.hpp"
#include "runtime/json_text.hpp"
#include "runtime/small_file.hpp"

namespace nsajit::tools {
namespace {

using tuning::bad_field;

// Bounds on the inputs a bucket is timed on: 4 GiB of top-k scores, 1.2 GB of sparse MLA queries.
constexpr long long kMaxTopkScores = 1LL << 30;
constexpr long long kMaxMlaQueryHeads = 1LL << 20;

// "[1, 16]" as the config writes a range.
std::string range_text(const tuning::Range& r) { return dump_json(tuning::range_json(r)); }

int positive_int(const nlohmann::json& v, const std::string& where, int max = 1 << 30) {
  const std::optional<std::int64_t> i = tuning::json_int64(v);
  if (!i || *i < 1 || *i > max) bad_field(where, v, fmt::format("an integer in [1, {}]", max));
  return int(*i);
}

// {"field": [values]} checked against the family's fields with `set` (which throws naming where).
template <typename Set>
SearchSpace parse_search(const nlohmann::json& j, const std::string& where, const std::vector<std::string>& fields,
                         Set set) {
  if (!j.is_object()) bad_field(where, j, "an object of field -> list of values");
  SearchSpace s;
  for (const auto& [field, values] : j.items()) {
    const std::string w = where + "." + field;
    if (std::find(fields.begin(), fields.end(), field) == fields.end())
      throw InvalidArgument(fmt::format("{}: unknown field (expected one of {})", w, fmt::format("{}", fmt::join(fields, ", "))));
    if (!values.is_array() || values.empty()) bad_field(w, values, "a non-empty list of values");
    for (std::size_t i = 0; i < values.size(); ++i) set(field, values[i], fmt::format("{}[{}]", w, i));
    s[field] = std::vector<nlohmann::json>(values.begin(), values.end());
  }
  return s;
}

SearchSpace merged(SearchSpace family, const SearchSpace& bucket) {
  for (const auto& [field, values] : bucket) family[field] = values;
  return family;
}

// Every combination of the search space's values, in order (the first field slowest).
void for_each_point(const SearchSpace& s, const std::function<void(const std::vector<std::pair<std::string, nlohmann::json>>&)>& f) {
  std::vector<std::pair<std::string, const std::vector<nlohmann::json>*>> fields;
  for (const auto& [name, values] : s) fields.push_back({name, &values});
  std::vector<std::size_t> at(fields.size(), 0);
  std::vector<std::pair<std::string, nlohmann::json>> point(fields.size());
  while (true) {
    for (std::size_t i = 0; i < fields.size(); ++i) point[i] = {fields[i].first, (*fields[i].second)[at[i]]};
    f(point);
    std::size_t i = fields.size();
    while (i > 0 && ++at[i - 1] == fields[i - 1].second->size()) at[--i] = 0;
    if (i == 0) return;
  }
}

TopkTuneBucket parse_topk_tune_bucket(const nlohmann::json& j, const std::string& where) {
  nlohmann::json ranges = j;
  ranges.erase("tune");
  ranges.erase("search");
  TopkTuneBucket b;
  b.bucket = detail::parse_topk_bucket(ranges, where);
  if (b.bucket.topk.lo != b.bucket.topk.hi) bad_field(where + ".topk", j["topk"], "one topk (the kernel's spec)");
  if (!j.contains("tune")) throw InvalidArgument(fmt::format("{}.tune: missing (expected {{\"rows\", \"width\"}})", where));
  const nlohmann::json& t = j["tune"];
  if (!t.is_object()) bad_field(where + ".tune", t, "an object {\"rows\", \"width\", \"len_lo\"?}");
  tuning::reject_unknown_fields(t, {"rows", "width", "len_lo"}, where + ".tune");
  if (!t.contains("rows") || !t.contains("width"))
    throw InvalidArgument(fmt::format("{}.tune: expected rows and width", where));
  b.rows = positive_int(t["rows"], where + ".tune.rows", 1 << 20);
  b.width = positive_int(t["width"], where + ".tune.width", detail::kMaxTopkWidth);
  b.len_lo = t.contains("len_lo") ? positive_int(t["len_lo"], where + ".tune.len_lo", b.width) : b.width;
  if (!b.bucket.rows.contains(b.rows))
    bad_field(where + ".tune.rows", t["rows"], "a value inside the bucket's rows range " + range_text(b.bucket.rows));
  if ((long long)b.rows * b.width > kMaxTopkScores)
    bad_field(where + ".tune", t, fmt::format("rows x width <= {} scores (the timed input is held in memory)", kMaxTopkScores));
  if (!b.bucket.width.contains(b.width))
    bad_field(where + ".tune.width", t["width"], "a value inside the bucket's width range " + range_text(b.bucket.width));
  if (j.contains("search"))
    b.search = parse_search(j["search"], where + ".search", detail::topk_choice_fields(), [](const auto& f, const auto& v, const auto& w) {
      detail::TopkPlanConstraints c;
      detail::set_topk_choice_field(c, f, v, w);
    });
  return b;
}

// A bucket of the search space: one bucket, or one per dtype when score_dtype is a list (the bf16
// one named with a " bf16" suffix, as the bench names its cases).
std::vector<TopkTuneBucket> parse_topk_tune_buckets(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) bad_field(where, j, "a bucket object");
  tuning::reject_unknown_fields(j, {"name", "rows", "width", "topk", "score_dtype", "tune", "search"}, where);
  if (j.contains("name") && !j["name"].is_string()) bad_field(where + ".name", j["name"], "a string");
  const bool listed = j.contains("score_dtype") && j["score_dtype"].is_array();
  if (!listed) return {parse_topk_tune_bucket(j, where)};
  const nlohmann::json& dtypes = j["score_dtype"];
  const bool distinct = dtypes.size() < 2 || dtypes[0] != dtypes[1];
  if (dtypes.empty() || dtypes.size() > 2 || !distinct)
    bad_field(where + ".score_dtype", dtypes, "\"fp32\", \"bf16\" or a list of distinct ones");
  std::vector<TopkTuneBucket> out;
  for (const nlohmann::json& d : dtypes) {
    nlohmann::json one = j;
    one["score_dtype"] = d;
    if (d == "bf16") one["name"] = j.contains("name") ? j["name"].get<std::string>() + " bf16" : "bf16";
    out.push_back(parse_topk_tune_bucket(one, fmt::format("{}[score_dtype {}]", where, dump_json(d))));
  }
  return out;
}

std::vector<SparseMlaTuneBucket> parse_sparse_mla_tune_group(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) bad_field(where, j, "a bucket object");
  tuning::reject_unknown_fields(j, {"name", "h_q", "kv_dtype", "rows", "tune_rows", "next_n", "topk", "search"}, where);
  for (const char* required : {"h_q", "rows", "tune_rows", "topk"})
    if (!j.contains(required)) throw InvalidArgument(fmt::format("{}.{}: missing", where, required));
  auto list = [](const nlohmann::json& v) { return v.is_array() ? v : nlohmann::json::array({v}); };
  const nlohmann::json h_qs = list(j["h_q"]);
  const nlohmann::json kvs = j.contains("kv_dtype") ? list(j["kv_dtype"]) : nlohmann::json::array({nullptr});
  // rows: one range, or a list of ranges; a range is an integer or [lo, hi].
  const nlohmann::json& r = j["rows"];
  const bool many = r.is_array() && !r.empty() && r[0].is_array();
  const nlohmann::json rows = many ? r : nlohmann::json::array({r});
  if (r.is_array() && r.empty()) bad_field(where + ".rows", r, "a range or a non-empty list of ranges");
  const nlohmann::json tune_rows = list(j["tune_rows"]);
  if (tune_rows.size() != rows.size())
    bad_field(where + ".tune_rows", j["tune_rows"], fmt::format("one value per rows range ({})", rows.size()));
  if (h_qs.empty()) bad_field(where + ".h_q", j["h_q"], "a non-empty list");
  if (kvs.empty()) bad_field(where + ".kv_dtype", j["kv_dtype"], "\"bf16\", \"fp8\" or a non-empty list of them");
  if (j.contains("name") && !j["name"].is_string()) bad_field(where + ".name", j["name"], "a string");
  SearchSpace search;
  if (j.contains("search"))
    search = parse_search(j["search"], where + ".search", tuning::sparse_mla_choice_fields(),
                          [](const auto& f, const auto& v, const auto& w) {
                            tuning::SparseMlaChoice c;
                            tuning::set_sparse_mla_choice_field(c, f, v, w);
                          });
  std::vector<SparseMlaTuneBucket> out;
  for (std::size_t hi = 0; hi < h_qs.size(); ++hi)
    for (std::size_t ki = 0; ki < kvs.size(); ++ki)
      for (std::size_t ri = 0; ri < rows.size(); ++ri) {
        nlohmann::json b = {{"h_q", h_qs[hi]}, {"rows", rows[ri]}, {"topk", j["topk"]}};
        if (!kvs[ki].is_null()) b["kv_dtype"] = kvs[ki];
        if (j.contains("next_n")) b["next_n"] = j["next_n"];
        const std::string w = fmt::format("{}[h_q {}, kv_dtype {}, rows {}]", where, dump_json(h_qs[hi]),
                                          dump_json(kvs[ki]), dump_json(rows[ri]));
        SparseMlaTuneBucket t;
        t.bucket = tuning::parse_sparse_mla_bucket(b, w);
        if (t.bucket.topk.lo != t.bucket.topk.hi || t.bucket.topk.lo % 64 != 0 || t.bucket.topk.lo < 64)
          bad_field(where + ".topk", j["topk"], "one topk, a multiple of 64 (the kernel's spec)");
        t.rows = positive_int(tune_rows[ri], fmt::format("{}.tune_rows[{}]", where, ri), 1 << 20);
        if (!t.bucket.rows.contains(t.rows))
          bad_field(fmt::format("{}.tune_rows[{}]", where, ri), tune_rows[ri],
                    "a value inside its rows range " + range_text(t.bucket.rows));
        if ((long long)t.rows * t.bucket.h_q > kMaxMlaQueryHeads)
          bad_field(fmt::format("{}.tune_rows[{}]", where, ri), tune_rows[ri],
                    fmt::format("rows x h_q <= {} (the timed queries are held in memory)", kMaxMlaQueryHeads));
        t.bucket.name = fmt::format("{}h{} {} rows {}", j.contains("name") ? j["name"].get<std::string>() + " " : "",
                                    t.bucket.h_q, kvs[ki].is_null() ? "any KV" : kvs[ki].get<std::string>(),
                                    dump_json(rows[ri]));
        t.search = search;
        out.push_back(std::move(t));
      }
  return out;
}

}  // namespace

TuneConfig parse_tune_config(const std::string& text, const std::string& path) {
  const nlohmann::json j = tuning::parse_json_object(text, path);
  tuning::reject_unknown_fields(j, {"schema", "iters", "topk", "sparse_mla"}, path + ":");
  if (!j.contains("schema") || j["schema"] != tuning::kSchemaVersion)
    bad_field(path + ": schema", j.value("schema", nlohmann::json("missing")), std::to_string(tuning::kSchemaVersion));
  TuneConfig c;
  c.path = path;
  if (j.contains("iters")) c.iters = positive_int(j["iters"], path + ": iters", 10000);
  if (!j.contains("topk") && !j.contains("sparse_mla"))
    throw InvalidArgument(fmt::format("{}: expected \"topk\" and/or \"sparse_mla\"", path));
  auto family_of = [&](const char* name, std::initializer_list<const char*> known, const std::vector<std::string>& fields,
                       auto set, auto each_bucket) {
    if (!j.contains(name)) return;
    const std::string where = path + ": " + name;
    const nlohmann::json& f = j[name];
    if (!f.is_object()) bad_field(where, f, "an object with \"search\" and \"buckets\"");
    tuning::reject_unknown_fields(f, known, where);
    const SearchSpace search = f.contains("search") ? parse_search(f["search"], where + ".search", fields, set) : SearchSpace{};
    if (!f.contains("buckets") || !f["buckets"].is_array() || f["buckets"].empty())
      bad_field(where + ".buckets", f.value("buckets", nlohmann::json("missing")), "a non-empty list of buckets");
    for (std::size_t i = 0; i < f["buckets"].size(); ++i)
      each_bucket(f["buckets"][i], fmt::format("{}.buckets[{}]", where, i), search);
  };
  family_of(
      "topk", {"search", "buckets"}, detail::topk_choice_fields(),
      [](const auto& f, const auto& v, const auto& w) {
        detail::TopkPlanConstraints t;
        detail::set_topk_choice_field(t, f, v, w);
      },
      [&](const nlohmann::json& b, const std::string& w, const SearchSpace& s) {
        for (TopkTuneBucket& t : parse_topk_tune_buckets(b, w)) {
          t.search = merged(s, t.search);
          c.topk.push_back(std::move(t));
        }
      });
  if (j.contains("sparse_mla") && j["sparse_mla"].is_object() && j["sparse_mla"].contains("kv_tokens")) {
    const nlohmann::json& v = j["sparse_mla"]["kv_tokens"];
    const std::optional<std::int64_t> tokens = tuning::json_int64(v);
    // whole FP8 pages: the FP8 buckets time a paged cache of these tokens
    if (!tokens || *tokens < kMlaKvTokensPage || *tokens > kMaxMlaKvTokens || *tokens % kMlaKvTokensPage != 0)
      bad_field(path + ": sparse_mla.kv_tokens", v,
                fmt::format("a multiple of {} in [{}, {}]", kMlaKvTokensPage, kMlaKvTokensPage, kMaxMlaKvTokens));
    c.mla_kv_tokens = int(*tokens);
  }
  family_of(
      "sparse_mla", {"kv_tokens", "search", "buckets"}, tuning::sparse_mla_choice_fields(),
      [](const auto& f, const auto& v, const auto& w) {
        tuning::SparseMlaChoice t;
        tuning::set_sparse_mla_choice_field(t, f, v, w);
      },
      [&](const nlohmann::json& b, const std::string& w, const SearchSpace& s) {
        for (SparseMlaTuneBucket& t : parse_sparse_mla_tune_group(b, w)) {
          t.search = merged(s, t.search);
          c.sparse_mla.push_back(std::move(t));
        }
      });
  return c;
}

TuneConfig load_tune_config(const std::string& path) {
  return parse_tune_config(read_small_file(path, "--config " + path), path);
}

std::string TopkCandidate::describe() const {
  const bool exact = plan.algorithm == TopkAlgorithm::exact_sweeps || plan.algorithm == TopkAlgorithm::cluster_sweeps;
  std::string s = fmt::format("ctas {} x {} threads", plan.cluster_size, plan.threads);
  if (!exact) s += fmt::format(", {}", to_string(plan.algorithm));
  if (plan.prefetch_row) s += " + row prefetch";
  if (plan.prefetch_slice) s += ", slice prefetch";
  if (plan.resident_vecs == 0 && exact) s += ", streaming";
  return s;
}

std::vector<TopkCandidate> topk_candidates(const TopkTuneBucket& b, int topk, int sm_count, std::vector<Dropped>& dropped) {
  std::vector<TopkCandidate> out;
  TopkCandidate heuristic;
  // A bucket without a dtype is timed on fp32 scores.
  const ScoreDtype dtype = b.bucket.score_dtype.value_or(ScoreDtype::fp32);
  heuristic.plan = detail::plan_topk_launch(b.rows, b.width, topk, dtype, sm_count);
  heuristic.heuristic = true;
  out.push_back(heuristic);
  std::set<std::string> dropped_seen;
  for_each_point(b.search, [&](const auto& point) {
    detail::TopkPlanConstraints c;
    std::string what;
    for (const auto& [field, value] : point) {
      detail::set_topk_choice_field(c, field, value, field);
      what += fmt::format("{}{}={}", what.empty() ? "" : " ", field,
                          value.is_string() ? value.template get<std::string>() : dump_json(value));
    }
    TopkCandidate cand;
    cand.constraints = c;
    try {
      cand.plan = detail::plan_topk_launch(b.rows, b.width, topk, dtype, sm_count, 16, c);
    } catch (const std::invalid_argument& e) {
      if (dropped_seen.insert(e.what()).second) dropped.push_back({what, e.what()});
      return;
    }
    for (const TopkCandidate& o : out)
      if (detail::same_topk_launch(o.plan, cand.plan)) return;
    out.push_back(cand);
  });
  return out;
}

std::string SparseMlaCandidate::describe() const {
  return fmt::format("{} splits {}", readable_name(spec), splits);
}

std::vector<SparseMlaCandidate> sparse_mla_candidates(const SparseMlaTuneBucket& b, KvDtype kv, Arch arch, int sm_count,
                                                      std::vector<Dropped>& dropped) {
  const int topk = int(b.bucket.topk.lo);
  const int h_q = b.bucket.h_q;
  std::vector<SparseMlaCandidate> out;
  auto splits_of = [&](const tuning::SparseMlaChoice& c) {
    return c.num_splits > 0 ? std::min(c.num_splits, topk / sparse_mla::kBlockTokens)
                            : sparse_mla::auto_splits(b.rows, h_q, topk, sm_count);
  };
  // (A schedule the choice leaves open is the dispatcher's: sparse_mla_spec_of resolves it.)
  SparseMlaCandidate heuristic;
  heuristic.spec = tuning::sparse_mla_spec_of({}, h_q, topk, kv, arch);
  heuristic.splits = splits_of({});
  heuristic.heuristic = true;
  out.push_back(heuristic);
  std::set<std::string> dropped_seen;
  for_each_point(b.search, [&](const auto& point) {
    tuning::SparseMlaChoice c;
    for (const auto& [field, value] : point) tuning::set_sparse_mla_choice_field(c, field, value, field);
    SparseMlaCandidate cand;
    cand.choice = c;
    std::string what = dump_json(tuning::sparse_mla_choice_json(c));
    try {
      cand.spec = tuning::sparse_mla_spec_of(c, h_q, topk, kv, arch);
    } catch (const InvalidArgument& e) {
      tuning::SparseMlaChoice tile_only = c;
      tile_only.num_splits = 0;
      if (dropped_seen.insert(dump_json(tuning::sparse_mla_choice_json(tile_only))).second)
        dropped.push_back({dump_json(tuning::sparse_mla_choice_json(tile_only)), e.what()});
      return;
    }
    cand.splits = splits_of(c);
    if (cand.spec.tile.combine == MlaCombine::cluster) {  // a 2-CTA cluster of each row and head group's splits
      if (c.num_splits > 1 && c.num_splits != sparse_mla::kClusterSplits) {
        const std::string why = fmt::format("combine cluster takes {} splits", sparse_mla::kClusterSplits);
        if (dropped_seen.insert(why).second) dropped.push_back({fmt::format("num_splits {}", c.num_splits), why});
        return;
      }
      if (cand.splits <= 1) return;  // without a split it is the kernel combine's spec at one split
      cand.splits = sparse_mla::kClusterSplits;  // as the launch plan takes it
    }
    const long long ctas = (long long)b.rows * (h_q / cand.spec.tile.heads_per_cta);
    if (cand.splits > 1 && ctas >= sm_count && c.num_splits > 0) {
      const std::string why = fmt::format("{} CTAs already fill the {} SMs: split counts > 1 not tried", ctas, sm_count);
      if (dropped_seen.insert(why).second) dropped.push_back({fmt::format("num_splits {}", c.num_splits), why});
      return;
    }
    for (const SparseMlaCandidate& o : out)
      if (o.spec == cand.spec && o.splits == cand.splits) return;
    out.push_back(cand);
  });
  return out;
}

std::string dry_run_listing(const TuneConfig& config, Arch arch, int sm_count) {
  std::string s = fmt::format("autotune --dry-run: {} ({} top-k and {} sparse MLA buckets; {} SMs, {}; {} timed launches "
                              "per candidate)\n",
                              config.path, config.topk.size(), config.sparse_mla.size(), sm_count, to_string(arch),
                              config.iters);
  std::size_t total = 0;
  for (const TopkTuneBucket& b : config.topk) {
    std::vector<Dropped> dropped;
    const auto cands = topk_candidates(b, int(b.bucket.topk.lo), sm_count, dropped);
    total += cands.size();
    s += fmt::format("\ntopk bucket {} {}: timed at {} x {} (len from {}): {} candidates\n", b.bucket.name,
                     dump_json(detail::topk_bucket_json(b.bucket)), b.rows, b.width, b.len_lo, cands.size());
    for (const TopkCandidate& c : cands)
      s += fmt::format("  {}{}  {}\n", c.heuristic ? "[heuristic] " : "", c.describe(),
                       c.heuristic ? "" : dump_json(detail::topk_choice_json(c.constraints)));
    for (const Dropped& d : dropped) s += fmt::format("  dropped {}: {}\n", d.what, d.why);
  }
  for (const SparseMlaTuneBucket& b : config.sparse_mla)
    for (KvDtype kv : {KvDtype::bf16, KvDtype::fp8_e4m3}) {
      if (b.bucket.kv_dtype && *b.bucket.kv_dtype != kv) continue;
      std::vector<Dropped> dropped;
      const auto cands = sparse_mla_candidates(b, kv, arch, sm_count, dropped);
      total += cands.size();
      s += fmt::format("\nsparse_mla bucket {} ({} KV): timed at {} rows over {} KV tokens: {} candidates\n", b.bucket.name,
                       to_string(kv), b.rows, config.mla_kv_tokens, cands.size());
      for (const SparseMlaCandidate& c : cands) s += fmt::format("  {}{}\n", c.heuristic ? "[heuristic] " : "", c.describe());
      for (const Dropped& d : dropped) s += fmt::format("  dropped {}: {}\n", d.what, d.why);
    }
  s += fmt::format("\n{} candidates in all\n", total);
  return s;
}

nlohmann::json tuning_db_json(const tuning::TuningKey& key, const std::string& config_path, int iters,
                              const std::vector<TunedEntry>& topk, const std::vector<TunedEntry>& sparse_mla) {
  auto entries = [](const std::vector<TunedEntry>& list) {
    nlohmann::json a = nlohmann::json::array();
    for (const TunedEntry& e : list) {
      nlohmann::json dropped = nlohmann::json::array();
      for (const Dropped& d : e.dropped) dropped.push_back(d.what + ": " + d.why);
      a.push_back({{"bucket", e.bucket},
                   {"choice", e.choice},
                   {"shape", e.shape},
                   {"winner", e.winner},
                   {"us", e.us},
                   {"heuristic", e.heuristic},
                   {"heuristic_us", e.heuristic_us},
                   {"speedup", e.us > 0 ? e.heuristic_us / e.us : 0.0},
                   {"candidates", e.candidates},
                   {"dropped", dropped}});
    }
    return a;
  };
  return {{"schema", tuning::kSchemaVersion},
          {"key",
           {{"gpu", key.gpu},
            {"sm_count", key.sm_count},
            {"arch", key.arch},
            {"driver", key.driver},
            {"nvrtc", key.nvrtc},
            {"nsajit", key.nsajit}}},
          {"config", config_path},
          {"iters", iters},
          {"families", {{"topk", entries(topk)}, {"sparse_mla", entries(sparse_mla)}}}};
}

std::vector<DbSpec> tuning_db_specs(const tuning::TuningDb& db, Arch arch, int topk) {
  std::vector<DbSpec> out;
  if (db.key.arch != to_string(arch)) return out;
  for (const tuning::SparseMlaTuningEntry& e : db.sparse_mla) {
    // A choice whose kernel cannot take this topk (seesaw: a multiple of 128) serves no call of it.
    if (!e.bucket.topk.contains(topk)) continue;
    for (KvDtype kv : {KvDtype::bf16, KvDtype::fp8_e4m3}) {
      if ((e.bucket.kv_dtype && *e.bucket.kv_dtype != kv) || !tuning::choice_serves(e.choice, topk, kv, false)) continue;
      out.push_back({tuning::sparse_mla_spec_of(e.choice, e.bucket.h_q, topk, kv, arch),
                     fmt::format("{}: sparse MLA bucket {}", db.origin, e.bucket.name)});
    }
  }
  for (const detail::TopkTuningEntry& e : db.topk) {
    if (!e.bucket.topk.contains(topk)) continue;
    // The choice's tiles over the bucket's shapes on the database's GPU, for its score dtype
    // (without one, for either; the spec then names fp32).
    std::vector<ScoreDtype> dtypes = {ScoreDtype::fp32, ScoreDtype::bf16};
    if (e.bucket.score_dtype) dtypes = {*e.bucket.score_dtype};
    for (const detail::TopkTileChoice& c :
         detail::topk_tile_choices(topk, dtypes, {db.key.sm_count}, e.choice, e.bucket.rows.lo, e.bucket.rows.hi,
                                   e.bucket.width.lo, e.bucket.width.hi)) {
      KernelSpec s;
      s.family = Family::topk;
      s.topk = topk;
      s.score_dtype = e.bucket.score_dtype.value_or(ScoreDtype::fp32);
      s.arch = arch;
      s.tile = c.tile;
      s = with_default_tile(s);
      validate(s);
      out.push_back({s, fmt::format("{}: top-k bucket {} ({})", db.origin, e.bucket.name, c.example)});
    }
  }
  return out;
}

std::vector<tuning::TuningDb> read_tuning_dbs(std::vector<std::string> paths, const std::string& flag) {
  std::string source = flag;
  if (const char* env = std::getenv(tuning::kEnvVariable); paths.empty() && env && *env && std::string(env) != "none") {
    paths.push_back(env);
    source = tuning::kEnvVariable;
  }
  std::vector<tuning::TuningDb> dbs;
  for (const std::string& path : paths) {
    const std::string text = read_small_file(path, source + " " + path);  // its errors name the source
    try {
      dbs.push_back(tuning::parse_tuning_db(text, path));
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(source + " " + e.what());  // the parser's message starts with the path
    }
  }
  return dbs;
}

}  // namespace nsajit::tools
