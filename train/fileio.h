// fileio.h — small file utilities the run directory relies on: atomic writes (temp file in the
// same directory, fsync, rename, fsync of the directory) so that no reader ever sees a
// half-written file, whole-file reads with errors that name the path, and a 64-bit FNV-1a
// checksum for detecting corrupt checkpoints.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace posgrad::train {

// Writes `bytes` to `path` atomically. IoError naming the path on failure (the target is untouched).
void write_file_atomic(const std::string& path, std::string_view bytes);
std::string read_file(const std::string& path);  // IoError naming the path
void fsync_dir(const std::string& dir);
uint64_t fnv1a64(std::string_view bytes);
std::string hex64(uint64_t v);

}  // namespace posgrad::train
