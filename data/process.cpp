// process.cpp — see process.h.
#include "data/process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>

#include "tensor/errors.h"

extern char** environ;

namespace posgrad {

namespace {

// Closes a descriptor on every path out of a scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv, const std::string& cwd, size_t max_output) {
  if (argv.empty()) throw std::invalid_argument("run_process: empty argument vector");
  ProcessResult r;
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return r;
  Fd rd{p[0]}, wr{p[1]};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, wr.fd, 1);  // dup2 clears close-on-exec on the copies
  posix_spawn_file_actions_adddup2(&fa, wr.fd, 2);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int err = ::posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  wr.reset();  // the child holds the write end now; EOF comes when it exits
  if (err != 0) {
    r.output = std::string("cannot start ") + argv[0] + ": " + std::strerror(err);
    return r;
  }
  r.started = true;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(rd.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    const size_t keep = std::min(static_cast<size_t>(n), max_output - std::min(max_output, r.output.size()));
    r.output.append(buf, keep);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return r;
  r.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
  return r;
}

namespace {

// The holds of this process, by canonical directory: a second DirectoryLock on a directory this
// process already holds shares that hold (flock would refuse a second open file description).
struct Held {
  int fd = -1;
  int count = 0;
  pid_t pid = -1;  // a child made by fork() inherits the map, not the hold's ownership
};
std::mutex g_held_mutex;
std::map<std::string, Held>& held() {
  static std::map<std::string, Held> m;
  return m;
}

// The key of `dir` in held(): its canonical path.
std::string canonical_key(const std::string& dir) {
  std::error_code ec;
  std::string key = std::filesystem::weakly_canonical(dir, ec).string();
  return ec ? std::filesystem::absolute(dir).lexically_normal().string() : key;
}

// flock(fd, op | LOCK_NB), retried on EINTR; 0 or the errno.
int try_flock(int fd, int op) {
  while (::flock(fd, op | LOCK_NB) != 0)
    if (errno != EINTR) return errno;
  return 0;
}

// The refusal of a directory another process holds: names the holder's pid, read from the lock file
// `fd` (which it closes).
[[noreturn]] void in_use(const std::string& dir, int fd) {
  std::string holder;
  char buf[32] = {0};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i) holder += buf[i];
  ::close(fd);
  throw IoError("'" + dir + "' is in use by " +
                (holder.empty() ? std::string("another process") : "process " + holder) +
                " (a posgrad train, compare or report writing there); wait for it to end, or use another directory");
}

}  // namespace

DirectoryLock::DirectoryLock(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError("cannot create the directory '" + dir + "': " + ec.message());
  key_ = canonical_key(dir);
  path_ = (std::filesystem::path(dir) / ".posgrad.lock").string();
  std::lock_guard<std::mutex> guard(g_held_mutex);
  if (auto it = held().find(key_); it != held().end() && it->second.pid == ::getpid()) {
    ++it->second.count;
    return;
  }
  // O_NOFOLLOW: a symbolic link planted as the lock file is refused, never written through.
  const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) throw IoError("cannot create the lock file '" + path_ + "': " + std::strerror(errno));
  if (const int e = try_flock(fd, LOCK_EX); e == EWOULDBLOCK) {
    in_use(dir, fd);
  } else if (e != 0) {
    ::close(fd);
    throw IoError("cannot lock '" + path_ + "': " + std::strerror(e));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    // The hold is what matters; a pid that could not be written only makes the other's message vaguer.
  }
  held()[key_] = Held{fd, 1, ::getpid()};
}

void DirectoryLock::check_available(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  while (!p.empty() && !fs::exists(p, ec) && p != p.parent_path()) p = p.parent_path();
  if (::access(p.c_str(), W_OK | X_OK) != 0)
    throw IoError("cannot write in '" + p.string() + "'" + (p.string() == dir ? "" : " (to create '" + dir + "')") +
                  ": " + std::strerror(errno));
  const std::string lock = (fs::path(dir) / ".posgrad.lock").string();
  {
    std::lock_guard<std::mutex> guard(g_held_mutex);
    if (auto it = held().find(canonical_key(dir)); it != held().end() && it->second.pid == ::getpid()) return;
  }
  std::error_code sec;
  const auto st = fs::symlink_status(lock, sec);
  if (!sec && fs::exists(st) && !fs::is_regular_file(st))  // what the constructor's open would refuse
    throw IoError("cannot create the lock file '" + lock + "': it exists and is not a regular file");
  const int fd = ::open(lock.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return;  // no lock file: nobody holds it
  if (try_flock(fd, LOCK_SH) != 0) in_use(dir, fd);
  ::close(fd);  // releases the shared probe
}

DirectoryLock::~DirectoryLock() {
  std::lock_guard<std::mutex> guard(g_held_mutex);
  auto it = held().find(key_);
  if (it == held().end() || it->second.pid != ::getpid() || --it->second.count > 0) return;
  ::close(it->second.fd);  // closing the last descriptor of the open file releases the flock
  held().erase(it);
}

}  // namespace posgrad
