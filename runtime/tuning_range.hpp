// tuning_range.hpp — an inclusive range of a shape field in a tuning database bucket.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace nsajit::tuning {

// JSON: an integer (one value) or [lo, hi] (hi null: no bound).
struct Range {
  std::int64_t lo = 0;
  std::int64_t hi = std::numeric_limits<std::int64_t>::max();
  bool contains(std::int64_t v) const { return v >= lo && v <= hi; }
  friend bool operator==(const Range&, const Range&) = default;
};
// InvalidArgument "<where>: ..." for anything else (lo > hi, negative, not integers, beyond int64).
Range parse_range(const nlohmann::json& value, const std::string& where);
nlohmann::json range_json(const Range& r);

// The value of a JSON integer that fits int64 (an unsigned one above INT64_MAX does not), else
// nullopt. Integer fields are read through it and range-checked before narrowing: get<int>()
// would wrap 4294967428 to 132.
std::optional<std::int64_t> json_int64(const nlohmann::json& value);

// "<where>: <field> = <value>: expected <expected>" as an InvalidArgument.
[[noreturn]] void bad_field(const std::string& where, const nlohmann::json& value, const std::string& expected);
// The JSON object of a database or config file's text, parsed strictly (parse_json_strict: no
// key twice); InvalidArgument "<origin>: not valid JSON: <the parser's message, e.g. unexpected end of input>",
// "<origin>: line <n>: duplicate key ..." or "<origin>: expected a JSON object".
nlohmann::json parse_json_object(std::string_view text, const std::string& origin);
// Throws bad_field for a key of `j` not in `known` (j must be an object; where names it).
void reject_unknown_fields(const nlohmann::json& j, std::initializer_list<const char*> known, const std::string& where);
// A database entry {"bucket": ..., "choice": {field: value, ...}}: calls `bucket` on the bucket (where
// "<where>.bucket"), then `set_field(field, value, "<where>.choice.<field>")` for each choice field;
// bad_field when the entry or its choice (expected: `choice_expected`) is not an object of that shape.
void parse_entry(const nlohmann::json& j, const std::string& where, const std::string& choice_expected,
                 const std::function<void(const nlohmann::json&, const std::string&)>& bucket,
                 const std::function<void(const std::string&, const nlohmann::json&, const std::string&)>& set_field);

}  // namespace nsajit::tuning
