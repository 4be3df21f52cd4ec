"""Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1), timed for `quasi-bench sim`.

    python numba_sim.py [--budget SECONDS] [--reps N] JOB...

JOB is `vadd:N` (c = a + b over N float32, blocks of 256 threads), `sgemm:N` (an N×N×N
product with 16×16 tiles in shared memory, two barriers per tile) or `reduce:N` (the sum of N
float32 as prelude/gpu.rhai's `reduce` makes it: 64 blocks of 256 threads, a grid-stride loop,
a tree in shared memory with a barrier per level, an atomic add per block; Numba's simulator
has no warp shuffles, so `warp_reduce` has no counterpart). Inputs are small integers,
so results are exact; each is checked against NumPy (a mismatch exits with status 1). For each
job it prints one line that quasi-bench parses:

    numba-sim JOB runs=R median_s=S

or `numba-sim JOB skipped=REASON` when the time the previous job of its kind took per element says that
the job would not fit in what is left of the budget. The first job of a kind is preceded by an
untimed warm-up launch of the same kernel at a small size (256 elements, 16×16×16). A job stops
early when its last run took more than half of the budget left.
"""

import argparse
import os
import sys
import time

# Before numba is imported: the simulator replaces the CUDA target.
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

import numpy as np  # noqa: E402
from numba import cuda, float32  # noqa: E402

TILE = 16


@cuda.jit
def vadd(a, b, c, n):
    i = cuda.grid(1)
    if i < n:
        c[i] = a[i] + b[i]


REDUCE_BLOCK = 256


@cuda.jit
def reduce(x, out, n):
    partial = cuda.shared.array(REDUCE_BLOCK, float32)
    thread = cuda.threadIdx.x
    total = float32(0.0)
    i = cuda.blockIdx.x * REDUCE_BLOCK + thread
    while i < n:
        total += x[i]
        i += REDUCE_BLOCK * cuda.gridDim.x
    partial[thread] = total
    cuda.syncthreads()
    half = REDUCE_BLOCK // 2
    while half > 0:
        if thread < half:
            partial[thread] += partial[thread + half]
        cuda.syncthreads()
        half //= 2
    if thread == 0:
        cuda.atomic.add(out, 0, partial[0])


@cuda.jit
def sgemm(a, b, c, m, n, k):
    sa = cuda.shared.array((TILE, TILE), float32)
    sb = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    acc = float32(0.0)
    for tile in range((k + TILE - 1) // TILE):
        q = tile * TILE
        sa[ty, tx] = a[row, q + tx] if row < m and q + tx < k else float32(0.0)
        sb[ty, tx] = b[q + ty, col] if q + ty < k and col < n else float32(0.0)
        cuda.syncthreads()
        for p in range(TILE):
            acc += sa[ty, p] * sb[p, tx]
        cuda.syncthreads()
    if row < m and col < n:
        c[row, col] = acc


def small_integers(count, seed):
    """(i·7 + seed) mod 9 − 4, as quasi-bench fills its inputs."""
    return ((np.arange(count, dtype=np.int64) * 7 + seed) % 9 - 4).astype(np.float32)


def make(kind, size):
    """The launch (a function of no arguments) and a check of its result."""
    if kind == "vadd":
        a, b = small_integers(size, 3), small_integers(size, 5)
        c = np.full(size, 12345.0, dtype=np.float32)
        grid = (size + 255) // 256

        def launch():
            vadd[grid, 256](a, b, c, size)

        return launch, lambda: np.array_equal(c, a + b), size
    if kind == "sgemm":
        a = small_integers(size * size, 3).reshape(size, size)
        b = small_integers(size * size, 5).reshape(size, size)
        c = np.full((size, size), 12345.0, dtype=np.float32)
        grid = ((size + TILE - 1) // TILE, (size + TILE - 1) // TILE)

        def launch():
            sgemm[grid, (TILE, TILE)](a, b, c, size, size, size)

        # Every partial sum is a small integer: float32 is exact, NumPy's order does not matter.
        reference = a.astype(np.float64) @ b.astype(np.float64)
        return launch, lambda: np.array_equal(c.astype(np.float64), reference), size**3
    if kind == "reduce":
        x = small_integers(size, 3)
        out = np.zeros(1, dtype=np.float32)

        def launch():
            out[0] = 0.0
            reduce[64, REDUCE_BLOCK](x, out, size)

        # Partial sums of small integers below 2^24: exact in float32.
        return launch, lambda: out[0] == x.astype(np.float64).sum(), size
    raise SystemExit(f"unknown job kind {kind!r} (vadd, sgemm or reduce)")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=120.0, help="seconds for all jobs (default 120)")
    parser.add_argument("--reps", type=int, default=3, help="timed runs per job at most (default 3)")
    parser.add_argument("jobs", nargs="+")
    options = parser.parse_args()
    start = time.perf_counter()
    warmed = set()
    per_unit = {}  # seconds per element (vadd) or multiply-add (sgemm) of the last job of a kind
    for job in options.jobs:
        kind, _, size = job.partition(":")
        launch, correct, units = make(kind, int(size))
        left = options.budget - (time.perf_counter() - start)
        estimate = per_unit[kind] * units if kind in per_unit else None
        if estimate is not None and estimate > left:
            print(f"numba-sim {job} skipped=one-run-would-take-about-{estimate:.0f}-s", flush=True)
            continue
        if kind not in warmed:
            # Warm-up: a small launch of the same kernel, so first-call costs are not timed.
            warm_up, warm_correct, _ = make(kind, 16 if kind == "sgemm" else 256)
            warm_up()
            if not warm_correct():
                print(f"numba-sim {kind}: the warm-up result differs from NumPy's", file=sys.stderr)
                return 1
            warmed.add(kind)
        times = []
        while len(times) < options.reps:
            began = time.perf_counter()
            launch()
            times.append(time.perf_counter() - began)
            if not correct():
                print(f"numba-sim {job}: the result differs from NumPy's", file=sys.stderr)
                return 1
            left = options.budget - (time.perf_counter() - start)
            if times[-1] > left / 2:
                break
        times.sort()
        median = times[(len(times) - 1) // 2] if len(times) % 2 else (times[len(times) // 2 - 1] + times[len(times) // 2]) / 2
        per_unit[kind] = median / units
        print(f"numba-sim {job} runs={len(times)} median_s={median:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
