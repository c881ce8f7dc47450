// progress.hpp — what the tool's long-running subcommands share: the progress display (one
// updating line on a terminal, one plain line per finished item otherwise, nothing with quiet)
// and atomic file writes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nsajit/jit.hpp"

namespace nsajit::tools {

class Progress {
 public:
  Progress(std::size_t total, bool quiet);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void started(const std::string& name);
  // `result` e.g. "compiled", "hit", "failed"; `error` "" when none (a TTY prints only errors).
  void finished(const std::string& name, const std::string& result, double wall_ms, const std::string& error);
  void finish();  // clears the updating line (also on destruction)

 private:
  void draw();
  void tick();

  std::size_t total_;
  std::size_t done_ = 0;
  bool quiet_, tty_;
  bool stop_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::vector<std::string> running_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread ticker_;
};

// One kernel to bring into the cache, and how it went.
struct CompileItem {
  KernelSpec spec;
  std::string name;      // readable_name(spec)
  KernelRecord record;
  double wall_ms = 0;
  std::string result;    // hit | compiled | missing (strict mode) | failed
  std::string error;
};

// precompile() of every item on `jobs` threads, longest families first (top-k, then sparse MLA),
// with a Progress display; errors are recorded in the items, never thrown.
void compile_all(const std::vector<CompileItem*>& items, int jobs, bool quiet);

// Writes `text` to `path` through a new temporary file of a random name in the same directory
// (created O_EXCL, so never a file or link already there; fsync, rename, fsync of the directory),
// so a reader never sees half of it and a failure leaves neither file. InvalidArgument naming
// `option` and the path on failure.
void write_atomically(const std::string& path, const std::string& text, const std::string& option);

// Throws write_atomically's InvalidArgument now if `path` could not be written (its directory
// missing or read-only, or `path` a directory), so a long run learns it before its work.
void check_writable(const std::string& path, const std::string& option);

}  // namespace nsajit::tools
