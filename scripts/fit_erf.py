#!/usr/bin/env python3
"""fit_erf.py: the coefficients of erf_approx (tensor/kernels/cpu/vec_math.h) and the check of
their float evaluation.

erf(z) = z P(w) / Q(w), w = z^2, P and Q of degree 5 with Q(0) = 1, fitted to erf(z)/z on
w in [0, 16] (|z| < 4) for least relative error: a linearised least-squares fit on Chebyshev
nodes, repeated with the previous denominator dividing the residual (Sanathanan-Koerner) and,
after a few rounds, Lawson's reweighting towards the minimax error. The coefficients are then
rounded to float and the C++ evaluation order is replayed in float32 (each operation rounded, no
FMA, as the build compiles with -ffp-contract=off) on the grid of the test
Numerics.VectorisedErfExpAndGelu, and the worst error in ulp is printed per range of |z|.

Needs numpy and scipy (PyPI); not part of the build or the tests.
Usage: python3 scripts/fit_erf.py
"""
import argparse
import sys

try:
    import numpy as np
    from scipy.special import erf
except ImportError as missing:
    sys.exit(f"fit_erf.py needs numpy and scipy ({missing}); e.g. python3 -m venv /tmp/fit && "
             "/tmp/fit/bin/pip install numpy scipy, then run it with /tmp/fit/bin/python")

F32 = np.float32
DEG_P, DEG_Q, W_MAX = 5, 5, 16.0


def erf_over_z(w):
    z = np.sqrt(w)
    safe = np.where(z > 0, z, 1.0)
    return np.where(w > 0, erf(z) / safe, 2.0 / np.sqrt(np.pi))


def fit(m=DEG_P, n=DEG_Q, w_max=W_MAX, nodes=4000, rounds=60):
    w = (np.cos(np.pi * (np.arange(nodes) + 0.5) / nodes) + 1.0) / 2.0 * w_max
    f = erf_over_z(w)
    basis_p = np.vander(w, m + 1, increasing=True)
    basis_q = np.vander(w, n + 1, increasing=True)[:, 1:]
    design = np.hstack([basis_p, -f[:, None] * basis_q])  # P(w) - f (Q(w) - 1) = f
    q_prev, weight, best = np.ones_like(w), np.ones_like(w), None
    for r in range(rounds):
        scale = np.sqrt(weight) / (f * q_prev)
        coef, *_ = np.linalg.lstsq(design * scale[:, None], f * scale, rcond=None)
        p, q = coef[: m + 1], np.concatenate([[1.0], coef[m + 1 :]])
        qw = np.polyval(q[::-1], w)
        rel = (np.polyval(p[::-1], w) / qw - f) / f
        if best is None or np.abs(rel).max() < best[0]:
            best = (np.abs(rel).max(), p, q)
        q_prev = qw
        if r > 5:
            weight = weight * np.abs(rel)
            weight /= weight.sum()
    return best


def horner32(c, w):
    acc = np.full_like(w, c[-1])
    for k in reversed(c[:-1]):
        acc = (acc * w).astype(F32) + k
    return acc.astype(F32)


def erf_approx32(x, p, q):  # the C++ order: a = min(|x|, 4), w = a a, r = min(a (P / Q), 1), sign
    a = np.minimum(np.abs(x).astype(F32), F32(4.0))
    w = (a * a).astype(F32)
    r = (a * (horner32(p, w) / horner32(q, w)).astype(F32)).astype(F32)
    return np.copysign(np.minimum(r, F32(1.0)), x)


def main():
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    rel, p, q = fit()
    p32, q32 = [F32(c) for c in p], [F32(c) for c in q]
    print(f"fit: max relative error {rel:.2e} in exact arithmetic")
    print("P (w^0 first):", ", ".join(f"{c:.9g}f" for c in p32))
    print("Q (w^0 first):", ", ".join(f"{c:.9g}f" for c in q32))
    grid = np.concatenate([np.arange(-600000, 600001) * F32(1e-5),
                           10.0 ** np.arange(-30, 0.8, 0.001), -(10.0 ** np.arange(-30, 0.8, 0.001))]).astype(F32)
    want = erf(grid.astype(np.float64))
    mag = np.abs(want).astype(F32)
    ulp = np.maximum((np.nextafter(mag, F32(2.0)) - mag).astype(np.float64), 1e-45)
    got = erf_approx32(grid, p32, q32).astype(np.float64)
    err = np.abs(got - want)
    for lo, hi in [(0, 1), (1, 4), (4, 7)]:
        sel = (np.abs(grid) >= lo) & (np.abs(grid) < hi)
        print(f"|z| in [{lo}, {hi}): worst {(err / ulp)[sel].max():.2f} ulp, {err[sel].max():.2e} absolute")


if __name__ == "__main__":
    main()
