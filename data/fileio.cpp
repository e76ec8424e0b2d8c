// fileio.cpp — see fileio.h.
#include "data/fileio.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tensor/errors.h"

namespace posgrad {

namespace fs = std::filesystem;

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // some filesystems refuse directory fds
  ::fsync(fd);
  ::close(fd);
}

void write_file_atomic(const std::string& path, const std::function<void(const ByteSink&)>& produce) {
  static std::atomic<uint64_t> counter{0};
  const std::string dir = fs::path(path).parent_path().string();
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError("cannot create '" + tmp + "': " + std::strerror(errno));
  auto fail = [&](const std::string& what) {
    const int e = errno;
    if (fd >= 0) ::close(fd);
    fd = -1;
    ::unlink(tmp.c_str());
    throw IoError("cannot " + what + " '" + tmp + "': " + std::strerror(e));
  };
  try {
    produce([&](const void* src, size_t n) {
      const char* c = static_cast<const char*>(src);
      while (n > 0) {
        ssize_t w = ::write(fd, c, n);
        if (w < 0) {
          if (errno == EINTR) continue;
          fail("write");
        }
        c += w;
        n -= static_cast<size_t>(w);
      }
    });
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::fsync(fd) != 0) fail("flush");
  const int closing = fd;
  fd = -1;
  if (::close(closing) != 0) fail("close");
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw IoError("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(e));
  }
  fsync_dir(dir);
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, [&](const ByteSink& sink) { sink(bytes.data(), bytes.size()); });
}

std::string read_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below like a device.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw IoError("cannot read '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError("'" + path + "' is not a regular file (a directory, device, FIFO or socket)");
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      throw IoError("error while reading '" + path + "'" +
                    (n < 0 ? std::string(": ") + std::strerror(e) : " (it shrank)"));
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  return out;
}

uint64_t fnv1a64(std::string_view bytes) {
  // FNV-1a, 64-bit offset basis and prime (Fowler, Noll, Vo; IETF draft-eastlake-fnv).
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace posgrad
