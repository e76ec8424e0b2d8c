// safetensors.cpp — see safetensors.h. Validation follows the reference implementation's
// `SafeTensors::validate` (safetensors/src/tensor.rs): sort by offsets, each tensor must start where
// the previous one ended, its byte length must equal numel * dtype size, and the last one must end
// at the end of the file.
#include "train/safetensors.h"

#include "data/fileio.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "tensor/errors.h"
#include "tensor/kernels/kernels.h"

namespace posgrad {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian and copied as is: big-endian hosts are unsupported");

namespace fs = std::filesystem;

namespace {

// The reference reader refuses headers above 100 MB (MAX_HEADER_SIZE); so do we.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// A valid header nests three levels: the object, a tensor entry (or "__metadata__"), its arrays.
// Deeper input is refused while it is parsed, so a hostile header never builds (nor recurses
// into, when printed) a deep value.
constexpr int kMaxHeaderDepth = 3;

// A JSON value for an error message: at most 64 characters of its dump.
std::string shown(const nlohmann::json& v) {
  const std::string s = v.dump();
  return s.size() > 64 ? s.substr(0, 61) + "..." : s;
}

const char* st_dtype(DType t) {
  switch (t) {
    case DType::Float32: return "F32";
    case DType::Float64: return "F64";
    case DType::Int64: return "I64";
    case DType::Bool: return "BOOL";
  }
  return "?";
}

bool parse_st_dtype(const std::string& s, DType& out) {
  if (s == "F32")
    out = DType::Float32;
  else if (s == "F64")
    out = DType::Float64;
  else if (s == "I64")
    out = DType::Int64;
  else if (s == "BOOL")
    out = DType::Bool;
  else
    return false;
  return true;
}

// An open file descriptor that closes itself.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

// ---- writing ----------------------------------------------------------------------------------------

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // Validate names and build the layout before touching the filesystem.
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    POSGRAD_CHECK(!name.empty(), ValueError, "save_safetensors '", path, "': empty tensor name");
    POSGRAD_CHECK(name != "__metadata__", ValueError, "save_safetensors '", path,
                  "': \"__metadata__\" is reserved and cannot name a tensor");
    POSGRAD_CHECK(seen.insert(name).second, ValueError, "save_safetensors '", path, "': duplicate tensor name '", name,
                  "'");
    POSGRAD_CHECK(t.defined(), ValueError, "save_safetensors '", path, "': tensor '", name, "' is undefined");
  }
  // Stable order by descending element size: every tensor then starts at a multiple of its size.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return dtype_size(tensors[a].second.dtype()) > dtype_size(tensors[b].second.dtype());
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json md = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) md[k] = v;
    header["__metadata__"] = md;
  }
  uint64_t offset = 0;
  for (size_t i : order) {
    const Tensor& t = tensors[i].second;
    const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype());
    header[tensors[i].first] = {
        {"dtype", st_dtype(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string hdr;
  try {
    hdr = header.dump();
  } catch (const nlohmann::json::exception& e) {  // type_error 316: a string that is not valid UTF-8
    throw ValueError("save_safetensors '" + path + "': a tensor name or metadata string is not valid UTF-8 (" +
                     e.what() + ")");
  }
  hdr.append((8 - hdr.size() % 8) % 8, ' ');  // data section starts 8-aligned (reference writer does the same)

  // Streamed tensor by tensor: a GPU model needs only one extra tensor of host memory at a time.
  write_file_atomic(path, [&](const ByteSink& sink) {
    const uint64_t n = hdr.size();
    sink(&n, sizeof n);
    sink(hdr.data(), hdr.size());
    for (size_t i : order) {
      Tensor c = tensors[i].second.detach().to(Device::cpu()).contiguous();
      sink(c.raw_data(), static_cast<size_t>(c.numel()) * dtype_size(c.dtype()));
    }
  });
}

// ---- reading ----------------------------------------------------------------------------------------

namespace {

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

[[noreturn]] void corrupt(const std::string& path, const std::string& what) {
  throw IoError("safetensors file '" + path + "': " + what);
}

Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& v) {
  const std::string where = "tensor '" + name + "'";
  if (!v.is_object()) corrupt(path, where + ": entry is not a JSON object");
  for (const auto& [k, _] : v.items())
    if (k != "dtype" && k != "shape" && k != "data_offsets") corrupt(path, where + ": unknown field '" + k + "'");
  if (!v.contains("dtype") || !v["dtype"].is_string()) corrupt(path, where + ": missing or non-string \"dtype\"");
  if (!v.contains("shape") || !v["shape"].is_array()) corrupt(path, where + ": missing or non-array \"shape\"");
  if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
    corrupt(path, where + ": \"data_offsets\" must be an array [begin, end]");
  Entry e;
  e.name = name;
  const std::string dt = v["dtype"].get<std::string>();
  if (!parse_st_dtype(dt, e.dtype))
    corrupt(path, where + ": unsupported dtype '" + dt + "' (posgrad reads F32, F64, I64, BOOL)");
  if (v["shape"].size() > static_cast<size_t>(kernels::kMaxDims))
    corrupt(path, where + ": shape " + shown(v["shape"]) + " has " + std::to_string(v["shape"].size()) +
                      " dims; posgrad tensors have at most " + std::to_string(kernels::kMaxDims));
  uint64_t numel = 1;
  uint64_t span = 1;  // product of the extents with zeros counted as 1: what the strides multiply
  for (const auto& d : v["shape"]) {
    if (!d.is_number_unsigned()) corrupt(path, where + ": shape entry " + shown(d) + " is not a non-negative integer");
    const uint64_t n = d.get<uint64_t>();
    if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (n != 0 && numel > std::numeric_limits<uint64_t>::max() / n))
      corrupt(path, where + ": shape " + shown(v["shape"]) + " overflows");
    numel *= n;
    if (span > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / std::max<uint64_t>(n, 1))
      corrupt(path, where + ": shape " + shown(v["shape"]) + " overflows (its strides exceed int64)");
    span *= std::max<uint64_t>(n, 1);
    e.shape.push_back(static_cast<int64_t>(n));
  }
  const auto& off = v["data_offsets"];
  if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    corrupt(path, where + ": data_offsets " + shown(off) + " are not non-negative integers");
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  if (e.end < e.begin) corrupt(path, where + ": data_offsets " + shown(off) + " end before they begin");
  if (numel > std::numeric_limits<uint64_t>::max() / dtype_size(e.dtype) ||
      numel * dtype_size(e.dtype) != e.end - e.begin)
    corrupt(path, where + ": data_offsets " + shown(off) + " span " + std::to_string(e.end - e.begin) +
                      " bytes, but shape " + shown(v["shape"]) + " of " + dt + " needs " +
                      std::to_string(numel * dtype_size(e.dtype)));
  return e;
}

// Reads n bytes at offset `at` of the source into dst; IoError naming the file when it cannot.
using ReadAt = std::function<void(void* dst, uint64_t n, uint64_t at, const std::string& what)>;

void read_exact(int fd, const std::string& path, void* dst, uint64_t n, uint64_t at, const std::string& what) {
  char* c = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd, c, n, static_cast<off_t>(at));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw IoError("safetensors file '" + path + "': cannot read " + what + ": " + std::strerror(errno));
    }
    if (r == 0) corrupt(path, "truncated while reading " + what);
    c += r;
    n -= static_cast<uint64_t>(r);
    at += static_cast<uint64_t>(r);
  }
}

// The reader proper, over any source of `file_size` bytes.
SafetensorsFile read_safetensors(const std::string& path, uint64_t file_size, const ReadAt& read_at) {
  if (file_size < 8)
    corrupt(path, "truncated: " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");

  uint64_t n = 0;
  read_at(&n, 8, 0, "the header length");
  if (n > file_size - 8)
    corrupt(path, "header length " + std::to_string(n) + " exceeds the " + std::to_string(file_size - 8) +
                      " bytes that follow it (truncated or corrupt file)");
  if (n > kMaxHeaderBytes) corrupt(path, "header length " + std::to_string(n) + " is above the 100 MB limit");
  if (n < 2) corrupt(path, "header length " + std::to_string(n) + " is too small for a JSON object");
  std::string hdr(n, '\0');
  read_at(hdr.data(), n, 8, "the header");

  nlohmann::json j;
  const nlohmann::json::parser_callback_t limit = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    if ((event == nlohmann::json::parse_event_t::object_start || event == nlohmann::json::parse_event_t::array_start) &&
        depth >= kMaxHeaderDepth) {
      throw IoError("safetensors file '" + path + "': header JSON is nested deeper than " +
                    std::to_string(kMaxHeaderDepth) + " levels");
    }
    return true;
  };
  try {
    j = nlohmann::json::parse(hdr, limit);
  } catch (const nlohmann::json::exception& e) {
    corrupt(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) corrupt(path, "header is JSON but not an object");

  SafetensorsFile out;
  std::vector<Entry> entries;
  for (const auto& [key, v] : j.items()) {
    if (key == "__metadata__") {
      if (v.is_null()) continue;
      if (!v.is_object()) corrupt(path, "\"__metadata__\" is not an object");
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) corrupt(path, "metadata value for '" + mk + "' is not a string");
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, key, v));
  }

  // Contiguous from 0, no gaps or overlaps, covering the whole data section.
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  const uint64_t data_bytes = file_size - 8 - n;
  uint64_t expect = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.begin < expect)
      corrupt(path, "tensor '" + e.name + "' data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                        "] overlap tensor '" + entries[i - 1].name + "' (which ends at " + std::to_string(expect) +
                        ")");
    if (e.begin > expect)
      corrupt(path, "tensor '" + e.name + "' data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                        "] leave a gap: the previous tensor ends at " + std::to_string(expect));
    if (e.end > data_bytes)
      corrupt(path, "tensor '" + e.name + "' data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                        "] run past the end of the " + std::to_string(data_bytes) +
                        "-byte data section (truncated file?)");
    expect = e.end;
  }
  if (expect != data_bytes)
    corrupt(path, "the data section holds " + std::to_string(data_bytes) + " bytes but the tensors cover " +
                      std::to_string(expect) + " (trailing bytes or missing tensors)");

  out.tensors.reserve(entries.size());
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (e.end > e.begin) read_at(t.raw_data(), e.end - e.begin, 8 + n + e.begin, "tensor '" + e.name + "'");
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block the open
  if (f.fd < 0) throw IoError("cannot open safetensors file '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw IoError("cannot stat safetensors file '" + path + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) corrupt(path, "not a regular file");
  return read_safetensors(
      path, static_cast<uint64_t>(st.st_size),
      [&](void* dst, uint64_t n, uint64_t at, const std::string& what) { read_exact(f.fd, path, dst, n, at, what); });
}

SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& name) {
  return read_safetensors(name, bytes.size(), [&](void* dst, uint64_t n, uint64_t at, const std::string& what) {
    // The reader checks every range against the size first; this is the same guarantee pread gives.
    if (at > bytes.size() || n > bytes.size() - at) corrupt(name, "truncated while reading " + what);
    std::memcpy(dst, bytes.data() + at, n);
  });
}

}  // namespace posgrad
