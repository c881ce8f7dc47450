// progress.cpp — the tool's progress display and atomic writes (see progress.hpp).
#include "tools/progress.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "nsajit/errors.hpp"

namespace nsajit::tools {
namespace {

int terminal_width() {
  winsize w{};
  return ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 20 ? w.ws_col : 100;
}

}  // namespace

Progress::Progress(std::size_t total, bool quiet)
    : total_(total), quiet_(quiet), tty_(!quiet && ::isatty(STDOUT_FILENO)) {
  if (tty_) ticker_ = std::thread([this] { tick(); });
}

Progress::~Progress() { finish(); }

void Progress::started(const std::string& name) {
  std::lock_guard lock(mutex_);
  running_.push_back(name);
  if (tty_) draw();
}

void Progress::finished(const std::string& name, const std::string& result, double wall_ms, const std::string& error) {
  std::lock_guard lock(mutex_);
  ++done_;
  if (auto it = std::find(running_.begin(), running_.end(), name); it != running_.end()) running_.erase(it);
  if (tty_) {
    if (!error.empty()) fmt::print("\r\033[K{} {}: {}\n", result, name, error);
    draw();
  } else if (!quiet_) {
    fmt::print("[{}/{}] {} {} ({:.0f} ms{})\n", done_, total_, result, name, wall_ms, error.empty() ? "" : ": " + error);
    std::fflush(stdout);
  }
}

void Progress::finish() {
  {
    std::lock_guard lock(mutex_);
    if (stop_) return;
    stop_ = true;
  }
  wake_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  if (tty_) {
    fmt::print("\r\033[K");
    std::fflush(stdout);
  }
}

void Progress::draw() {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string line = fmt::format("[{}/{}] {:.1f} s", done_, total_, s);
  if (!running_.empty())
    line += fmt::format("  {}{}", running_.back(),
                        running_.size() > 1 ? fmt::format(" (+{} more)", running_.size() - 1) : "");
  const std::size_t width = std::size_t(terminal_width() - 1);
  if (line.size() > width) line.resize(width);
  fmt::print("\r\033[K{}", line);
  std::fflush(stdout);
}

void Progress::tick() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    draw();
    wake_.wait_for(lock, std::chrono::milliseconds(250));
  }
}

void compile_all(const std::vector<CompileItem*>& items, int jobs, bool quiet) {
  Progress progress(items.size(), quiet);
  // Longest compiles first (top-k, then sparse MLA: seconds each; the rest ~0.1 s), so the last
  // thread is not left with a long one at the end.
  std::vector<CompileItem*> order = items;
  auto weight = [](const CompileItem* it) {
    return it->spec.family == Family::topk ? 2 : it->spec.family == Family::sparse_mla ? 1 : 0;
  };
  std::stable_sort(order.begin(), order.end(), [&](auto* a, auto* b) { return weight(a) > weight(b); });
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t n; (n = next++) < order.size();) {
      CompileItem& it = *order[n];
      progress.started(it.name);
      const auto t0 = std::chrono::steady_clock::now();
      try {
        it.record = precompile(it.spec);
        it.result = it.record.source == CubinSource::compiled ? "compiled" : "hit";
        if (!it.record.on_disk) {
          it.result = "failed";
          it.error = "compiled, but the cache entry could not be written";
        }
      } catch (const KernelNotPrecompiled&) {
        it.result = "missing";
        it.error = "not in the cache";
      } catch (const std::exception& e) {
        it.result = "failed";
        it.error = e.what();
      }
      it.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      progress.finished(it.name, it.result, it.wall_ms, it.error);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < std::min<int>(jobs, int(order.size())); ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
}

namespace {
// A new file of a random name beside `path` (rename is atomic within a directory): O_EXCL never
// opens a file or link someone else put there, as a predictable name would. -1 with errno set.
int open_temp_beside(const std::string& path, std::string& temp) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  for (int attempt = 0;; ++attempt) {
    const std::string name = fmt::format("{}.tmp.{:016x}", path, rng());
    const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) {
      temp = name;
      return fd;
    }
    if (errno != EEXIST || attempt == 100) return -1;
  }
}
}  // namespace

void check_writable(const std::string& path, const std::string& option) {
  std::string temp;
  const int fd = open_temp_beside(path, temp);
  if (fd < 0)
    throw InvalidArgument(fmt::format("{} {}: cannot write the file ({})", option, path, std::strerror(errno)));
  ::close(fd);
  ::unlink(temp.c_str());
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw InvalidArgument(fmt::format("{} {}: it is a directory; expected a file name", option, path));
}

void write_atomically(const std::string& path, const std::string& text, const std::string& option) {
  std::string temp;
  int fd = -1;
  auto fail = [&](const std::string& why) {
    if (fd >= 0) ::close(fd);
    if (!temp.empty()) ::unlink(temp.c_str());
    throw InvalidArgument(fmt::format("{} {}: cannot write the file ({}); nothing was written", option, path, why));
  };
  fd = open_temp_beside(path, temp);
  if (fd < 0) fail(std::strerror(errno));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(n < 0 ? std::strerror(errno) : "short write");
    done += std::size_t(n);
  }
  if (::fsync(fd) != 0) fail(std::strerror(errno));
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) fail(std::strerror(errno));
  if (::rename(temp.c_str(), path.c_str()) != 0) fail(std::strerror(errno));
  temp.clear();  // renamed: nothing to remove from here on
  // Make the rename itself durable (best effort, as for cache entries: the file is in place).
  const std::string parent = std::filesystem::path(path).parent_path().string();
  if (const int dir = ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

}  // namespace nsajit::tools
