// backend.cu — the CUDA DeviceBackend: device discovery, one stream and one cuBLAS handle per
// device, a caching device allocator, host<->device copies, and the error checks every kernel uses.
//
// Allocator: plain cudaMalloc underneath (never managed memory). Freed blocks are kept in free lists
// keyed by (device, rounded size) and handed out again for the same rounded size; because every
// kernel and copy of a device runs on that device's one stream, a block freed on the host may be
// reused at once: the next use is queued behind the last one (the caching scheme of PyTorch's
// CUDACachingAllocator, reduced to exact-size buckets). On cudaMalloc failure the cache is released
// and the allocation retried once. peak/current count bytes handed out (rounded), not bytes cached.
//
// What it is not: a multi-GPU runtime. DeviceBackend::allocate has no device argument, so memory
// comes from the current device (cuda:0 unless the program calls cudaSetDevice); kernels run on the
// current device's stream. Nothing is released at exit: the backend is leaked on purpose, because
// the CUDA driver may already be shut down when static destructors run.
#ifndef POSGRAD_CUDA_EMULATION  // the emulated device (tests/emulated_device/) supplies a fake runtime
#include <cublas_v2.h>
#endif

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensor/kernels/cuda/common.cuh"
#include "tensor/kernels/cuda/cublas.cuh"
#include "tensor/storage.h"

namespace posgrad {

DeviceBackend& cuda_backend();  // below

namespace cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line) {
  (void)cudaGetLastError();  // clear a non-sticky error so later calls are not blamed for it
  throw DeviceError(detail::concat("CUDA error in ", what, " (", file, ":", line, "): ", cudaGetErrorName(err), ": ",
                                   cudaGetErrorString(err)));
}

[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* what, const char* file, int line) {
  throw DeviceError(detail::concat("cuBLAS error in ", what, " (", file, ":", line, "): ", cublasGetStatusName(st),
                                   ": ", cublasGetStatusString(st)));
}

namespace {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, "") != 0 && std::strcmp(v, "0") != 0;
}

constexpr int kMaxDevices = 64;

// Created once under g_dev_mutex, then read without it: every launch asks for the stream, and a lock per
// launch is a cost the GPU's queue does not need (release stores below, acquire loads in device_state).
struct PerDevice {
  std::atomic<bool> ready{false};
  cudaStream_t stream = nullptr;
  std::atomic<cublasHandle_t> blas{nullptr};
};

std::mutex g_dev_mutex;
PerDevice g_dev[kMaxDevices];

int current_device() {
  int d = 0;
  POSGRAD_CUDA_CHECK(cudaGetDevice(&d), "cudaGetDevice");
  if (d < 0 || d >= kMaxDevices)
    throw DeviceError(detail::concat("CUDA device index ", d, " is beyond posgrad's limit of ", kMaxDevices));
  return d;
}

// The stream (and, when `with_blas`, the cuBLAS handle) of device d, created on first use.
PerDevice& device_state(int d, bool with_blas) {
  PerDevice& s = g_dev[d];
  if (s.ready.load(std::memory_order_acquire) && (!with_blas || s.blas.load(std::memory_order_acquire))) return s;
  std::lock_guard<std::mutex> lock(g_dev_mutex);
  if (!s.ready.load(std::memory_order_relaxed)) {
    int prev = 0;
    POSGRAD_CUDA_CHECK(cudaGetDevice(&prev), "cudaGetDevice");
    POSGRAD_CUDA_CHECK(cudaSetDevice(d), "cudaSetDevice");
    POSGRAD_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    POSGRAD_CUDA_CHECK(cudaSetDevice(prev), "cudaSetDevice");
    s.ready.store(true, std::memory_order_release);
  }
  if (with_blas && !s.blas.load(std::memory_order_relaxed)) {
    int prev = 0;
    POSGRAD_CUDA_CHECK(cudaGetDevice(&prev), "cudaGetDevice");
    POSGRAD_CUDA_CHECK(cudaSetDevice(d), "cudaSetDevice");
    cublasHandle_t h = nullptr;
    POSGRAD_CUBLAS_CHECK(cublasCreate(&h), "cublasCreate");
    POSGRAD_CUBLAS_CHECK(cublasSetStream(h, s.stream), "cublasSetStream");
    // TF32 off by default: CUBLAS_DEFAULT_MATH keeps fp32 GEMMs in fp32 (at least the requested
    // mantissa bits), so CUDA matmuls match the CPU to fp32 rounding. POSGRAD_CUDA_TF32=1 allows
    // TF32 tensor cores (10-bit mantissa inputs: faster, ~1e-3 relative error).
    const cublasMath_t mode = env_flag("POSGRAD_CUDA_TF32") ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
    POSGRAD_CUBLAS_CHECK(cublasSetMathMode(h, mode), "cublasSetMathMode");
    POSGRAD_CUDA_CHECK(cudaSetDevice(prev), "cudaSetDevice");
    s.blas.store(h, std::memory_order_release);
  }
  return s;
}

}  // namespace

cudaStream_t stream() { return device_state(current_device(), false).stream; }

cublasHandle_t cublas_handle() { return device_state(current_device(), true).blas.load(std::memory_order_acquire); }

void check_launch(const char* kernel) {
  static const bool sync_each = env_flag("POSGRAD_CUDA_SYNC");
  POSGRAD_CUDA_CHECK(cudaGetLastError(), kernel);
  if (sync_each) POSGRAD_CUDA_CHECK(cudaStreamSynchronize(stream()), kernel);
}

// The fault record (common.cuh): mapped pinned host memory, so a kernel's report costs no copy and
// the host reads it after any synchronisation at no cost.
namespace {
std::atomic<IndexFault*> g_fault_host{nullptr};
}  // namespace

IndexFault* index_fault() {
  static IndexFault* const device_view = [] {
    void* host = nullptr;
    POSGRAD_CUDA_CHECK(cudaHostAlloc(&host, sizeof(IndexFault), cudaHostAllocMapped | cudaHostAllocPortable),
                       "cudaHostAlloc (index fault record)");
    std::memset(host, 0, sizeof(IndexFault));
    void* device = nullptr;
    POSGRAD_CUDA_CHECK(cudaHostGetDevicePointer(&device, host, 0), "cudaHostGetDevicePointer (index fault record)");
    g_fault_host.store(static_cast<IndexFault*>(host), std::memory_order_release);
    return static_cast<IndexFault*>(device);
  }();
  return device_view;
}

// Called after the host waited for the GPU: a fault a kernel recorded since the last report becomes
// an IndexError naming the op, the position and the bound; the record is cleared.
void raise_index_fault() {
  volatile IndexFault* f = g_fault_host.load(std::memory_order_acquire);
  if (f == nullptr || f->flag == 0) return;
  const int kind = f->kind;
  const long long position = f->position, value = f->value, bound = f->bound;
  f->flag = 0;
  const char* found = " (found by the CUDA kernel, reported at the next synchronisation)";
  if (kind == kEmbeddingId)
    throw IndexError(detail::concat("embedding: id ", value, " at position ", position,
                                    " is out of range for vocab size ", bound, found));
  throw IndexError(detail::concat("cross_entropy: target ", value, " at row ", position, " is out of range for ", bound,
                                  " classes", found));
}

}  // namespace cuda

namespace {

// Rounding: small blocks to 512 B (cudaMalloc's own alignment granularity is 256 B), large ones
// to 2 MiB so that slightly different sizes (e.g. the last batch) share a bucket.
size_t round_size(size_t n) {
  constexpr size_t kSmall = 512, kLarge = size_t(2) << 20, kSmallLimit = size_t(1) << 20;
  // A size within a rounding step of SIZE_MAX would wrap to a tiny block.
  POSGRAD_CHECK(n <= std::numeric_limits<size_t>::max() - kLarge, OutOfMemoryError, "cannot allocate ", n,
                " bytes of CUDA memory (beyond the address space)");
  if (n == 0) n = 1;
  if (n <= kSmallLimit) return (n + kSmall - 1) / kSmall * kSmall;
  return (n + kLarge - 1) / kLarge * kLarge;
}

class CudaBackend final : public DeviceBackend {
 public:
  void* allocate(size_t nbytes) override {
    const int dev = cuda::current_device();
    const size_t rounded = round_size(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    void* p = nullptr;
    auto& bucket = free_[key(dev, rounded)];
    if (!bucket.empty()) {
      p = bucket.back();
      bucket.pop_back();
      cached_ -= rounded;
    } else {
      cudaError_t err = cudaMalloc(&p, rounded);
      if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        release_cache_locked();
        err = cudaMalloc(&p, rounded);
      }
      if (err != cudaSuccess) {
        (void)cudaGetLastError();
        const std::string msg = detail::concat("cudaMalloc(", rounded, " bytes) for ", nbytes, " bytes on cuda:", dev,
                                               " failed: ", cudaGetErrorName(err), ": ", cudaGetErrorString(err),
                                               " (posgrad holds ", current_, " bytes in tensors)");
        if (err == cudaErrorMemoryAllocation) throw OutOfMemoryError("CUDA out of memory: " + msg);
        throw DeviceError("CUDA allocation failure: " + msg);
      }
    }
    live_[p] = Block{dev, rounded};
    current_ += rounded;
    if (current_ > peak_) peak_ = current_;
    return p;
  }

  void deallocate(void* ptr, size_t) override {
    if (!ptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return;  // not ours; never free foreign memory
    const Block b = it->second;
    live_.erase(it);
    current_ -= b.size;
    cached_ += b.size;
    free_[key(b.device, b.size)].push_back(ptr);
  }

  void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t n) override {
    if (n == 0) return;
    // The device whose stream orders the copy: the destination if it is on the GPU, else the source.
    const Device gpu = dst_dev.is_cuda() ? dst_dev : src_dev;
    DeviceGuard guard(gpu.index);
    cudaStream_t s = cuda::stream();
    if (dst_dev.is_cuda() && src_dev.is_cuda() && dst_dev.index != src_dev.index) {
      // Cross-device: let the source's queued work finish first.
      DeviceGuard src_guard(src_dev.index);
      POSGRAD_CUDA_CHECK(cudaStreamSynchronize(cuda::stream()), "cudaStreamSynchronize (copy source)");
    }
    // cudaMemcpyDefault infers the direction from the pointers (unified virtual addressing).
    POSGRAD_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s), "cudaMemcpyAsync");
    // The host may read (or free) its side as soon as we return: wait whenever one side is the CPU.
    // A read to the host waits for the copy (the caller reads at once); so does a copy between two GPUs.
    // An upload does not wait here: a pageable source is staged by the driver before cudaMemcpyAsync
    // returns, so the caller may free or reuse it at once, and later work is queued behind the copy on
    // the same stream (CUDA Runtime API, "API synchronization behavior"). The driver may still wait
    // for the stream while it stages pageable memory; only a pinned source would avoid that.
    if (dst_dev.is_cpu() || (dst_dev.is_cuda() && src_dev.is_cuda() && dst_dev.index != src_dev.index)) {
      POSGRAD_CUDA_CHECK(cudaStreamSynchronize(s), "cudaStreamSynchronize (copy)");
      cuda::raise_index_fault();
    }
  }

  void zero(void* ptr, size_t nbytes) override {
    if (nbytes == 0) return;
    int dev = -1;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = live_.find(ptr);
      if (it != live_.end()) dev = it->second.device;
    }
    DeviceGuard guard(dev);
    POSGRAD_CUDA_CHECK(cudaMemsetAsync(ptr, 0, nbytes, cuda::stream()), "cudaMemsetAsync");
  }

  void synchronize() override {
    for (int d = 0; d < cuda::kMaxDevices; ++d) {
      cudaStream_t s = nullptr;
      {
        std::lock_guard<std::mutex> lock(cuda::g_dev_mutex);
        if (cuda::g_dev[d].ready.load(std::memory_order_acquire)) s = cuda::g_dev[d].stream;
      }
      if (s) POSGRAD_CUDA_CHECK(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    }
    cuda::raise_index_fault();
  }

  int device_count() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return n;
  }

  size_t peak_bytes() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }
  size_t current_bytes() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return current_;
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = current_;
  }

 private:
  struct Block {
    int device;
    size_t size;
  };
  // Switches the current device for a scope (index < 0: leave it alone).
  struct DeviceGuard {
    int prev = -1;
    explicit DeviceGuard(int d) {
      if (d < 0) return;
      int cur = 0;
      POSGRAD_CUDA_CHECK(cudaGetDevice(&cur), "cudaGetDevice");
      if (cur != d) {
        POSGRAD_CUDA_CHECK(cudaSetDevice(d), "cudaSetDevice");
        prev = cur;
      }
    }
    ~DeviceGuard() {
      if (prev >= 0) (void)cudaSetDevice(prev);
    }
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;
  };

  static uint64_t key(int dev, size_t size) { return (static_cast<uint64_t>(dev) << 56) | size; }

  // Returns every cached block to the driver (after the device's queued work is done with them).
  void release_cache_locked() {
    (void)cudaDeviceSynchronize();
    for (auto& [k, ptrs] : free_) {
      for (void* p : ptrs) (void)cudaFree(p);
      ptrs.clear();
    }
    free_.clear();
    cached_ = 0;
    (void)cudaGetLastError();
  }

  mutable std::mutex mutex_;
  std::unordered_map<uint64_t, std::vector<void*>> free_;
  std::unordered_map<void*, Block> live_;
  size_t current_ = 0, peak_ = 0, cached_ = 0;
};

}  // namespace

namespace cuda {

bool is_device_pointer(const void* p) {
  if (!p) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();  // older drivers report unregistered host memory as an error
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

void require_device_pointer(const void* p, const char* kernel, const char* arg) {
  if (p && !is_device_pointer(p))
    throw DeviceError(detail::concat("CUDA kernel ", kernel, ": argument '", arg,
                                     "' is host memory; move that tensor to the GPU first"));
}

DeviceArray::DeviceArray(const void* p, size_t bytes) : ptr_(p), bytes_(bytes) {
  if (!p || bytes == 0 || is_device_pointer(p)) return;
  owned_ = cuda_backend().allocate(bytes);
  ptr_ = owned_;
  POSGRAD_CUDA_CHECK(cudaMemcpyAsync(owned_, p, bytes, cudaMemcpyHostToDevice, stream()),
                     "cudaMemcpyAsync (index array)");
}

void* scratch_allocate(size_t bytes) { return cuda_backend().allocate(bytes); }
void scratch_free(void* p, size_t bytes) { cuda_backend().deallocate(p, bytes); }

DeviceArray::~DeviceArray() {
  if (owned_) cuda_backend().deallocate(owned_, bytes_);
}

}  // namespace cuda

bool cuda_device_present() {
  // Never throws: no driver (cudaErrorInsufficientDriver), no GPU (cudaErrorNoDevice) or any other
  // failure of cudaGetDeviceCount all mean "no device". The answer is cached.
  static const bool present = [] {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return n > 0;
  }();
  return present;
}

DeviceBackend& cuda_backend() {
  static CudaBackend* b = new CudaBackend();  // leaked on purpose (see the file comment)
  return *b;
}

}  // namespace posgrad
