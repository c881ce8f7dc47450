// subcommands.hpp — the tool's subcommands that register themselves with CLI11: each add_*
// function adds its subcommand and options to `app` and returns what to run when it is parsed.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <charconv>
#include <functional>
#include <string>
#include <string_view>

namespace nsajit::tools {

struct Subcommand {
  CLI::App* app = nullptr;
  std::function<int()> run;  // returns the exit code: 0 ok, 1 a check failed, 2 bad usage
  // Optional: a clearer message than CLI11's for a parse error, or "" to keep CLI11's.
  std::function<std::string(const CLI::ParseError&)> explain;
};

// An integer option's reader (a transform: it writes the value back in decimal, so that CLI11 does
// not read "010" as octal): "abc" reads "expected an integer in [1, 1024], got 'abc'" (CLI::Range
// says "not in range" of anything that is not a number). Blanks and a leading '+' are allowed.
inline CLI::Validator integer_in(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        const std::size_t first = text.find_first_not_of(" \t");
        const std::size_t last = text.find_last_not_of(" \t");
        std::string_view digits = first == std::string::npos ? "" : std::string_view(text).substr(first, last - first + 1);
        if (digits.size() > 1 && digits[0] == '+' && digits[1] != '-') digits.remove_prefix(1);
        long long value = 0;
        const char* end = digits.data() + digits.size();
        const auto [stop, ec] = std::from_chars(digits.data(), end, value);
        if (digits.empty() || ec != std::errc{} || stop != end || value < lo || value > hi)
          return fmt::format("expected an integer in [{}, {}], got '{}'", lo, hi, text);
        text = std::to_string(value);
        return "";
      },
      fmt::format("INT in [{} - {}]", lo, hi));
}

Subcommand add_precompile_command(CLI::App& app);  // tools/precompile_command.cpp
Subcommand add_cache_command(CLI::App& app);       // tools/cache_command.cpp
Subcommand add_gen_command(CLI::App& app);         // tools/info_command.cpp
Subcommand add_info_command(CLI::App& app);        // tools/info_command.cpp
Subcommand add_autotune_command(CLI::App& app);    // tools/autotune_command.cpp

}  // namespace nsajit::tools
