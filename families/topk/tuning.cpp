// tuning.cpp — top-k's tuning database entries: JSON fields, buckets and the dispatcher's lookup.
#include "families/topk/tuning.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <tuple>

#include "nsajit/errors.hpp"
#include "runtime/tuning_db.hpp"

namespace nsajit::detail {
namespace {

using tuning::bad_field;

struct Field {
  const char* name;
  std::vector<int> values;  // accepted integers besides "auto"
  int unset;                // the value that leaves the plan's choice ("auto")
  int TopkPlanConstraints::* member = nullptr;
  bool TopkPlanConstraints::* flag = nullptr;  // force_streaming
};

const std::vector<Field>& fields() {
  static const std::vector<Field> f = {
      {"ctas_per_row", {1, 2, 4, 8, 16}, 0, &TopkPlanConstraints::ctas_per_row},
      {"threads", {256, 512, 1024}, 0, &TopkPlanConstraints::threads},
      {"speculate", {0, 1}, -1, &TopkPlanConstraints::speculate},
      {"dense_registers", {0, 1}, -1, &TopkPlanConstraints::dense_registers},
      {"prefetch_row", {0, 1}, -1, &TopkPlanConstraints::prefetch_row},
      {"prefetch_slice", {0, 1}, -1, &TopkPlanConstraints::prefetch_slice},
      {"force_streaming", {0, 1}, 0, nullptr, &TopkPlanConstraints::force_streaming},
  };
  return f;
}

}  // namespace

const TopkPlanConstraints kDispatcherChoice{};

const std::vector<std::string>& topk_choice_fields() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const Field& f : fields()) n.push_back(f.name);
    return n;
  }();
  return names;
}

void set_topk_choice_field(TopkPlanConstraints& c, const std::string& field, const nlohmann::json& value,
                           const std::string& where) {
  for (const Field& f : fields()) {
    if (field != f.name) continue;
    const std::string expected = fmt::format("\"auto\" or one of {}", fmt::join(f.values, ", "));
    int v = 0;
    if (value.is_string() && value.get<std::string>() == "auto") {
      v = f.unset;
    } else {
      if (!value.is_number_integer()) bad_field(where, value, expected);
      const long long given = value.get<long long>();
      if (std::find(f.values.begin(), f.values.end(), given) == f.values.end()) bad_field(where, value, expected);
      v = int(given);
    }
    if (f.flag) c.*f.flag = v == 1;
    else c.*f.member = v;
    return;
  }
  throw InvalidArgument(fmt::format("{}: unknown top-k field (expected one of {})", where,
                                    fmt::join(topk_choice_fields(), ", ")));
}

nlohmann::json topk_choice_json(const TopkPlanConstraints& c) {
  nlohmann::json j = nlohmann::json::object();
  for (const Field& f : fields()) {
    if (f.flag) {
      if (c.*f.flag) j[f.name] = 1;
    } else if (c.*f.member != f.unset) {
      j[f.name] = c.*f.member;
    }
  }
  return j;
}

TopkBucket parse_topk_bucket(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) bad_field(where, j, "an object with rows, width and topk");
  tuning::reject_unknown_fields(j, {"name", "rows", "width", "topk", "score_dtype"}, where);
  TopkBucket b;
  for (const char* required : {"rows", "width", "topk"})
    if (!j.contains(required)) throw InvalidArgument(fmt::format("{}.{}: missing (expected a range)", where, required));
  if (j.contains("name")) {
    if (!j["name"].is_string()) bad_field(where + ".name", j["name"], "a string");
    b.name = j["name"].get<std::string>();
  }
  b.rows = tuning::parse_range(j["rows"], where + ".rows");
  b.width = tuning::parse_range(j["width"], where + ".width");
  b.topk = tuning::parse_range(j["topk"], where + ".topk");
  if (j.contains("score_dtype")) {
    for (ScoreDtype d : {ScoreDtype::fp32, ScoreDtype::bf16})
      if (j["score_dtype"] == to_string(d)) b.score_dtype = d;
    if (!b.score_dtype) bad_field(where + ".score_dtype", j["score_dtype"], "\"fp32\" or \"bf16\"");
  }
  return b;
}

nlohmann::json topk_bucket_json(const TopkBucket& b) {
  nlohmann::json j = {{"rows", tuning::range_json(b.rows)}, {"width", tuning::range_json(b.width)},
                      {"topk", tuning::range_json(b.topk)}};
  if (!b.name.empty()) j["name"] = b.name;
  if (b.score_dtype) j["score_dtype"] = to_string(*b.score_dtype);
  return j;
}

TopkTuningEntry parse_topk_entry(const nlohmann::json& j, const std::string& where) {
  TopkTuningEntry e;
  tuning::parse_entry(
      j, where, "an object of top-k plan fields",
      [&](const nlohmann::json& b, const std::string& w) { e.bucket = parse_topk_bucket(b, w); },
      [&](const std::string& f, const nlohmann::json& v, const std::string& w) { set_topk_choice_field(e.choice, f, v, w); });
  return e;
}

bool same_topk_launch(const TopkLaunchPlan& a, const TopkLaunchPlan& b) {
  auto fields = [](const TopkLaunchPlan& p) {
    return std::tuple(p.algorithm, p.cluster_size, p.slice, p.resident_vecs, p.threads, p.cand_capacity,
                      p.slots_per_thread, p.hist_offset, p.slots_offset, p.cand_offset, p.overflow_warp_offset,
                      p.bitmap_offset, p.bitmap_words, p.prefetch_row, p.prefetch_slice, p.list_offset,
                      p.list_words, p.cluster_list_rank, p.cluster_list_offset,
                      p.cluster_list_capacity, p.cluster_warp_capacity, p.cluster_inbox_offset, p.dynamic_smem);
  };
  return fields(a) == fields(b);
}

const TopkTuningEntry* find_topk_entry(std::span<const TopkTuningEntry> entries, int rows, int width, int topk,
                                       ScoreDtype score_dtype) {
  for (const TopkTuningEntry& e : entries)
    if (e.bucket.rows.contains(rows) && e.bucket.width.contains(width) && e.bucket.topk.contains(topk) &&
        (!e.bucket.score_dtype || *e.bucket.score_dtype == score_dtype))
      return &e;
  return nullptr;
}

const TopkPlanConstraints* tuned_topk_constraints(int rows, int width, int topk, ScoreDtype score_dtype, int sm_count) {
  const tuning::TuningDb* db = tuning::active_tuning_db();
  if (db == nullptr || db->topk.empty() || db->key.sm_count != sm_count) return nullptr;
  const TopkTuningEntry* e = find_topk_entry(db->topk, rows, width, topk, score_dtype);
  if (e == nullptr) return nullptr;
  try {  // a bucket's choice may not fit every shape of its range (e.g. a cluster's bitmaps)
    plan_topk_launch(rows, width, topk, score_dtype, sm_count, 16, e->choice);
  } catch (const std::invalid_argument&) {
    return nullptr;
  }
  return &e->choice;
}

}  // namespace nsajit::detail
