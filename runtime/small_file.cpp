// small_file.cpp — bounded reads of small input files (see small_file.hpp).
#include "runtime/small_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "nsajit/errors.hpp"

namespace nsajit {
namespace {

[[noreturn]] void cannot_read(const std::string& label, const std::string& why) {
  throw InvalidArgument(fmt::format("{}: cannot read the file: {}", label, why));
}

}  // namespace

const char* file_type_name(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a file of unknown type";
}

std::string read_small_file(const std::string& path, const std::string& label, std::uint64_t max_bytes) {
  const std::string expected =
      max_bytes % (1 << 20) == 0 ? fmt::format("a regular file of at most {} MiB", max_bytes >> 20)
                                 : fmt::format("a regular file of at most {} bytes", max_bytes);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) cannot_read(label, std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) cannot_read(label, fmt::format("fstat failed: {}", std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    cannot_read(label, fmt::format("it is {}; expected {}", file_type_name(st.st_mode), expected));
  if (std::uint64_t(st.st_size) > max_bytes)
    cannot_read(label, fmt::format("it is {} bytes; expected {}", std::uint64_t(st.st_size), expected));
  std::string text(std::size_t(st.st_size), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) cannot_read(label, std::strerror(errno));
    if (n == 0) cannot_read(label, fmt::format("it shrank from {} to {} bytes while being read", text.size(), done));
    done += std::size_t(n);
  }
  return text;
}

}  // namespace nsajit
