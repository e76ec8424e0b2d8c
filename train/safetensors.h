// safetensors.h — reading and writing the safetensors format (https://github.com/huggingface/safetensors,
// README "Format"), so checkpoints open in PyTorch with `safetensors.torch.load_file`:
//   8 bytes   N, little-endian u64: the header length
//   N bytes   JSON: {"__metadata__": {str: str}, "<name>": {"dtype": "F32"|"F64"|"I64"|"BOOL",
//             "shape": [...], "data_offsets": [begin, end]}, ...}, padded with spaces so that the data
//             section starts at a multiple of 8
//   rest      the tensors' raw little-endian bytes; offsets are relative to the data section.
// Like the reference writer, tensors are laid out 8-byte dtypes first, then 4-byte, then BOOL (stable
// within a group), so every tensor is naturally aligned; load returns them in file order (for a
// model that is all F32 — the usual case — that is exactly the order they were saved in).
//
// Loading validates everything the reference implementation does (header length within the file,
// valid JSON object, known dtype, shape * dtype size == end - begin, tensors contiguous from 0
// without gaps or overlaps, data section fully covered), plus what a posgrad tensor needs (at most
// 8 dims, strides within int64 even for an empty tensor) and a header nested at most 3 levels
// deep, and throws IoError naming the file and the problem. tests/fuzz/fuzz_safetensors.cpp
// fuzzes both entry points. Deliberately not supported: F16/BF16/I32/U8... (posgrad has no such dtypes), mmap-ed
// lazy loading, or reading straight to a GPU (load to the CPU, then .to(device)).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace posgrad {

struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  // CPU, contiguous, in file order
  std::map<std::string, std::string> metadata;          // "__metadata__"
};

// Writes atomically (temp file in the same directory, fsync, rename, fsync of the directory): on any
// error the target is untouched and no temp file is left. Tensors may live on any device and have
// any layout (they are copied to contiguous CPU memory). ValueError on an empty, duplicate or
// reserved ("__metadata__") name or a name/metadata string that is not valid UTF-8; IoError naming
// the path when writing fails.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads and validates a safetensors file; IoError naming the path and the problem.
SafetensorsFile load_safetensors(const std::string& path);
// The same reader over bytes already in memory (a file read elsewhere, a network buffer, a fuzzer's
// input); `name` stands for the path in error messages.
SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& name = "<memory>");

}  // namespace posgrad
