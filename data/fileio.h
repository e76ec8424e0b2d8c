// fileio.h — the file primitives every writer of the run directory and the data home relies on:
// atomic writes (temp file beside the target, fsync, rename, fsync of the directory) so that no
// reader ever sees a half-written file, whole-file reads with errors that name the path, and a
// 64-bit FNV-1a checksum (a change detector for caches and checkpoints, not a MAC).
// It sits in data/, the lowest layer that does I/O; train/ uses it too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace posgrad {

// Appends n bytes to the file being written.
using ByteSink = std::function<void(const void* data, size_t n)>;

// Creates `path` atomically from what `produce` writes into the sink (streamed: no whole-file
// buffer). On any failure — including an exception from `produce` — the temp file is removed,
// the target is untouched, and an IoError names the file (exceptions of `produce` pass through).
// The directory must exist.
void write_file_atomic(const std::string& path, const std::function<void(const ByteSink&)>& produce);
void write_file_atomic(const std::string& path, std::string_view bytes);
std::string read_file(const std::string& path);  // IoError naming the path
void fsync_dir(const std::string& dir);          // best effort
uint64_t fnv1a64(std::string_view bytes);
std::string hex64(uint64_t v);

}  // namespace posgrad
