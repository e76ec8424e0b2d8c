// storage.cpp — CPU backend (aligned host memory with byte accounting) and backend lookup. An
// allocation that fails is an OutOfMemoryError naming the bytes (never a null pointer or a wrapped
// size); tensor.cpp has already turned impossible sizes into ShapeErrors.
#include "tensor/storage.h"

#include <malloc.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

namespace posgrad {

#if POSGRAD_HAVE_CUDA
DeviceBackend& cuda_backend();  // tensor/kernels/cuda/backend.cu
bool cuda_device_present();
#endif

namespace {

class CpuBackend final : public DeviceBackend {
 public:
  CpuBackend() {
    // Training allocates and frees the same large activation buffers every step. By default glibc
    // serves them with fresh mmaps, and first-touching fresh pages costs more than the GEMM that
    // fills them; keeping freed memory in the heap lets the next step reuse warm pages.
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }
  void* allocate(size_t nbytes) override {
    // Rounded up to whole cache lines; checked, so that a size near SIZE_MAX cannot wrap to 0.
    POSGRAD_CHECK(nbytes <= std::numeric_limits<size_t>::max() - 63, OutOfMemoryError, "cannot allocate ", nbytes,
                  " bytes of CPU memory (beyond the address space)");
    size_t rounded = (nbytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    void* p = std::aligned_alloc(64, rounded);
    POSGRAD_CHECK(p != nullptr, OutOfMemoryError, "out of memory: cannot allocate ", nbytes, " bytes of CPU memory (",
                  current_.load(), " bytes held in tensors)");
    size_t now = current_.fetch_add(rounded) + rounded;
    size_t prev = peak_.load();
    while (now > prev && !peak_.compare_exchange_weak(prev, now)) {
    }
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    size_t rounded = (nbytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    current_.fetch_sub(rounded);
    std::free(ptr);
  }
  void copy(void* dst, Device, const void* src, Device, size_t n) override {
    if (n) std::memcpy(dst, src, n);
  }
  void zero(void* ptr, size_t nbytes) override {
    // A training step clears several activation-sized gradient buffers (the attention's dq, dk, dv,
    // the norms' dx); the whole thread team clears a large one, in whole cache lines per thread.
    constexpr size_t kTeamBytes = size_t(1) << 18;  // below this, waking a team costs more than it saves
    if (nbytes >= kTeamBytes && !omp_in_parallel() && omp_get_max_threads() > 1) {
#pragma omp parallel
      {
        const size_t lines = (nbytes + 63) / 64, nt = static_cast<size_t>(omp_get_num_threads()),
                     t = static_cast<size_t>(omp_get_thread_num());
        const size_t b = std::min(nbytes, lines * t / nt * 64), e = std::min(nbytes, lines * (t + 1) / nt * 64);
        if (e > b) std::memset(static_cast<char*>(ptr) + b, 0, e - b);
      }
      return;
    }
    if (nbytes) std::memset(ptr, 0, nbytes);
  }
  void synchronize() override {}
  int device_count() override { return 1; }
  size_t peak_bytes() const override { return peak_.load(); }
  size_t current_bytes() const override { return current_.load(); }
  void reset_peak() override { peak_.store(current_.load()); }

 private:
  std::atomic<size_t> current_{0}, peak_{0};
};

}  // namespace

DeviceBackend& backend(DeviceType t) {
  static CpuBackend cpu;
  if (t == DeviceType::CPU) return cpu;
#if POSGRAD_HAVE_CUDA
  if (!cuda_device_present()) throw DeviceError("CUDA device requested, but no CUDA GPU is present on this machine");
  return cuda_backend();
#else
  throw DeviceError("CUDA device requested, but posgrad was built without CUDA (configure with -DPOSGRAD_CUDA=ON)");
#endif
}

bool cuda_available() {
#if POSGRAD_HAVE_CUDA
  return cuda_device_present();
#else
  return false;
#endif
}

void require_device(Device d) {
  if (d.is_cpu()) return;
  const int n = backend(d.type).device_count();  // throws when CUDA is not built or no GPU is present
  if (d.index >= n)
    throw DeviceError(d.str() + " requested, but this machine has " + std::to_string(n) + " CUDA GPU" +
                      (n == 1 ? "" : "s") + " (cuda:0 to cuda:" + std::to_string(n - 1) + ")");
}

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    try {
      size_t used = 0;
      int i = std::stoi(s.substr(5), &used);
      if (i >= 0 && used == s.size() - 5) return cuda(i);
    } catch (const std::exception&) {
    }
  }
  throw ValueError("unknown device '" + s + "' (expected cpu, cuda or cuda:N)");
}

Storage::Storage(size_t nbytes, Device dev) : nbytes_(nbytes), dev_(dev) { ptr_ = backend(dev.type).allocate(nbytes); }

Storage::~Storage() {
  if (ptr_) backend(dev_.type).deallocate(ptr_, nbytes_);
}

}  // namespace posgrad
