// tuning.hpp — top-k's part of the tuning database: a bucket of shapes (rows, width, topk ranges)
// mapped to launch-plan constraints (families/topk/heuristics.hpp), the JSON fields that name
// them, and the pure bucket lookup. The dispatcher and `nsajit autotune` share these.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "families/topk/heuristics.hpp"
#include "runtime/tuning_range.hpp"


namespace nsajit::detail {

// Shapes of nsajit::topk calls: rows, width (score row width) and topk, each a range, and the
// scores' dtype (absent: either; the plan differs by dtype, e.g. bf16's 256-thread speculative rows).
struct TopkBucket {
  std::string name;
  tuning::Range rows, width, topk;
  std::optional<ScoreDtype> score_dtype;
};

struct TopkTuningEntry {
  TopkBucket bucket;
  TopkPlanConstraints choice;  // fields the database leaves out stay unconstrained ("auto")
};

// The fields a search space or a database choice may name, each an integer or "auto":
// ctas_per_row (1, 2, 4, 8, 16), threads (256, 512, 1024), speculate, dense_registers,
// prefetch_row, prefetch_slice, force_streaming (0 or 1).
const std::vector<std::string>& topk_choice_fields();
// Sets `field` of `c` from `value` (an integer or "auto"); InvalidArgument naming `where`, the
// value and what is accepted.
void set_topk_choice_field(TopkPlanConstraints& c, const std::string& field, const nlohmann::json& value,
                           const std::string& where);
// The choice as JSON: only the constrained fields.
nlohmann::json topk_choice_json(const TopkPlanConstraints& c);
// A bucket object {"rows", "width", "topk", "name"?, "score_dtype"? ("fp32" or "bf16")};
// InvalidArgument naming `where` and the field for an unknown field, a bad range or dtype, or a
// missing one.
TopkBucket parse_topk_bucket(const nlohmann::json& j, const std::string& where);
nlohmann::json topk_bucket_json(const TopkBucket& b);
// A database entry {"bucket": {...}, "choice": {...}, ...}.
TopkTuningEntry parse_topk_entry(const nlohmann::json& j, const std::string& where);

// Whether two plans launch the same way (autotune times each distinct plan once).
bool same_topk_launch(const TopkLaunchPlan& a, const TopkLaunchPlan& b);

// The first entry whose bucket holds (rows, width, topk) and score_dtype, or nullptr. Pure.
const TopkTuningEntry* find_topk_entry(std::span<const TopkTuningEntry> entries, int rows, int width, int topk,
                                       ScoreDtype score_dtype);

// The constraints `nsajit::topk` passes to detail::topk: the reference the dispatcher's launch
// recognises as "look the shape up in the tuning database" (tests and the bench pass their own).
extern const TopkPlanConstraints kDispatcherChoice;

// The constraints of the active tuning database's entry for the shape and score dtype, when one
// matches and its plan is possible for this shape on sm_count SMs; else nullptr (the heuristics
// decide).
const TopkPlanConstraints* tuned_topk_constraints(int rows, int width, int topk, ScoreDtype score_dtype, int sm_count);

}  // namespace nsajit::detail
