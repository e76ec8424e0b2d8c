// parallel.h — static shares with stealing: how the CPU kernels split independent work over a team.
//
// What it is: parallel_chunks(n, grain, f) calls f(begin, end) on consecutive chunks of [0, n), each
// chunk exactly once, over the threads of an OpenMP team. Every thread starts on its own contiguous
// share — the chunks a static split would give it, in order from the front — and a thread that
// finishes its share takes the remaining chunks of the others one at a time from the back (their
// owners keep taking from the front). Where the threads run at the same speed each does its own share
// and stealing only trims the last chunk or two, so data stays with the thread that wrote it in the op
// before (the token rows of a row-split GEMM or norm); where one runs slower — a core shared with
// another virtual machine's thread or process ran at 40-55% of its speed for seconds at a time on the
// 2-core development VM, the other at full speed — the fast one takes over the slow one's tail instead
// of waiting for it at the end of the region.
//
// Determinism: which thread runs a chunk changes from run to run; the chunks themselves do not (they
// depend on n, grain, align and the thread count, never on timing), so a kernel whose result per
// chunk does not depend on the thread that computes it gives the same bits whatever the timing.
// Callers keep to that: no per-thread partial sums, no per-thread state carried from one chunk to
// the next. Every thread of the team runs with the caller's floating-point mode (denormals.h,
// TeamFpMode).
//
// Grain: the smallest chunk worth a compare-and-swap (about 10-100 us of work); a thread's share is
// split into at least kChunksPerShare chunks where n allows, so a thread running at half speed leaves
// at most a chunk's worth of imbalance. Chunk boundaries are multiples of `align` items (1: any), for
// kernels whose bits are only independent of the split at such boundaries.
//
// Runs on the calling thread alone (f(0, n) once) when n <= serial_max, inside a parallel region,
// with one thread, when n makes one chunk, or while the caller flushes denormals (denormals.h). Throws std::bad_alloc
// (before any f) if the shares cannot be allocated; f must not throw (it runs inside an OpenMP region).
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdint>
#include <memory>

#include "tensor/kernels/cpu/denormals.h"

namespace posgrad::kernels::cpu {

namespace parallel_detail {

// One thread's remaining chunks [lo, hi) in one word, so that the owner (lo + 1) and a thief (hi - 1)
// never both take the same chunk: each takes by compare-and-swap of the whole range.
struct alignas(64) Share {
  std::atomic<uint64_t> range{0};
};
inline uint64_t pack(uint64_t lo, uint64_t hi) { return lo | (hi << 32); }

// Takes one chunk from the front (owner) or the back (thief) of `s`; false when it is empty.
inline bool take(Share& s, bool front, int64_t& chunk) {
  uint64_t v = s.range.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t lo = v & 0xffffffffu, hi = v >> 32;
    if (lo >= hi) return false;
    const uint64_t next = front ? pack(lo + 1, hi) : pack(lo, hi - 1);
    if (s.range.compare_exchange_weak(v, next, std::memory_order_acq_rel, std::memory_order_relaxed)) {
      chunk = static_cast<int64_t>(front ? lo : hi - 1);
      return true;
    }
  }
}

// The chunks [0, chunks) of one parallel region, dealt into `team` contiguous shares (share t: chunks
// [chunks t / team, chunks (t + 1) / team)). Thread t calls next(t, c) until it returns false: its own
// share from the front, then the others' from the back. Set up before the region, on the thread that
// opens it.
class StealShares {
 public:
  // chunks < 2^32 (each share counts them in 32 bits), team >= 1.
  StealShares(int64_t chunks, int team) : team_(team), shares_(new Share[static_cast<size_t>(team)]) {
    assert(chunks >= 0 && chunks < (int64_t(1) << 32) && team >= 1);
    for (int t = 0; t < team; ++t)
      shares_[static_cast<size_t>(t)].range.store(
          pack(static_cast<uint64_t>(chunks * t / team), static_cast<uint64_t>(chunks * (t + 1) / team)),
          std::memory_order_relaxed);
  }
  // The next chunk for thread t (t >= team: a thread without a share of its own only steals).
  bool next(int t, int64_t& chunk) {
    if (t < team_ && take(shares_[static_cast<size_t>(t)], true, chunk)) return true;
    for (int k = 1; k <= team_; ++k)
      if (take(shares_[static_cast<size_t>((t + k) % team_)], false, chunk)) return true;
    return false;
  }

 private:
  int team_;
  std::unique_ptr<Share[]> shares_;
};

constexpr int64_t kChunksPerShare = 8;
constexpr int64_t kMaxChunks = int64_t(1) << 30;

}  // namespace parallel_detail

template <typename F>
void parallel_chunks(int64_t n, int64_t grain, int64_t serial_max, F&& f, int64_t align = 1) {
  using namespace parallel_detail;
  if (n <= 0) return;
  const int max_threads = omp_get_max_threads();
  if (n <= serial_max || omp_in_parallel() || max_threads <= 1 || caller_flushes_denormals()) {
    f(int64_t{0}, n);
    return;
  }
  align = std::max<int64_t>(align, 1);
  // Chunk size: at least `grain`, at most a share / kChunksPerShare, a multiple of `align`, and few
  // enough chunks to count in 32 bits.
  int64_t chunk = std::max<int64_t>(grain, n / (int64_t(max_threads) * kChunksPerShare));
  chunk = std::max(chunk, (n + kMaxChunks - 1) / kMaxChunks);
  chunk = (chunk + align - 1) / align * align;
  const int64_t chunks = (n + chunk - 1) / chunk;
  if (chunks <= 1) {
    f(int64_t{0}, n);
    return;
  }
  const int team = static_cast<int>(std::min<int64_t>(max_threads, chunks));
  StealShares shares(chunks, team);
  const unsigned fp_mode = caller_fp_mode();
#pragma omp parallel num_threads(team)
  {
    const TeamFpMode fp(fp_mode);
    // Thread t owns share t. The team may be smaller than asked: a share without an owner is taken from
    // the back like any other, since every thread ends by going through all of them.
    const int t = omp_get_thread_num();
    int64_t c;
    while (shares.next(t, c)) f(c * chunk, std::min(n, (c + 1) * chunk));
  }
}

}  // namespace posgrad::kernels::cpu
