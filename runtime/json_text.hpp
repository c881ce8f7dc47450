// json_text.hpp — JSON text in and out: parsing that refuses what a lenient parser silently accepts
// (a key twice, trailing text), and dumping that never throws on text that is not UTF-8 (a file
// name, a path, a message).
#pragma once

#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace nsajit {

// Parses `text` as one JSON value, strictly: nothing but whitespace after it and no key twice in
// one object (a lenient parser keeps the last). Throws InvalidArgument naming `origin`:
// "<origin>: line 3: duplicate key "tp" (each key may appear once)", or
// "<origin>: <not_json>: <the parser's message>" for text that is not one JSON value.
nlohmann::json parse_json_strict(std::string_view text, const std::string& origin,
                                 std::string_view not_json = "not valid JSON");

// j.dump(indent), with any invalid UTF-8 in its strings written as U+FFFD instead of throwing.
std::string dump_json(const nlohmann::json& j, int indent = -1);

// The longest prefix of `text` of at most `max_bytes` bytes that does not end inside a UTF-8
// character.
std::string_view utf8_prefix(std::string_view text, std::size_t max_bytes);

}  // namespace nsajit
