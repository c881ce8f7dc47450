// json_text.hpp — JSON text for the files and output nsajit writes: dumping that never throws on
// text that is not UTF-8 (a file name, a path, a message).
#pragma once

#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace nsajit {

// j.dump(indent), with any invalid UTF-8 in its strings written as U+FFFD instead of throwing.
std::string dump_json(const nlohmann::json& j, int indent = -1);

// The longest prefix of `text` of at most `max_bytes` bytes that does not end inside a UTF-8
// character.
std::string_view utf8_prefix(std::string_view text, std::size_t max_bytes);

}  // namespace nsajit
