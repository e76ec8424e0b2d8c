#!/usr/bin/env python3
"""torch_matmul.py — PyTorch's matmul timed on request, for bench_gemm --against torch.

bench_gemm starts this script once and alternates its own samples with PyTorch's over a pipe, so both
libraries are timed in the same run, interleaved, with the same thread count. Protocol (one line each
way):
  ping                             -> "pong" (torch is imported: the helper is idle from now on)
  shape M N K TA TB DTYPE THREADS  -> "ok <torch version> <cpu capability>"   (allocates the operands)
  time CALLS                       -> seconds per call of CALLS back-to-back products (float)
  quit
DTYPE is float32 or bfloat16 (bf16 operands in, bf16 out: what a matmul under torch.autocast("cpu",
dtype=torch.bfloat16) runs). TA/TB 1 means the operand is stored transposed, as in bench_gemm.
Not part of CI (it needs PyTorch).
"""
import sys
import time

import torch


def main() -> None:
    a = b = None
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            return
        if words[0] == "ping":
            print("pong", flush=True)
            continue
        if words[0] == "shape":
            m, n, k, ta, tb = (int(w) for w in words[1:6])
            dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[words[6]]
            torch.set_num_threads(int(words[7]))
            gen = torch.Generator().manual_seed(42)
            a = torch.rand(k, m, generator=gen).mul_(2).sub_(1).t() if ta else torch.rand(m, k, generator=gen)
            b = torch.rand(n, k, generator=gen).mul_(2).sub_(1).t() if tb else torch.rand(k, n, generator=gen)
            a, b = a.to(dtype), b.to(dtype)
            for _ in range(3):
                torch.matmul(a, b)
            print("ok", torch.__version__, torch.backends.cpu.get_cpu_capability(), flush=True)
        elif words[0] == "time":
            calls = int(words[1])
            t0 = time.perf_counter()
            for _ in range(calls):
                torch.matmul(a, b)
            print((time.perf_counter() - t0) / calls, flush=True)
        else:
            print("error unknown command", words[0], flush=True)
            return


if __name__ == "__main__":
    main()
