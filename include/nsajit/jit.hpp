// nsajit/jit.hpp — the JIT machinery as a user sees it: precompiling, the cache, statistics.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nsajit/spec.hpp"

namespace nsajit {

// The nsajit version baked into every cache key ("0.1.0").
std::string version();

// NVRTC's version as "major.minor" (e.g. "13.0").
std::string nvrtc_version();

// The cache directory: $NSAJIT_CACHE_DIR, else $XDG_CACHE_HOME/nsajit (if absolute), else ~/.cache/nsajit, else
// /tmp/nsajit-cache-<uid>. It is used only if owned by the current user or root and not writable by
// group or others (else one warning, and kernels are compiled in memory only); nsajit creates it 0700.
std::string cache_dir();

// The generated CUDA source of a spec (validated; default tile filled). Deterministic.
std::string generate_source(const KernelSpec& spec);

// Where a kernel's cubin came from on the first request of this process.
enum class CubinSource : std::uint8_t { memory, disk_cache, compiled };

struct KernelRecord {
  std::string name;        // readable_name(spec)
  CubinSource source;      // disk_cache = hit, compiled = miss
  double compile_ms = 0;   // NVRTC time (0 on a hit)
  double load_ms = 0;      // read + verify (+ write after compiling)
  std::size_t cubin_bytes = 0;
  bool on_disk = true;     // false: compiled but the cache entry could not be written
  std::string key;         // the cache key: SHA-256 (64 hex digits) of the key record, no paths
};

// Ensures the spec's cubin is in the disk cache (compiling if needed, unless strict mode is on);
// needs no GPU or driver. The spec's arch field is the target. Returns how it was obtained
// (source memory for a spec this process already holds). Throws InvalidArgument for a spec
// validate() refuses, CompileError when NVRTC fails, and KernelNotPrecompiled in strict mode when
// the cubin is not in the cache.
KernelRecord precompile(const KernelSpec& spec);

// Strict mode: the process never compiles. A kernel whose cubin is neither in memory nor in the
// disk cache throws KernelNotPrecompiled (naming the kernel and the `nsajit precompile` command
// that produces it) from the launch (or precompile) that needs it, instead of invoking NVRTC.
// Default: on when the environment has NSAJIT_NO_JIT=1 (=0 or unset: off; any other value throws
// InvalidArgument naming the variable on first use). set_strict_mode overrides the environment
// for the whole process from then on; thread-safe.
void set_strict_mode(bool on);
bool strict_mode();

// Tuning database (`nsajit autotune`; docs/notes/autotune.md): per family and shape bucket, the
// kernel variant / launch plan measured fastest on one GPU; shapes outside its buckets keep the
// heuristics. Resolved once, lazily, on the first dispatch that consults it: the path given here,
// else $NSAJIT_TUNING_DB, else the database shipped for the current GPU (tune/db/). "none" uses
// the heuristics only; "" returns to that default order. A database for another GPU, nsajit or
// NVRTC version or schema, or a truncated or malformed one, is ignored with one message on stderr
// naming the file and field. Thread-safe; takes effect at the next dispatch.
void set_tuning_db(const std::string& path);
// The database in use ("shipped h200.json", a path) or "none (why)". Resolves it (a driver call
// for the current device on first use).
std::string tuning_db_in_use();

// One record per spec this process obtained a cubin for, in first-use order.
std::vector<KernelRecord> jit_records();

}  // namespace nsajit
