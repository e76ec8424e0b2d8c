// dtype.h — element types and devices. Float32 is the training type; float64 exists so that every
// backward kernel can be checked against finite differences in double precision. Int64 holds
// token ids and indices; Bool (one byte) holds masks.
#pragma once

#include <cstdint>
#include <string>

#include "tensor/errors.h"

namespace posgrad {

enum class DType : uint8_t { Float32, Float64, Int64, Bool };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Int64: return 8;
    case DType::Bool: return 1;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int64: return "int64";
    case DType::Bool: return "bool";
  }
  return "?";
}

inline bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64; }

template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::Float32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::Float64;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::Int64;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::Bool;
};  // Bool is stored as one byte

// Calls f(T{}) with T = float or double according to t; any other dtype is a DTypeError naming `what`.
template <typename F>
decltype(auto) dispatch_floating(DType t, const char* what, F&& f) {
  if (t == DType::Float32) return f(float{});
  if (t == DType::Float64) return f(double{});
  throw DTypeError(detail::concat(what, ": expected a floating dtype (float32/float64), got ", dtype_name(t)));
}

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
  static Device cpu() { return {}; }
  static Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  // "cpu", "cuda", "cuda:1"; anything else is a ValueError.
  static Device parse(const std::string& s);
};

}  // namespace posgrad
