// test_safetensors.cpp — safetensors round trips (F32/F64/I64/BOOL, 0-d and empty tensors,
// metadata), atomic writes, and one IoError per kind of corruption. Where python3 exists, a tiny
// stdlib-only reader written here cross-checks the bytes; where the `safetensors` Python package
// is importable, its own loader (numpy, and torch when present) must read our files, and we must
// read a file its writer made.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "support/test_util.h"
#include "tensor/errors.h"
#include "tensor/tensor.h"
#include "train/safetensors.h"

namespace fs = std::filesystem;
using namespace posgrad;
using posgrad::test::TempDir;
using Named = std::vector<std::pair<std::string, Tensor>>;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A safetensors file from a header string and a data section, with the header length as given
// (default: the true length).
std::string make_file(const std::string& header, const std::string& data, int64_t claimed_len = -1) {
  uint64_t n = claimed_len >= 0 ? static_cast<uint64_t>(claimed_len) : header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

Named sample_tensors() {
  Tensor f = Tensor::from_vector(std::vector<float>{1.5f, -2.25f, 3.0f, 0.0f, 1e-20f, -7.0f}, {2, 3});
  Tensor d = Tensor::from_vector(std::vector<double>{3.141592653589793, -1e300, 2.5}, {3}, DType::Float64);
  Tensor i = Tensor::from_ints({-9000000000LL, 0, 1, 42, 7, -1, 5, 6}, {2, 2, 2});
  Tensor s = Tensor::scalar(0.125, DType::Float32);  // 0-d
  Tensor e = Tensor::empty({0, 4}, DType::Float32);  // no elements
  Tensor b = Tensor::from_vector(std::vector<double>{1, 0, 1}, {3}, DType::Bool);
  Tensor s64 = Tensor::scalar(-0.5, DType::Float64);  // 0-d F64
  return {{"w.weight", f}, {"double", d}, {"ints", i}, {"scalar", s}, {"empty", e}, {"mask", b}, {"s64", s64}};
}

void expect_same(const Tensor& a, const Tensor& b, const std::string& name) {
  EXPECT_EQ(a.dtype(), b.dtype()) << name;
  EXPECT_EQ(a.shape(), b.shape()) << name;
  if (a.dtype() == DType::Int64)
    EXPECT_EQ(a.to_int_vector(), b.to_int_vector()) << name;
  else
    EXPECT_EQ(a.to_vector(), b.to_vector()) << name;
}

const Tensor* find(const Named& v, const std::string& name) {
  for (const auto& [n, t] : v)
    if (n == name) return &t;
  return nullptr;
}

template <typename F>
std::string io_error_of(F&& f) {
  try {
    f();
  } catch (const IoError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected IoError, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected IoError, nothing thrown";
  return "";
}

bool run_ok(const std::string& cmd) { return std::system(cmd.c_str()) == 0; }

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

}  // namespace

// ---- round trips -----------------------------------------------------------------------------------

TEST(Safetensors, RoundTripAllDtypesAndMetadata) {
  TempDir d;
  const std::string path = d.file("m.safetensors");
  Named in = sample_tensors();
  save_safetensors(path, in, {{"format", "pt"}, {"step", "12"}});
  SafetensorsFile out = load_safetensors(path);
  ASSERT_EQ(out.tensors.size(), in.size());
  for (const auto& [name, t] : in) {
    const Tensor* got = find(out.tensors, name);
    ASSERT_NE(got, nullptr) << name;
    expect_same(t, *got, name);
  }
  EXPECT_EQ(out.metadata.at("format"), "pt");
  EXPECT_EQ(out.metadata.at("step"), "12");
  EXPECT_EQ(find(out.tensors, "scalar")->dim(), 0);
  EXPECT_EQ(find(out.tensors, "scalar")->item(), 0.125);
  // File order: 8-byte dtypes first (caller order within), then 4-byte, then BOOL.
  std::vector<std::string> order;
  for (const auto& [n, t] : out.tensors) order.push_back(n);
  EXPECT_EQ(order, (std::vector<std::string>{"double", "ints", "s64", "w.weight", "scalar", "empty", "mask"}));
  // Only the final file is left.
  EXPECT_EQ(d.entries(), std::vector<std::string>{"m.safetensors"});
}

TEST(Safetensors, HeaderLayoutMatchesSpec) {
  TempDir d;
  const std::string path = d.file("m.safetensors");
  save_safetensors(path, sample_tensors(), {{"k", "v"}});
  const std::string bytes = read_bytes(path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);  // data section starts 8-aligned
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  auto j = nlohmann::json::parse(header);
  EXPECT_EQ(j["__metadata__"]["k"], "v");
  EXPECT_EQ(j["w.weight"]["dtype"], "F32");
  EXPECT_EQ(j["w.weight"]["shape"], nlohmann::json({2, 3}));
  EXPECT_EQ(j["double"]["dtype"], "F64");
  EXPECT_EQ(j["ints"]["dtype"], "I64");
  EXPECT_EQ(j["mask"]["dtype"], "BOOL");
  EXPECT_EQ(j["scalar"]["shape"], nlohmann::json::array());
  EXPECT_EQ(j["double"]["data_offsets"], nlohmann::json({0, 24}));
  uint64_t data_bytes = 0;
  for (auto& [k, v] : j.items()) {
    if (k == "__metadata__") continue;
    uint64_t b = v["data_offsets"][0], e = v["data_offsets"][1];
    const uint64_t align = v["dtype"] == "BOOL" ? 1 : v["dtype"] == "F32" ? 4 : 8;
    EXPECT_EQ(b % align, 0u) << k;
    data_bytes = std::max(data_bytes, e);
  }
  EXPECT_EQ(bytes.size(), 8 + n + data_bytes);
  // Raw little-endian data of "double" at its offset.
  double first;
  std::memcpy(&first, bytes.data() + 8 + n, 8);
  EXPECT_EQ(first, 3.141592653589793);
}

TEST(Safetensors, NonContiguousInputAndNoMetadata) {
  TempDir d;
  Tensor base = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor tr = base.t();  // (3, 2), not contiguous
  ASSERT_FALSE(tr.is_contiguous());
  save_safetensors(d.file("t.safetensors"), {{"t", tr}});
  SafetensorsFile out = load_safetensors(d.file("t.safetensors"));
  EXPECT_TRUE(out.metadata.empty());
  EXPECT_EQ(out.tensors.at(0).second.shape(), (Shape{3, 2}));
  EXPECT_EQ(out.tensors.at(0).second.to_vector(), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  const std::string bytes = read_bytes(d.file("t.safetensors"));
  EXPECT_EQ(bytes.find("__metadata__"), std::string::npos);

  save_safetensors(d.file("none.safetensors"), {});
  EXPECT_TRUE(load_safetensors(d.file("none.safetensors")).tensors.empty());
}

TEST(Safetensors, AtomicOverwriteAndBadNames) {
  TempDir d;
  const std::string path = d.file("m.safetensors");
  save_safetensors(path, {{"a", Tensor::ones({2})}});
  const std::string before = read_bytes(path);
  // Rejected before anything is written: the old file is untouched, no temp file appears.
  EXPECT_THROW(save_safetensors(path, {{"a", Tensor::ones({3})}, {"a", Tensor::ones({1})}}), ValueError);
  EXPECT_THROW(save_safetensors(path, {{"__metadata__", Tensor::ones({1})}}), ValueError);
  EXPECT_THROW(save_safetensors(path, {{"", Tensor::ones({1})}}), ValueError);
  EXPECT_THROW(save_safetensors(path, {{"bad\xff", Tensor::ones({1})}}), ValueError);
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(d.entries(), std::vector<std::string>{"m.safetensors"});
  // A successful save replaces it whole.
  save_safetensors(path, {{"b", Tensor::zeros({5})}});
  auto out = load_safetensors(path);
  ASSERT_EQ(out.tensors.size(), 1u);
  EXPECT_EQ(out.tensors[0].first, "b");
  // A directory that does not exist: IoError naming it, nothing created.
  std::string msg = io_error_of([&] {
    save_safetensors(d.file("no/such/dir/x.safetensors"), {{"a", Tensor::ones({1})}});
  });
  EXPECT_NE(msg.find("no/such/dir"), std::string::npos) << msg;
  EXPECT_EQ(d.entries(), std::vector<std::string>{"m.safetensors"});
}

// ---- corruption --------------------------------------------------------------------------------------

TEST(Safetensors, TruncatedFiles) {
  TempDir d;
  const std::string path = d.file("m.safetensors");
  save_safetensors(path, sample_tensors());
  const std::string good = read_bytes(path);

  write_bytes(path, good.substr(0, good.size() - 1));  // one data byte short
  std::string msg = io_error_of([&] { load_safetensors(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;

  write_bytes(path, good.substr(0, 20));  // inside the header
  msg = io_error_of([&] { load_safetensors(path); });
  EXPECT_NE(msg.find("exceeds"), std::string::npos) << msg;

  write_bytes(path, good.substr(0, 5));  // not even the length
  msg = io_error_of([&] { load_safetensors(path); });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;

  write_bytes(path, "");
  io_error_of([&] { load_safetensors(path); });

  msg = io_error_of([&] { load_safetensors(d.file("missing.safetensors")); });
  EXPECT_NE(msg.find("missing.safetensors"), std::string::npos) << msg;
}

TEST(Safetensors, FlippedHeaderLength) {
  TempDir d;
  const std::string path = d.file("m.safetensors");
  save_safetensors(path, sample_tensors());
  std::string bytes = read_bytes(path);
  // The most significant byte: a length far beyond the file.
  bytes[7] = static_cast<char>(0x40);
  write_bytes(path, bytes);
  std::string msg = io_error_of([&] { load_safetensors(path); });
  EXPECT_NE(msg.find("header length"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  // A length that is too short by 8: the JSON is cut off.
  bytes = read_bytes(path);
  bytes[7] = 0;
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  n -= 8;
  std::memcpy(bytes.data(), &n, 8);
  write_bytes(path, bytes);
  io_error_of([&] { load_safetensors(path); });
}

TEST(Safetensors, GarbageJson) {
  TempDir d;
  const std::string path = d.file("m.safetensors");
  save_safetensors(path, sample_tensors());
  std::string bytes = read_bytes(path);
  bytes[8] = 'x';  // the opening brace
  write_bytes(path, bytes);
  std::string msg = io_error_of([&] { load_safetensors(path); });
  EXPECT_NE(msg.find("JSON"), std::string::npos) << msg;

  write_bytes(path, make_file("[1, 2, 3]", ""));
  msg = io_error_of([&] { load_safetensors(path); });
  EXPECT_NE(msg.find("not an object"), std::string::npos) << msg;

  write_bytes(path, make_file(R"({"__metadata__": {"a": 1}})", ""));
  msg = io_error_of([&] { load_safetensors(path); });
  EXPECT_NE(msg.find("not a string"), std::string::npos) << msg;

  write_bytes(path, make_file(R"({"a": {"dtype": "F32", "shape": [1]}})", "abcd"));
  msg = io_error_of([&] { load_safetensors(path); });
  EXPECT_NE(msg.find("data_offsets"), std::string::npos) << msg;

  write_bytes(path, make_file(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", "abcd"));
  msg = io_error_of([&] { load_safetensors(path); });
  EXPECT_NE(msg.find("shape"), std::string::npos) << msg;
}

TEST(Safetensors, UnknownDtype) {
  TempDir d;
  const std::string path = d.file("m.safetensors");
  write_bytes(path, make_file(R"({"a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}})", "abcd"));
  std::string msg = io_error_of([&] { load_safetensors(path); });
  EXPECT_NE(msg.find("F16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'a'"), std::string::npos) << msg;
}

TEST(Safetensors, BadOffsets) {
  TempDir d;
  const std::string path = d.file("m.safetensors");
  const std::string eight(8, '\0'), sixteen(16, '\0');
  struct Case {
    std::string header, data, expect;
  };
  const std::vector<Case> cases = {
      // size does not match shape * dtype size
      {R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", eight, "needs 12"},
      // end before begin
      {R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", eight, "end before"},
      // past the end of the data
      {R"({"a": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}})", eight, "past the end"},
      // overlapping
      {R"({"a": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]},
           "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
       sixteen, "overlap"},
      // a gap between tensors
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
           "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
       sixteen, "gap"},
      // not starting at 0
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", eight, "gap"},
      // trailing bytes nobody owns
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", eight, "trailing"},
      // negative offsets
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", eight, "non-negative"},
      // wrong arity
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}})", eight, "[begin, end]"},
  };
  for (const auto& c : cases) {
    write_bytes(path, make_file(c.header, c.data));
    std::string msg = io_error_of([&] { load_safetensors(path); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "header " << c.header << "\nmessage: " << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
  }
  // A hand-written valid file with spaces after the JSON loads.
  write_bytes(path, make_file(R"({"a": {"dtype": "I64", "shape": [], "data_offsets": [0, 8]}}   )",
                              std::string("\x07\0\0\0\0\0\0\0", 8)));
  auto out = load_safetensors(path);
  EXPECT_EQ(out.tensors.at(0).second.to_int_vector(), std::vector<int64_t>{7});
}

// ---- cross-checks with Python ------------------------------------------------------------------------

// A stdlib-only reader (struct + json), independent of ours: prints {name: [dtype, shape, values]}.
static const char* kTinyReader = R"PY(
import json, struct, sys
path = sys.argv[1]
with open(path, "rb") as f:
    buf = f.read()
(n,) = struct.unpack("<Q", buf[:8])
assert (8 + n) % 8 == 0, "data section not 8-aligned"
header = json.loads(buf[8:8 + n].decode("utf-8"))
data = buf[8 + n:]
fmt = {"F32": "f", "F64": "d", "I64": "q", "BOOL": "?"}
size = {"F32": 4, "F64": 8, "I64": 8, "BOOL": 1}
out = {"__metadata__": header.pop("__metadata__", {})}
for name, info in header.items():
    b, e = info["data_offsets"]
    count = 1
    for s in info["shape"]:
        count *= s
    assert e - b == count * size[info["dtype"]], name
    vals = list(struct.unpack("<%d%s" % (count, fmt[info["dtype"]]), data[b:e]))
    out[name] = [info["dtype"], info["shape"], [float(v) for v in vals]]
print(json.dumps(out))
)PY";

TEST(Safetensors, TinyPythonReaderAgrees) {
  if (!run_ok("python3 -c 'import json, struct' >/dev/null 2>&1")) GTEST_SKIP() << "python3 not available";
  TempDir d;
  const std::string path = d.file("m.safetensors"), script = d.file("reader.py");
  Named in = sample_tensors();
  save_safetensors(path, in, {{"format", "pt"}});
  write_bytes(script, kTinyReader);
  const std::string out = run_capture("python3 '" + script + "' '" + path + "' 2>&1");
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(out)) << out;
  EXPECT_EQ(j["__metadata__"]["format"], "pt");
  for (const auto& [name, t] : in) {
    ASSERT_TRUE(j.contains(name)) << name;
    EXPECT_EQ(j[name][1].get<std::vector<int64_t>>(), t.shape()) << name;
    std::vector<double> want = t.to_vector();
    if (t.dtype() == DType::Float32)  // the reader widens the stored float32
      for (double& v : want) v = static_cast<double>(static_cast<float>(v));
    if (t.dtype() == DType::Int64) {  // -9e9 is exact in double
      auto iv = t.to_int_vector();
      want.assign(iv.begin(), iv.end());
    }
    EXPECT_EQ(j[name][2].get<std::vector<double>>(), want) << name;
  }
}

TEST(Safetensors, OfficialPythonPackageReadsOurFiles) {
  if (!run_ok("python3 -c 'import safetensors, numpy' >/dev/null 2>&1"))
    GTEST_SKIP() << "the `safetensors` and `numpy` Python packages are not importable (pip install safetensors numpy)";
  TempDir d;
  const std::string path = d.file("m.safetensors"), script = d.file("check.py");
  save_safetensors(path, sample_tensors(), {{"format", "pt"}});
  write_bytes(script, R"PY(
import json, sys
from safetensors import safe_open
from safetensors.numpy import load_file
t = load_file(sys.argv[1])
with safe_open(sys.argv[1], framework="numpy") as f:
    meta = f.metadata()
out = {"__metadata__": meta, "torch": False}
for k, v in t.items():
    out[k] = [str(v.dtype), list(v.shape), [float(x) for x in v.reshape(-1)]]
try:
    import torch
    from safetensors.torch import load_file as load_pt
    tt = load_pt(sys.argv[1])
    out["torch"] = all(torch.equal(tt[k], torch.from_numpy(t[k])) for k in t)
except ImportError:
    out["torch"] = None
# And the other direction: a file written by the reference writer, for us to read.
import numpy as np
from safetensors.numpy import save_file
save_file({"f": np.array([[1.5, -2.0]], dtype=np.float32), "d": np.array(0.25, dtype=np.float64),
           "i": np.arange(5, dtype=np.int64) - 2, "b": np.array([True, False]), "e": np.zeros((0, 3), np.float32)},
          sys.argv[2], metadata={"who": "python"})
print(json.dumps(out))
)PY");
  const std::string theirs = d.file("py.safetensors");
  const std::string out = run_capture("python3 '" + script + "' '" + path + "' '" + theirs + "' 2>&1");
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(out)) << out;
  EXPECT_EQ(j["__metadata__"]["format"], "pt");
  EXPECT_EQ(j["w.weight"][0], "float32");
  EXPECT_EQ(j["double"][0], "float64");
  EXPECT_EQ(j["ints"][0], "int64");
  EXPECT_EQ(j["mask"][0], "bool");
  EXPECT_EQ(j["scalar"][1], nlohmann::json::array());
  EXPECT_EQ(j["empty"][1], nlohmann::json({0, 4}));
  EXPECT_EQ(j["w.weight"][2], nlohmann::json({1.5, -2.25, 3.0, 0.0, static_cast<double>(1e-20f), -7.0}));
  EXPECT_EQ(j["mask"][2], nlohmann::json({1.0, 0.0, 1.0}));
  SafetensorsFile py = load_safetensors(theirs);
  EXPECT_EQ(py.metadata.at("who"), "python");
  ASSERT_EQ(py.tensors.size(), 5u);
  expect_same(*find(py.tensors, "f"), Tensor::from_vector(std::vector<float>{1.5f, -2.0f}, {1, 2}), "f");
  expect_same(*find(py.tensors, "d"), Tensor::scalar(0.25, DType::Float64), "d");
  expect_same(*find(py.tensors, "i"), Tensor::from_ints({-2, -1, 0, 1, 2}, {5}), "i");
  expect_same(*find(py.tensors, "b"), Tensor::from_vector(std::vector<double>{1, 0}, {2}, DType::Bool), "b");
  EXPECT_EQ(find(py.tensors, "e")->shape(), (Shape{0, 3}));
  if (j["torch"].is_boolean()) {
    EXPECT_TRUE(j["torch"].get<bool>()) << "safetensors.torch.load_file disagrees";
  }
}
