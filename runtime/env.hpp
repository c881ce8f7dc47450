// env.hpp — the NSAJIT_* environment variables nsajit reads, parsed strictly.
//
// A variable that is set to a value outside what it accepts is reported once on stderr, naming the
// variable, the value and what is accepted, and its default is used instead.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nsajit::env {

// An integer variable: `values` lists the accepted values when not empty, else [min, max] is.
struct IntVariable {
  const char* name;
  std::int64_t fallback;  // used when unset or invalid
  std::int64_t min = 0;
  std::int64_t max = 0;
  std::vector<std::int64_t> values = {};
  const char* meaning = "";  // one line for the warning and the README
};

// NSAJIT_PDL: 1 (default) launches the split-KV combine with programmatic dependent launch, 0 not.
extern const IntVariable kPdl;
// NSAJIT_CACHE_LOCK_TIMEOUT: seconds to wait for another process's lock on a cache entry.
extern const IntVariable kCacheLockTimeout;

// The variable's value, or its fallback when unset or invalid (warning once per variable).
std::int64_t read(const IntVariable& variable);

// A directory variable (NSAJIT_CACHE_DIR): its value, or "" when unset; set but empty is reported
// once (expected a directory path) and gives "".
std::string read_path(const char* name);

// Reads every variable above once, so that a bad value is reported up front (the CLI calls it).
void check_all();

}  // namespace nsajit::env
