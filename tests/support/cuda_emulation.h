// cuda_emulation.h — the CUDA kernels on the CPU, for tests on machines without a GPU (this machine
// class and CI). The kernel files tensor/kernels/cuda/*.cu (all but backend.cu, which needs the CUDA
// runtime; gemm.cu runs against a naive column-major cuBLAS stand-in) are compiled a second time, in
// cuda_emulation.cpp, as plain C++ against a small emulation of the execution model: every CUDA thread
// of a block is a fiber (ucontext) on this one OS thread, __syncthreads and warp shuffles are
// scheduling points, and the scheduler reports a deadlock (mismatched barrier, partial warp shuffle)
// as an exception (a test failure) instead of hanging. Blocks run one after another, in a seeded shuffled
// order (POSGRAD_EMU_SEED; 0: index order), so a kernel whose blocks depend on each other's order fails;
// each block's dynamic shared memory starts as NaN (undefined on the GPU), so a read before the write
// shows; a launch beyond the limits of current GPUs (1024 threads per block, grid y and z 65535, 48 KiB
// of dynamic shared memory) throws LaunchLimit. Static __shared__ arrays are not poisoned (they are
// statics here). Two copies: `emu` with smaller blocks than on the GPU (row blocks of 64 = 2 warps,
// attention tiles of 32), which keep the emulated runs fast and make small test shapes span several
// tiles, and `emu_production` (cuda_emulation_production.cpp) with the GPU's (256 and 128).
//
// What it checks: the kernels' indexing, tiling, reductions and synchronisation logic, against the
// CPU kernels (tests/test_cuda.cpp). What it is not: the GPU's memory model, occupancy or compiler —
// the real check is the GPU run of test_cuda and of test_op_registry's CudaMatchesCpu.
//
// The emulated kernels are those of kernels_decl.inc, declared here under emu::posgrad::kernels::cuda
// with the names and signatures of ::posgrad::kernels::cuda.
#pragma once

#include <cstddef>
#include <functional>
#include <stdexcept>

#include "tensor/kernels/kernels.h"

// The kernel files name posgrad's enums, errors and Philox unqualified or as posgrad::...; inside
// namespace emu, make the real ones visible and let emu::posgrad::cuda (common.cuh) shadow the rest.
namespace emu::posgrad {
using namespace ::posgrad;
}
namespace emu::posgrad::kernels {
using namespace ::posgrad::kernels;
}
namespace emu::posgrad::kernels::cuda {
#include "tensor/kernels/kernels_decl.inc"
}

// The same kernels compiled with the GPU's block sizes (cuda_emulation_production.cpp).
namespace emu_production::posgrad {
using namespace ::posgrad;
}
namespace emu_production::posgrad::kernels {
using namespace ::posgrad::kernels;
}
namespace emu_production::posgrad::kernels::cuda {
#include "tensor/kernels/kernels_decl.inc"
}

namespace emu {

// A block that cannot finish (a __syncthreads or a warp shuffle not reached by all its threads).
struct Deadlock : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A launch the GPU would refuse (block size, grid size or shared memory beyond the device limits).
struct LaunchLimit : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The execution model itself, for its own tests: runs `body` as every thread of every block of
// <<<grid, block, smem>>>, with the checks and the block order of a kernel launch. In the body,
// this_thread() says which thread runs (and where the block's dynamic shared memory is), and
// sync_threads_for_test() is __syncthreads().
struct Dim {
  unsigned x = 1, y = 1, z = 1;
};
struct TestThread {
  Dim block, thread;
  unsigned char* smem;
};
void launch_for_test(Dim grid, Dim block, size_t smem, const std::function<void()>& body);
TestThread this_thread();
void sync_threads_for_test();

// False under AddressSanitizer, which does not follow ucontext stack switches (the tests skip then).
inline bool emulation_supported() {
#if defined(__SANITIZE_ADDRESS__)
  return false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return false;
#else
  return true;
#endif
#else
  return true;
#endif
}

}  // namespace emu
