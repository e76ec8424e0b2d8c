// process.h — starting an external program (gnuplot, git) and holding a run directory for one
// process. Programs are started from an argument vector with posix_spawnp, never through a shell:
// no byte of a path or a name can become a command, whatever it contains (quotes, `$(...)`,
// backticks, spaces, newlines). A run directory is held with flock(2) on a lock file inside it, so
// the kernel releases it when the holder dies, however it dies.
// It sits in data/, beside fileio.h, the lowest layer that does I/O.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace posgrad {

struct ProcessResult {
  bool started = false;  // false: the program could not be started (not installed, not executable)
  int exit_status = -1;  // its exit status; 128 + the signal's number when a signal ended it
  std::string output;    // what it wrote on stdout and stderr, interleaved, at most `max_output` bytes
  bool ok() const { return started && exit_status == 0; }
};

// Runs argv[0] (looked up in PATH) with the arguments argv[1..], in the working directory `cwd`
// (empty: this process's), stdin from /dev/null, and waits for it. Captures at most `max_output`
// bytes of its output (the rest is read and dropped, so the program never blocks on a full pipe).
// Never throws for a program that cannot be started or fails: the result says so. Throws
// std::invalid_argument for an empty argv. Signals that interrupt the wait (EINTR) are retried: the
// caller polls train::interrupt_requested() afterwards.
ProcessResult run_process(const std::vector<std::string>& argv, const std::string& cwd = "",
                          size_t max_output = 64 * 1024);

// An exclusive hold on a run directory: flock(LOCK_EX | LOCK_NB) on `<dir>/.posgrad.lock`, whose
// content is the holder's pid (for the message of the one refused). Released by the destructor or
// by the kernel when the process ends; the lock file itself stays (it is empty of meaning once no
// process holds it). The file descriptor is close-on-exec, so a program started meanwhile (gnuplot)
// does not keep the hold after this process ends. Holds are per process: a second DirectoryLock on a
// directory this process already holds shares the hold (counted; released with the last one).
class DirectoryLock {
 public:
  // Creates `dir` if needed and takes the hold. Throws IoError when another process holds it — naming
  // the directory and the holder's pid ("... is in use by process 1234 (posgrad train or compare);
  // wait for it to end, or use another directory") — or when the lock file cannot be created.
  explicit DirectoryLock(const std::string& dir);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  const std::string& path() const { return path_; }

  // What the constructor would refuse, without creating or holding anything (for --dry-run): the
  // directory (or, where it does not exist yet, its nearest existing parent) must be writable, and no
  // other process may hold it. The same IoError as the constructor's.
  static void check_available(const std::string& dir);

 private:
  std::string key_;   // the canonical directory
  std::string path_;  // the lock file
};

}  // namespace posgrad
