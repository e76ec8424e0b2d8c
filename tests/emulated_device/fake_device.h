// fake_device.h — the emulated CUDA device: a test program linked with cuda_device.cpp (the object
// library posgrad_emulated_cuda_device) has one "GPU". Device::cuda() tensors live in a fake device
// memory and every CUDA kernel of tensor/kernels/cuda/ runs in the CPU emulation of the execution
// model (tests/support/cuda_emulation.h), with backend.cu itself (the caching allocator, copies,
// streams, cuBLAS handles) compiled against a fake CUDA runtime. So the library's CUDA path — ops,
// autograd, optimizers, training — runs end to end on machines without a GPU.
//
// What the fake runtime checks, as a driver would: copies and memsets stay inside one cudaMalloc
// block and match their declared direction; a kernel or GEMM argument that points to host memory
// throws DeviceError (an illegal address on the GPU); fresh device memory is NaN; cudaMalloc fails
// beyond set_memory_limit. What it counts: the calls that cost a GPU a transfer or a host wait.
// Several devices (POSGRAD_EMU_DEVICES=N) and NCCL (fake_nccl.h: its collectives move the bytes with
// MPI, so a job under mpirun runs dist/nccl_communicator.cpp's path) for the data-parallel tests.
// What it is not: a GPU. Timing, memory model and occupancy are not emulated; blocks are the small
// emulation sizes (row blocks of 64 threads, attention tiles of 32) to keep whole models fast.
#pragma once

#include <cstddef>
#include <cstdint>

namespace emu_device {

struct Counters {
  int64_t launches = 0;     // kernel launches (cuBLAS calls not included)
  int64_t h2d = 0;          // cudaMemcpyAsync host -> device
  int64_t d2h = 0;          // device -> host
  int64_t d2d = 0;          // device -> device
  int64_t memsets = 0;      // cudaMemsetAsync
  int64_t syncs = 0;        // cudaStreamSynchronize / cudaDeviceSynchronize: the host waits for the GPU
  int64_t mallocs = 0;      // cudaMalloc (the caching allocator's misses)
  int64_t frees = 0;        // cudaFree (cache releases)
  int64_t collectives = 0;  // ncclAllGather / ncclBroadcast (fake_nccl.h)
};

Counters counters();
void reset_counters();
// cudaMalloc fails with cudaErrorMemoryAllocation once this many bytes are live (default: no limit).
void set_memory_limit(size_t bytes);
// Bytes cudaMalloc'd and not freed (the caching allocator's live and cached blocks).
size_t device_bytes();

}  // namespace emu_device
