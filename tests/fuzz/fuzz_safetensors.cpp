// fuzz_safetensors.cpp — fuzzes the safetensors reader (train/safetensors.h). The input is a whole
// file. Checked on every input:
//   - parse_safetensors (bytes in memory) and load_safetensors (the same bytes as a file, read
//     with pread) agree: both succeed with identical tensors and metadata, or both throw the same
//     posgrad::Error type;
//   - what loads saves again (save_safetensors) and reloads identically — unless save refuses a
//     name with its own ValueError (save is stricter than load: it refuses empty names).
// Not checked: that the values are meaningful (any bytes are valid floats).
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <typeinfo>

#include "tensor/errors.h"
#include "tests/fuzz/fuzz_targets.h"
#include "train/safetensors.h"

namespace posgrad::fuzz {

namespace {

// dtype, shape and bytes of each tensor, by name.
using Contents = std::map<std::string, std::pair<std::string, std::string>>;

Contents contents(const SafetensorsFile& f, const std::string& who) {
  Contents c;
  for (const auto& [name, t] : f.tensors) {
    std::string shape = std::to_string(static_cast<int>(t.dtype())) + ":";
    for (int64_t d : t.shape()) shape += std::to_string(d) + ",";
    const size_t n = static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
    std::string bytes(n, '\0');
    if (n) std::memcpy(bytes.data(), t.raw_data(), n);
    require(c.emplace(name, std::make_pair(shape, bytes)).second, who + " returned tensor '" + name + "' twice");
  }
  return c;
}

void write_bytes(const std::string& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  require(static_cast<bool>(f), "fuzz harness: cannot write " + path);
}

struct Outcome {
  std::optional<SafetensorsFile> file;
  const std::type_info* error = nullptr;
  std::string message;
};

template <typename F>
Outcome attempt(F&& read) {
  Outcome o;
  try {
    o.file = read();
  } catch (const Error& e) {
    o.error = &typeid(e);
    o.message = e.what();
  }
  return o;
}

}  // namespace

int fuzz_safetensors(const uint8_t* data, size_t size) {
  const std::string_view bytes = as_text(data, size);
  const std::string path = scratch_dir() + "/input.safetensors";
  write_bytes(path, bytes);

  const Outcome mem = attempt([&] { return parse_safetensors(bytes, path); });
  const Outcome file = attempt([&] { return load_safetensors(path); });
  require(mem.file.has_value() == file.file.has_value(),
          "parse_safetensors and load_safetensors disagree: " +
              (mem.file ? "memory ok, file: " + file.message : "file ok, memory: " + mem.message));
  if (!mem.file) {
    require(*mem.error == *file.error,
            "parse_safetensors and load_safetensors throw different types: " + mem.message + " | " + file.message);
    return 0;
  }
  const Contents c = contents(*mem.file, "parse_safetensors");
  require(c == contents(*file.file, "load_safetensors"),
          "parse_safetensors and load_safetensors read different tensors");
  require(mem.file->metadata == file.file->metadata, "parse_safetensors and load_safetensors read different metadata");

  // Round trip through the writer.
  const std::string again = scratch_dir() + "/roundtrip.safetensors";
  try {
    save_safetensors(again, mem.file->tensors, mem.file->metadata);
  } catch (const ValueError&) {
    return 0;  // a name the writer refuses (it names the tensor)
  }
  try {
    const SafetensorsFile back = load_safetensors(again);
    require(contents(back, "reload") == c, "a saved file reloads with different tensors");
    require(back.metadata == mem.file->metadata, "a saved file reloads with different metadata");
  } catch (const Error& e) {
    throw Finding(std::string("a file written by save_safetensors does not reload: ") + e.what());
  }
  return 0;
}

}  // namespace posgrad::fuzz
