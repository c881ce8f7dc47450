// tuning_db.hpp — the tuning database the dispatcher reads: per family and shape bucket, the
// variant / launch plan `nsajit autotune` measured fastest on one GPU (docs/notes/autotune.md).
//
// Keyed by GPU name, SM count, arch, NVRTC version, nsajit version and schema version (the
// driver version is recorded, not compared: it does not change the SASS). A database for
// another GPU, version or schema, or one that is truncated or malformed, is ignored with one
// message naming the file and field, and the heuristics decide.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "families/sparse_mla/tuning.hpp"
#include "families/topk/tuning.hpp"

namespace nsajit::tuning {

inline constexpr int kSchemaVersion = 1;
inline constexpr const char* kEnvVariable = "NSAJIT_TUNING_DB";

// What a database was made on (and what it applies to).
struct TuningKey {
  std::string gpu;      // cuDeviceGetName, e.g. "NVIDIA H200"
  int sm_count = 0;
  std::string arch;     // e.g. "sm_90a"
  std::string driver;   // recorded only
  std::string nvrtc;    // nvrtc_version()
  std::string nsajit;   // version()
};

struct TuningDb {
  std::string origin;  // the file, or "shipped <name>" for an embedded one
  TuningKey key;
  std::vector<detail::TopkTuningEntry> topk;
  std::vector<SparseMlaTuningEntry> sparse_mla;
};

// Parses a database; InvalidArgument "<origin>: <field>: <what is wrong>" for text that is not
// JSON (e.g. truncated), another schema, an unknown or bad field, or a sparse MLA choice that is
// not a valid spec for its bucket on the database's arch.
TuningDb parse_tuning_db(std::string_view text, const std::string& origin);

// Why `db` does not apply where `here` was taken ("" when it does): another GPU (name or SM
// count), arch, NVRTC or nsajit version.
std::string key_mismatch(const TuningKey& db, const TuningKey& here);

// The databases shipped with the library (embedded at build time from tune/db/*.json), each
// with its origin ("shipped h200.json"); a shipped file that does not parse is a build error
// caught by the tests, skipped here.
const std::vector<TuningDb>& shipped_tuning_dbs();

// The database the dispatcher uses, or nullptr (heuristics only). Resolved once, lazily, on the
// first call (thread-safe): the path given to set_tuning_db, else $NSAJIT_TUNING_DB ("none":
// no database), else the shipped database whose key matches the current device. A file that
// cannot be used (read_small_file: not a regular file of at most 16 MiB; or it does not parse) is
// reported once on stderr. Needs the current context's device (first call only).
const TuningDb* active_tuning_db();

// The key of the current context's device and this build (driver calls).
TuningKey current_key();

}  // namespace nsajit::tuning
