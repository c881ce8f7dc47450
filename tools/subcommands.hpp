// subcommands.hpp — the tool's subcommands that register themselves with CLI11: each add_*
// function adds its subcommand and options to `app` and returns what to run when it is parsed.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <charconv>
#include <functional>
#include <string>

namespace nsajit::tools {

struct Subcommand {
  CLI::App* app = nullptr;
  std::function<int()> run;  // returns the exit code: 0 ok, 1 a check failed, 2 bad usage
  // Optional: a clearer message than CLI11's for a parse error, or "" to keep CLI11's.
  std::function<std::string(const CLI::ParseError&)> explain;
};

// An integer option's check: "abc" reads "expected an integer in [1, 1024], got 'abc'" (CLI::Range
// says "not in range" of anything that is not a number).
inline CLI::Validator integer_in(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        long long value = 0;
        const char* end = text.data() + text.size();
        const auto [stop, ec] = std::from_chars(text.data(), end, value);
        if (ec != std::errc{} || stop != end || value < lo || value > hi)
          return fmt::format("expected an integer in [{}, {}], got '{}'", lo, hi, text);
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
