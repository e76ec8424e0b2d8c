// storage.h — reference-counted raw memory that tensors view, and the per-device backend hooks.
// CPU memory is 64-byte aligned (one cache line, one AVX-512 register). A device backend provides
// allocation, copies and synchronisation; the CUDA backend adds itself without touching the
// tensor, autograd or nn code. This is not an allocator framework: CPU allocation goes straight to
// aligned_alloc, CUDA allocation to that backend's caching allocator.
#pragma once

#include <cstddef>
#include <memory>

#include "tensor/dtype.h"

namespace posgrad {

struct DeviceBackend {
  virtual ~DeviceBackend() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  // Copies n bytes; at least one side is this backend's device (the other may be the CPU).
  virtual void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t n) = 0;
  virtual void zero(void* ptr, size_t nbytes) = 0;
  virtual void synchronize() = 0;
  virtual int device_count() = 0;
  // Peak bytes allocated since the last reset (for benchmarks and the compare report).
  virtual size_t peak_bytes() const = 0;
  virtual size_t current_bytes() const = 0;
  virtual void reset_peak() = 0;
};

// The backend of a device type. CUDA throws DeviceError when posgrad was built without CUDA or no
// GPU is present; the message says which.
DeviceBackend& backend(DeviceType t);
bool cuda_available();  // built with CUDA and at least one device present

// Throws DeviceError unless `d` can be used on this machine: the CPU always; cuda:i when posgrad was
// built with CUDA and the machine has more than i GPUs (the message says which is missing). For the
// commands' --dry-run, which allocate nothing on the device.
void require_device(Device d);

class Storage {
 public:
  Storage(size_t nbytes, Device dev);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return ptr_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return dev_; }

 private:
  void* ptr_ = nullptr;
  size_t nbytes_ = 0;
  Device dev_;
};

}  // namespace posgrad
