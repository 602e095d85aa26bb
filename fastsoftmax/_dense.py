"""Kernel launches for dense X: the gradient and Hessian-vector products.

:class:`DenseEngine` runs the fused kernels of :mod:`._kernels._fused` and
:mod:`._kernels._hessp` on one :class:`~fastsoftmax._data.Dataset` with a
C-contiguous float X, in either strategy: "rows" (register-blocked tiles,
weights in coef layout (k, n)) or "gemm" (BLAS on row blocks, W = coefᵀ,
transposed here: O(n k) next to the pass's O(m n k)). Every launch sizes
the chunk axis from the thread count in force and reduces the per-chunk
partial sums (in parallel once they are large: :meth:`DenseEngine._to_coef`),
then adds the L2 term (:mod:`fastsoftmax._penalty`). Few rows over a large
n k take the GEMM pass split by features, which has no partial sums
(:func:`split_features`; on the tiles, :func:`tiles_split`). Per-chunk
buffers are made once per chunk count and reused.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np

from ._blas_choice import in_use, use_chosen
from ._calibration import NARROW_BLOCK_BYTES, narrow_block_bytes
from ._kernels._ahead import HESSP_MICRO
from ._kernels._common import LANES_FROM, reads_ahead
from ._kernels._config import WIDE_REGISTERS
from ._kernels._fused import (
    _gemm_chunk,
    _gemm_chunk_lanes,
    _gemm_t_chunk,
    _loss_grad_gemm,
    _loss_grad_gemm_lanes,
    _loss_grad_gemm_split,
    _loss_grad_gemm_t,
    _loss_grad_rows,
    _loss_grad_tiles,
    _loss_grad_tiles_lanes,
    _loss_grad_tiles_lanes_rest,
    _loss_grad_tiles_rest,
    _loss_grad_tiles_split,
    _pad_copy,
    _rows_chunk,
    _sum_chunks,
    _sum_chunks_one,
    _tiles_chunk,
    _tiles_chunk_lanes,
    _tiles_chunk_lanes_rest,
    _tiles_chunk_rest,
    rows_blocks,
    rows_scratch_length,
)
from ._kernels._hessp import (
    HESSP_SCRATCH_ROWS,
    _hessp_gemm,
    _hessp_gemm_chunk,
    _hessp_gemm_chunk_lanes,
    _hessp_gemm_lanes,
    _hessp_gemm_split,
    _hessp_gemm_t,
    _hessp_gemm_t_chunk,
    _hessp_rows,
    _hessp_rows_chunk,
    _hessp_tiles,
    _hessp_tiles_chunk,
    _hessp_tiles_chunk_lanes,
    _hessp_tiles_chunk_lanes_rest,
    _hessp_tiles_chunk_rest,
    _hessp_tiles_lanes,
    _hessp_tiles_lanes_rest,
    _hessp_tiles_rest,
)
from ._kernels._outer import (
    padded_width,
    rest_classes_for,
    rest_rows_for,
    spare_rows_for,
    whole_rows,
)
from ._kernels._width import DEFAULT_WIDTH, FLOAT64_512
from ._launch import (
    aligned_empty,
    aligned_row,
    aligned_rows,
    aligned_zeros,
    call_ended,
    first_bad,
    launch_work,
    n_chunks,
    run_one_chunk,
    serial_call,
)
from ._penalty import _KERNEL_FROM as _L2_KERNEL_FROM
from ._penalty import add_l2, penalize
from ._threads import load_kernel_blas

# Row-block size of the GEMM strategy: large enough to amortise adding each
# block's Xᵀ E into the chunk's accumulator (n*k work per block), small
# enough that the block of X stays in L2 between the two products.
_L2_BYTES = 1 << 18

# The probabilities P (m, k) are kept for Hessian products when they take
# at most this many bytes, or no more than X itself: a product that reads
# them costs about two thirds of one that recomputes them from X W (the
# recompute adds the X W product and m k exps), and up to the size of X the
# cache at most doubles what a fit already holds. Beyond both (say 10^6 rows
# x 10^4 classes over 100 features: 80 GB of P for 0.8 GB of X) every
# product recomputes P (BENCHMARKS.md, "Newton").
PROBA_BUDGET = 256 << 20


# Once the gradient's n x k partial sum outgrows the cache (_whole_chunks),
# blocks hold a whole chunk of rows, up to _MAX_ROWS_LARGE_G: every block after a
# chunk's first adds its Xᵀ E (n k entries) into the chunk's sum, a pass
# over memory that at 64 rows per block cost as much as the block's two
# products (1000 x 3000 x 1000 float32: 175 ms at 64 rows, 118 ms at 256,
# measured when the block's product still went through a buffer of its
# own; BLAS now adds it in place, _kernels._blas). Re-reading a block of X
# from L3 for the second product costs far less. The scratch for one
# block's logits is then up to _MAX_ROWS_LARGE_G x k per thread.
_MAX_ROWS_LARGE_G = 2048

# Few rows next to a large n k (split_features): the GEMM strategy's
# backward product is split by features, not rows
# (_kernels._fused._loss_grad_gemm_split, _kernels._hessp._hessp_gemm_split).
# Every thread then writes its own rows of the one gradient, where the row
# split gives each an n k partial sum to write and reduce after the pass
# (about 2 n k of memory traffic a thread); the split writes the error of
# every row, m k, and each thread reads all of it back (about m k a thread).
# So it wins where m k is small next to n k and n k is too large for the
# partial sums to stay in cache; below 1 MiB of n k the row split won
# (timings on 2 threads: BENCHMARKS.md, "Eleventh session"). With more
# threads the row split's chunks get fewer rows, the inner dimension of its
# backward product, while the split's products keep all m: the bound
# m <= n, measured at two threads, is the cautious side. At least
# _SPLIT_MIN_FEATURES features a thread keep each thread's product a matrix
# product.
# Where the GEMM strategy's blocks run the outer-product tiles at any size
# (_TILES_ANY_SIZE, hosts with AVX-512), BLAS's split is not taken: on two
# threads of the Zen 5 host the row split on the tiles took 0.50-0.93x its
# gradient's time at 300-1,000 rows of 784 and 3,000 features ("Sixtieth
# session"), and by now 0.51-0.74x at 64-2,000 rows, 0.65-0.71x at 64-120
# (`gradient_variants.py split`); the Hessian products 0.22-0.77x at
# 64-120 rows, 784-3,000 features and 100-1,000 classes in both dtypes
# (`against_commit.py --what products`; "Sixty-seventh session"). There
# the tiles' own split takes few rows of many classes (tiles_split).
_SPLIT_G_BYTES = 1 << 20
_SPLIT_ROWS_PER_FEATURE = 1
_SPLIT_MIN_FEATURES = 32

# The tiles' gradient split by features too (tiles_split;
# _kernels._fused._loss_grad_tiles_split): the error of every row into a
# buffer of m k, then each thread's rows of the one gradient over all
# rows. The row split keeps an n kp partial sum a thread, which each block
# reads and writes and the caller sums after the pass: memory and a
# reduction that grow with the threads. BLAS's split took 1.4-2.0x the
# tiles' split's time at 64-2,000 rows, 784-3,000 features and 100-1,000
# classes, in both dtypes (`benchmarks/gradient_variants.py split --rounds
# 5`, two threads of the Zen 5 host; BENCHMARKS.md, "Sixty-seventh
# session"). Against the row split the tiles' split took 0.90-1.06x the
# time (at (1000, 3000, 1000) 0.95-0.98x in five
# runs of `against_commit.py`, processes alternating); in 16 row chunks
# (`--chunks 16`, the partial sums of 16 threads) 0.88-0.93x at 1,000-2,000
# rows, 1.03x at 4,000, 0.91x at (1000, 784, 256). Outside the rule below
# nothing to gain, and some to lose (`split --shapes 1000x3000x104,
# 3000x784x104,2000x3000x1000,3000x784x1000,5000x784x1000`, both dtypes):
# 0.95-1.06x at 104 classes (a block's E of a hundred classes fits L2
# beside a partial sum that fits L3, and the split's panels of classes
# read X twice), 0.96-1.12x in chunks of 1,000-2,500 rows.
# So: chunks of at most _TILES_SPLIT_CHUNK_ROWS rows, at least
# _TILES_SPLIT_MIN_CLASSES classes, none left to the rows kernels' tiles
# (_kernels._outer.rest_classes), at least _SPLIT_MIN_FEATURES features a
# thread.
_TILES_SPLIT_MIN_CLASSES = 256
_TILES_SPLIT_CHUNK_ROWS = 512

# The per-chunk partial sums are reduced by a parallel kernel from this many
# bytes (all chunks together), by NumPy below. NumPy's G.sum(axis=0) runs on
# one thread, and its time grows with the thread count, the chunk count
# (BENCHMARKS.md, "Eleventh session"); below this size a parallel region
# costs more than it saves.
_PARALLEL_SUM_BYTES = 1 << 16

# From this many weights the tiles' padded copy of W (Wp) is a parallel pass
# (``_kernels._fused._pad_copy``), as the L2 term is from as many
# (``_penalty._KERNEL_FROM``): a parallel region costs more below.
_PARALLEL_COPY_FROM = _L2_KERNEL_FROM

# Bytes between two threads' partial sums (see DenseEngine._accumulators).
_PAD_BYTES = 128
# Whole-chunk blocks from partial sums of more than _G_CACHE_BYTES in
# float32 and _G_CACHE_BYTES_64 in float64 (see _MAX_ROWS_LARGE_G). Below,
# a partial sum stays in L2 beside a block of X (_L2_BYTES). In float64,
# blocks sized for L2 took 0.51-1.01x the time of whole chunks at 264-768
# KiB of n k on MKL (float64 (3000, 3000, 20): 7.3 ms against 14.5;
# 0.78-1.06x on SciPy's OpenBLAS) and level at 1.2 MiB; in float32 they took
# 0.84-1.04x on MKL (288-612 KiB) but 1.09-1.15x on SciPy's OpenBLAS
# (288-384 KiB) (BENCHMARKS.md, "Thirty-second session"; the 2-core Intel
# host, 2 MiB of L2 a core), so float32 keeps the bound of 256 KiB. The
# float64 gains came on chunks of 12-37 MB of X (0.42-0.92x with the rule
# below; 0.99-1.02x at 9.4 and 16 MB of rows of 784 features); on chunks of
# 0.8-3.1 MB the L2 blocks took 0.98-1.07x the time, so between the two
# bounds a float64 chunk of at most _CHUNK_X_BYTES of X stays whole.
_G_CACHE_BYTES = 1 << 18
_G_CACHE_BYTES_64 = 1 << 20
_CHUNK_X_BYTES = 1 << 23

# Narrow rows (at most _NARROW_FEATURES features) of many classes (from
# LANES_FROM), over weights of at most _NARROW_WEIGHTS entries: the block's
# logits, R x k, are most of what a block touches, and the fastest blocks
# kept X's block and the logits' within a budget of bytes together (64 KiB
# here; per host: _calibration.narrow_block_bytes): the largest power of
# two of rows that fits, at least _MIN_BLOCK_ROWS. Every block's two
# products also pack W and update G (n k entries each), which small blocks
# repeat more often; past about 32K weights that cost more than the
# smaller blocks saved. The bounds are empirical: block sizes 32 ... 1024
# timed on 14 shapes (n = 20 ... 200, k = 48 ... 3000; 2-core AVX-512
# host) put the best block at 32-128 rows on the narrow ones and at
# 256-1024 on (20000, 96, 400) float32 (1.5x apart) and (20000, 160, 200);
# BENCHMARKS.md, "Tenth session".
_NARROW_FEATURES = 128
_NARROW_WEIGHTS = 1 << 15
_MIN_BLOCK_ROWS = 32


# The GEMM strategy's kernels by variant (DenseEngine._gradient_variant):
# (the chunk function, the parallel kernel). Each is compiled when first used.
# The tiles' kernels with a rest of classes ("_rest", _outer.rest_classes)
# are kernels of their own: a shape without a rest does not compile the
# rest's code (_kernels._fused.no_rest_forward).
_GRADIENT_KERNELS = {
    "rows": (_rows_chunk, _loss_grad_rows),
    "gemm": (_gemm_chunk, _loss_grad_gemm),
    "gemm_lanes": (_gemm_chunk_lanes, _loss_grad_gemm_lanes),
    "gemm_t": (_gemm_t_chunk, _loss_grad_gemm_t),
    "gemm_tiles": (_tiles_chunk, _loss_grad_tiles),
    "gemm_tiles_rest": (_tiles_chunk_rest, _loss_grad_tiles_rest),
    "gemm_tiles_lanes": (_tiles_chunk_lanes, _loss_grad_tiles_lanes),
    "gemm_tiles_lanes_rest": (_tiles_chunk_lanes_rest, _loss_grad_tiles_lanes_rest),
}
# The Hessian products' tiles kernels by the same variant names.
_TILES_PRODUCT_KERNELS = {
    "gemm_tiles": (_hessp_tiles_chunk, _hessp_tiles),
    "gemm_tiles_rest": (_hessp_tiles_chunk_rest, _hessp_tiles_rest),
    "gemm_tiles_lanes": (_hessp_tiles_chunk_lanes, _hessp_tiles_lanes),
    "gemm_tiles_lanes_rest": (_hessp_tiles_chunk_lanes_rest, _hessp_tiles_lanes_rest),
}

# Float64 rows of at least this many features take the rows kernels
# compiled with 512-bit vectors (the marker _kernels._width.FLOAT64_512),
# on hosts with AVX-512 only: elsewhere the request is a no-op, and the
# marker would compile a second specialisation with the same code. Long
# rows gain from the wider vectors; on short ones the scalar remainder of
# each row and the tiles' horizontal sums weigh more, and 512-bit vectors
# ran slower below about 100 features (BENCHMARKS.md, "Eleventh session").
_WIDE_ROWS_FEATURES = 128


def rows_width(dtype: np.dtype, n: int) -> np.ndarray:
    """Return the vector-width marker of the rows kernels for rows of ``n`` features."""
    wide = WIDE_REGISTERS and dtype == np.float64 and n >= _WIDE_ROWS_FEATURES
    return FLOAT64_512 if wide else DEFAULT_WIDTH


# The GEMM strategy's gradient with transposed logits
# (_kernels._fused._loss_grad_gemm_t): its error pass runs along the rows,
# which pays where the products are cheap, on rows of few features.
# Measured against the row-wise kernel at m n k = 2e8 (2-core Intel host):
# 0.40-0.81x the time at n = 16 ... 64 in float32, 0.51-0.91x at n = 16
# and 32 in float64; at n = 100 it was 1.04-1.28x, the transposed products
# costing more than the error pass saved (BENCHMARKS.md, "Seventh
# session"). Those rows were of 2 and 10 classes. With more classes the
# row-wise error pass fills its vectors too: on float32 rows of 32-64
# features the transposed kernel took 0.64-0.97x the row-wise one's time
# up to 960 weights (n k), and from 992 weights 0.87-1.51x from run to run,
# each of the cells at 31 classes at 32 features, 25-31 at 40, 20-31 at 50
# and 16-31 at 64 reaching 1.15-1.51x in one run or more; float64 rows (at
# most 32 features) 0.54-1.02x (2-core Zen 4 host,
# `benchmarks/gradient_variants.py transposed`; BENCHMARKS.md, "Fortieth
# session"): rows of fewer than LANES_FROM classes, at most 256 bytes of
# features and 960 weights, until the GEMM strategy's blocks ran on the
# outer-product tiles there too (_TILES_ANY_SIZE): on a Zen 5 host that
# row-wise kernel took 0.40-0.96x the transposed one's time in float64 and
# 0.51-0.97x in float32 at every cell of n = 8 ... 64 and k = 2 ... 20
# (`gradient_variants.py transposed --ns 8,16,20,32,48,64 --ks 2,5,10,20
# --work 1e8`, "Sixtieth session"), so hosts with AVX-512 never transpose.
#
# On hosts without (2-core AMD Zen 3, AVX2; the same script) the transposed
# kernel took 0.58-0.76x the row-wise one's time in float32 at every cell
# of n = 32, 40, 50 and 64 and k = 10 ... 31 (0.64-0.76x at 992-1,984
# weights), in float64 0.60-0.96x at n = 16 and 32 ("Fifty-fourth
# session") and 0.80-0.99x at 40, 48 and 64 ("Fifty-fifth session"): rows
# of at most 64 features, either dtype, any number of weights. Wider rows
# were 0.78-0.99x in one hour (a scratch script timing the kernels alike)
# and 0.98-1.24x in the next (float32 rows of 80-512 features), 0.86-1.09x
# at 96 and 200 float64 features.
# Rows of LANES_FROM classes or more (whose row-wise kernel takes each
# row's maximum in lanes) transposed there too, float32 ones up to 80
# classes ("Fifty-fifth session").
#
# Those AVX2 measurements were against the row-wise kernel with BLAS's
# block products. Since the fifty-eighth session the row-wise kernel runs
# its products on the outer-product tiles there too (outer_tiles: every
# shape these rules take), and against that kernel (Zen 3 host, m n k about
# 1e8, `gradient_variants.py transposed --ns 8,16,20,32,48,64 --ks
# 2,3,5,10,16,20,31 --work 1e8`, and `--ns 2,4,6,8,12`; BENCHMARKS.md,
# "Seventy-third session") the transposed kernel took 0.98-1.91x its time
# in float32 and 0.88-2.14x in float64 from 16 features (above 1.0x in 34
# of 35 cells each), 0.89-1.33x and 0.81-1.30x at 8 and 12 (ties), at
# 32-80 float32 classes 0.88-1.47x; only on rows of at most
# _TRANSPOSED_FEATURES features less: 0.60-1.04x in float32, 0.67-1.27x in
# float64 (the gains at 2-5 classes, ties above).
_TRANSPOSED_FEATURES = 4


def transposed_logits(n: int, k: int, itemsize: int) -> bool:
    """Whether the GEMM gradient on rows of n features and k classes transposes the logits."""
    return not _TILES_ANY_SIZE and n <= _TRANSPOSED_FEATURES and k < LANES_FROM


# The GEMM strategy's gradient with both products by the outer-product
# tiles of _kernels._outer (vectors along the classes, no BLAS). On hosts
# without AVX-512, where the padded partial sum G (n kp entries) takes at
# most _TILES_G_BYTES, or at most _TILES_G_BYTES_FEW on rows of at most
# _TILES_FEW_CLASSES classes: on a Zen 3 host (2 threads, m n k = 1e8, n =
# 20 ... 3000, k = 10 ... 1000) they took 0.53-0.99x the time of BLAS's
# products in both dtypes there (1.05x at (20, 10) float32, where the rows
# strategy is faster still), and 1.07-1.33x on larger sums of more
# classes: (96, 1000) and (200, 1000) in both dtypes, (784, 300), float64
# (200, 300) and (3000, 100), with no block size doing better
# (BENCHMARKS.md, "Fifty-eighth session", `benchmarks/gradient_variants.py
# tiles`). On hosts with AVX-512 at any size (_TILES_ANY_SIZE): on a Zen 5
# host (the same grid; OpenBLAS runs its AVX2 kernels there) 0.45-0.96x
# BLAS's time wherever the variants differ, G up to 3.2 MB, and with 8-row
# tiles the Hessian products 0.40-0.57x (`gradient_variants.py tiles
# --products`, "Sixtieth session"); the Intel AVX-512 hosts of
# earlier sessions, whose OpenBLAS has AVX-512 kernels, were not measured.
# Blocks of _TILES_BLOCK_ROWS rows, half as many on rows of more than
# _TILES_SHORT_ROW bytes: whole gradients in float32 ran fastest at 48-96
# rows at n = 96 ... 200, 24-48 at n = 784 and 3000, 96-192 at n = 20
# (Zen 3). With AVX-512's 8-row tiles (_TILES_BLOCK_BYTES set) the most
# rows, from _TILES_WIDE_BLOCK_ROWS halved down to half _TILES_BLOCK_ROWS,
# whose block of X stays within _TILES_BLOCK_BYTES: each tile's loop over
# the block's rows (the backward product) runs longer. On the Zen 5 host
# (`gradient_variants.py tile_blocks`, "Sixtieth session") whole float32
# gradients took 0.89-1.00x the time of the rule above at 20-784 features,
# float64 ones 0.99-1.05x on a quiet host and 0.73-0.81x at 20-100
# features in an hour when another tenant loaded it. The Hessian
# products, whose blocks hold P and U (two rows of k a row), keep the rule
# above: blocks by the same rule at 320 KiB took 0.99-1.03x its time in
# float32, 0.97-1.12x in float64.
_TILES_ANY_SIZE = WIDE_REGISTERS
_TILES_G_BYTES = 256 << 10
_TILES_G_BYTES_FEW = 1 << 20
_TILES_FEW_CLASSES = 64
_TILES_BLOCK_ROWS = 96
_TILES_SHORT_ROW = 512
_TILES_WIDE_BLOCK_ROWS = 384
_TILES_BLOCK_BYTES: int | None = 160 << 10 if WIDE_REGISTERS else None
# Where a chunk's padded partial sum G takes _TILES_LARGE_G_BYTES or more
# (hosts with AVX-512), blocks of _TILES_LARGE_G_ROWS rows: each block's
# backward product reads and writes the whole of G (beside the other
# chunks' and W, out of L3), and 192-row blocks do that a quarter as often
# as 48-row ones; the backward product keeps each block's error within L2
# by panels of classes (_kernels._outer.backward_block). On the Zen 5 host
# (`gradient_variants.py big_g --rounds 5`, "Sixty-first session"), with
# the bound at 4 MiB: 0.89-0.92x the time at G of 11-69 MiB ((1000, 3000,
# 1000) float64, (300, 3000, 3000) both dtypes, (500, 1500, 1000) float64),
# 0.99-1.01x at 6-12 MiB otherwise, and 1.10x at (1000, 3000, 300) float64
# (7 MiB): the bound is 8 MiB (then 0.91-0.95x at 11-69 MiB in float64,
# 0.99x at 6-7 MiB, where both take 48 rows). The Hessian products keep
# their rule: by this one 0.98-1.02x its time at 11-69 MiB (`big_g
# --products`).
_TILES_LARGE_G_BYTES = 8 << 20
_TILES_LARGE_G_ROWS = 192


def outer_tiles(n: int, k: int, itemsize: int) -> bool:
    """Whether the GEMM gradient on rows of n features and k classes runs :mod:`._outer`'s tiles."""
    if _TILES_ANY_SIZE:
        return True
    g_bytes = n * padded_width(k, itemsize) * itemsize
    return g_bytes <= _TILES_G_BYTES or (k <= _TILES_FEW_CLASSES and g_bytes <= _TILES_G_BYTES_FEW)


def tiles_block_rows(n: int, itemsize: int, m: int, products: bool = False, k: int = 1) -> int:
    """Rows per block of the tiles' gradient (products: Hessian products) in a chunk of m rows.

    k: the classes (the gradient's rule for large partial sums).
    """
    if _TILES_BLOCK_BYTES is None or products:
        rows = _TILES_BLOCK_ROWS if n * itemsize <= _TILES_SHORT_ROW else _TILES_BLOCK_ROWS // 2
    elif n * padded_width(k, itemsize) * itemsize >= _TILES_LARGE_G_BYTES:
        rows = _TILES_LARGE_G_ROWS
    else:
        rows = _TILES_WIDE_BLOCK_ROWS
        while rows > _TILES_BLOCK_ROWS // 2 and rows * n * itemsize > _TILES_BLOCK_BYTES:
            rows //= 2
    return max(1, min(rows, m))


# The GEMM strategy's Hessian products with each block stored transposed
# (_kernels._hessp._hessp_gemm_t): as for the gradient's transposed logits,
# the per-row work (<p, u> and s = d p (u - <p, u>)) runs along the rows
# instead of over a few classes; each block's rows of P (stored row by row
# by the gradient pass) are copied in transposed. Against the row-wise
# product, P stored, m n k about 2e8 (2-core AMD Zen 3 host, AVX2;
# `benchmarks/gradient_variants.py products`, BENCHMARKS.md, "Fifty-sixth
# session"): float64 rows of 8-48 features and 2-10 classes 0.61-0.91x the
# time (two cells 1.05x and 1.06x), at 20 classes 0.90-1.10x, at 64
# features 0.82-0.94x; float32 rows of 8-32 features and 2-10 classes
# 0.43-0.92x, at 20 classes 0.89-1.09x. On 100,000-400,000 rows (P and X
# partly in the caches; a scratch script timing the two alike) float32
# rows of 24 and 32 features took 0.94-1.08x.
# Default fits (Newton) 0.82-0.92x the time in float64, 0.85-1.02x in
# float32. In blocks of the GEMM strategy's 1,024 rows (Uᵀ and Pᵀ out of
# L1: 160 KiB at k = 20) it took 1.9-2.5x the row-wise product's time
# from 20 classes: a block's Uᵀ and Pᵀ stay within
# _TRANSPOSED_PRODUCT_BYTES. Hosts with AVX-512 keep the row-wise product
# (not measured there).
# Those measurements were against the row-wise product by BLAS. Against
# the row-wise product on the outer-product tiles, which every shape here
# now takes (outer_tiles), the same script (`--ns 4,8,16,24,32,48 --ks
# 2,3,5,10 --work 1e8`, Zen 3, "Seventy-third session"): float32 0.51-0.93x
# the time at 4 and 8 features, 0.80-1.12x at 16, 0.89-1.32x at 24 and 32,
# 1.13-1.49x at 48; float64 0.54-1.13x at 4 and 8 features (1.08x and
# above only at 5-10 classes), 0.92-1.24x at 16, 1.13-1.64x from 24.
_TRANSPOSED_PRODUCT_FEATURES = {4: 16, 8: 8}  # by itemsize
_TRANSPOSED_PRODUCT_CLASSES = 10
_TRANSPOSED_PRODUCT_BYTES = 1 << 16  # Uᵀ and Pᵀ of a block at most


def transposed_products(n: int, k: int, itemsize: int) -> bool:
    """Whether the GEMM Hessian products on rows of n features, k classes transpose blocks."""
    return (not WIDE_REGISTERS and k <= _TRANSPOSED_PRODUCT_CLASSES
            and n <= _TRANSPOSED_PRODUCT_FEATURES[itemsize])


def transposed_product_rows(k: int, itemsize: int, rows: int) -> int:
    """Rows per block of the transposed products: at most ``rows``, Uᵀ and Pᵀ in the budget."""
    return min(rows, max(16, _TRANSPOSED_PRODUCT_BYTES // (2 * k * itemsize)))


# Scratch of engines made for one call (the function API's loss_and_grad
# and hessp, the Dask layer's block tasks) is kept between calls, per
# Python thread, up to this many bytes a thread: fresh per-thread partial
# sums and logit blocks meant page faults whenever the allocator had given
# their memory back to the system, and a call that writes n k per thread
# spent much of its time in them (1000 x 784 x 1000 float32, other work
# allocating between the calls: 0.72x the time, `benchmarks/versions.py`).
# One set per kind of pass ("gradient", "hessp"), replaced when the next
# call needs other shapes.
_KEPT_SCRATCH_BYTES = 64 << 20
_kept = threading.local()


def _chunks_total(parts: np.ndarray, k: int) -> np.ndarray:
    """Return the sum over chunks of padded per-chunk sums (chunks, k + pad): a fresh (k,) array."""
    return parts[0, :k].copy() if parts.shape[0] == 1 else parts.sum(axis=0)[:k]


# The kernels' 1 / (total weight) in the data's dtype, by (dtype, total):
# a NumPy scalar made once per value, as an unweighted call's total is its
# row count (after an idle pause making one took 10-15 microseconds of a
# small call; BENCHMARKS.md, "Forty-ninth session").
@functools.lru_cache(maxsize=64)
def _scale_of(dtype: np.dtype, total: float) -> np.floating:
    """Return ``dtype.type(1 / total)``, shared (NumPy scalars are immutable)."""
    return dtype.type(1.0 / total)


def _kept_buffers(key: tuple, make) -> tuple[np.ndarray, ...]:
    """Return the buffers kept for ``key`` on this thread, or ``make()`` them (and keep them)."""
    store = getattr(_kept, "buffers", None)
    if store is None:
        store = _kept.buffers = {}
    held = store.get(key[0])
    if held is not None and held[0] == key:
        return held[1]
    store.pop(key[0], None)  # the old set goes before the new one is made
    buf = make()
    if sum(b.nbytes for b in buf) <= _KEPT_SCRATCH_BYTES:
        store[key[0]] = (key, buf)
    return buf


def gemm_block_rows(n: int, itemsize: int, k: int = 1, chunk_rows: int = 0,
                    block_bytes: int = 1 << 16) -> int:
    """Rows per GEMM block.

    X's block in L2; for a large n k, a whole chunk of ``chunk_rows``; for
    narrow rows of many classes over few weights, X's block and the
    logits' within ``block_bytes``.
    """
    rows = int(min(1024, max(64, _L2_BYTES // max(1, n * itemsize))))
    if _whole_chunks(n, k, itemsize, chunk_rows):
        return max(rows, min(_MAX_ROWS_LARGE_G, chunk_rows))
    if narrow_blocks(n, k, itemsize):
        fit = block_bytes // ((n + k) * itemsize)
        rows = min(rows, max(_MIN_BLOCK_ROWS, 1 << max(0, fit.bit_length() - 1)))
    return rows


def _whole_chunks(n: int, k: int, itemsize: int, chunk_rows: int) -> bool:
    """Whether GEMM blocks hold whole chunks: partial sums too large for L2 beside a block of X."""
    g_bytes = n * k * itemsize
    if itemsize == 8 and g_bytes <= _G_CACHE_BYTES_64:
        return g_bytes > _G_CACHE_BYTES and chunk_rows * n * itemsize <= _CHUNK_X_BYTES
    return g_bytes > _G_CACHE_BYTES


def narrow_blocks(n: int, k: int, itemsize: int) -> bool:
    """Whether :func:`gemm_block_rows` sizes blocks by ``block_bytes`` (narrow rows, many k)."""
    # (n k <= _NARROW_WEIGHTS keeps G within _G_CACHE_BYTES in either dtype.)
    return k >= LANES_FROM and n <= _NARROW_FEATURES and n * k <= _NARROW_WEIGHTS


def split_features(m: int, n: int, k: int, itemsize: int, chunks: int) -> bool:
    """Whether the GEMM strategy's backward product is split by features (few rows, large n k)."""
    return (not _TILES_ANY_SIZE and k >= LANES_FROM and n * k * itemsize >= _SPLIT_G_BYTES
            and m <= _SPLIT_ROWS_PER_FEATURE * n and n >= _SPLIT_MIN_FEATURES * chunks)


def tiles_split(m: int, n: int, k: int, itemsize: int, chunks: int) -> bool:
    """Whether the tiles' gradient splits its backward product by features (few rows, many k)."""
    return (chunks > 1 and k >= max(LANES_FROM, _TILES_SPLIT_MIN_CLASSES)
            and m <= _TILES_SPLIT_CHUNK_ROWS * chunks and n >= _SPLIT_MIN_FEATURES * chunks
            and outer_tiles(n, k, itemsize) and rest_classes_for(k, n, itemsize) == 0)


def tiles_split_rows(k: int, itemsize: int, chunk_rows: int) -> int:
    """Rows per block of the tiles' split's first pass, in chunks of ``chunk_rows`` rows.

    _TILES_LARGE_G_ROWS (in whole cache lines of k entries): each block's
    error is stored, so the block size weighs only on the forward product,
    whose panels of features keep X's block and a strip of W in L2 (a
    prototype at 48 and 96 rows ran within 1 % of 192 at (1000, 3000,
    1000) float32).
    """
    return whole_rows(min(_TILES_LARGE_G_ROWS, chunk_rows), k, itemsize)


def choose_mode(X: np.ndarray, n_classes: int, budget: int = PROBA_BUDGET) -> str:
    """Return "cached" when P (m, k) fits ``budget`` bytes or is no larger than X."""
    p_bytes = X.shape[0] * n_classes * X.dtype.itemsize
    return "cached" if p_bytes <= max(budget, X.nbytes) else "recompute"


@functools.lru_cache(maxsize=256)
def _layout(m: int, n: int, k: int, dtype: np.dtype, strategy: str, serial: bool,
            chunks: int, block_bytes: int) -> tuple:
    """(GEMM block rows, rows width, rows blocks, split, tiles split, empty P).

    What an engine's launches take that follows from the shape, the dtype,
    the strategy, whether the call runs one chunk on the calling thread
    (``serial``), the chunk count and the GEMM blocks' budget alone. Kept:
    an engine of a shape seen before (the function API makes one per call)
    needs it again, and after an idle pause each of these Python calls
    costs microseconds of a small call (BENCHMARKS.md, "Forty-eighth
    session"). The empty P (0, k) is never written, so engines share it.
    """
    itemsize = dtype.itemsize
    rows = min(gemm_block_rows(n, itemsize, k, -(-m // chunks), block_bytes), m)
    split = strategy == "gemm" and not serial and split_features(m, n, k, itemsize, chunks)
    tiles = strategy == "gemm" and not serial and tiles_split(m, n, k, itemsize, chunks)
    return (rows, rows_width(dtype, n), rows_blocks(dtype), split, tiles,
            np.empty((0, k), dtype=dtype))


class DenseEngine:
    """The dense kernels on one data set, in one strategy ("rows" or "gemm").

    ``warm``: the calls come in a solver's loop, back to back, so the
    parallel kernels pay off from a smaller size (``_launch.serial_call``);
    so do those of an engine made where the previous calls came in a loop
    (:func:`fastsoftmax._launch.calls_in_a_loop`).
    ``keep_scratch``: the engine serves one call; its scratch buffers come
    from (and stay in) the calling thread's kept set (:data:`_KEPT_SCRATCH_BYTES`).
    Nothing a method returns is a view of them. ``block_bytes``: the GEMM
    blocks' budget for narrow rows (:func:`gemm_block_rows`); None reads
    this host's (:func:`fastsoftmax._calibration.narrow_block_bytes`).
    ``serial``: whether the calls run on the calling thread, as the caller
    decided (:func:`fastsoftmax._launch.serial_call`, which counts the
    call); None decides here. An engine serves any data of the shape and
    dtype it was made for (:meth:`bind`).
    """

    def __init__(self, data, strategy: str, mode: str | None = None, warm: bool = False,
                 keep_scratch: bool = False, block_bytes: int | None = None,
                 serial: bool | None = None):
        if strategy not in ("rows", "gemm"):
            raise ValueError(f"strategy must be 'rows' or 'gemm', got {strategy!r}")
        self.data = data
        self.strategy = strategy
        X = data.X
        m, n = X.shape
        self.k = data.n_classes
        self.dtype = X.dtype
        if strategy == "gemm":
            load_kernel_blas()  # before any kernel multiplies (_threads.load_kernel_blas)
            self.use_blas()
        self.mode = choose_mode(X, self.k) if mode is None else mode
        if self.mode not in ("cached", "recompute"):
            raise ValueError(f"mode must be 'cached' or 'recompute', got {self.mode!r}")
        self._scale = _scale_of(self.dtype, data.total_weight)
        self._work = launch_work(m, n, self.k)
        # A call of the function API in the caller's loop counts as warm
        # (_launch.calls_in_a_loop).
        self._serial = serial_call(self._work, warm) if serial is None else serial
        chunks = 1 if self._serial else n_chunks(m)
        if block_bytes is None:
            # Only narrow GEMM blocks are sized by it (gemm_block_rows); a
            # large problem on them without the host's budget times it first.
            block_bytes = (narrow_block_bytes(self.dtype, work=m * n * self.k)
                           if strategy == "gemm" and narrow_blocks(n, self.k, self.dtype.itemsize)
                           else NARROW_BLOCK_BYTES)
        (self._rows, self._width, self._blocks, self._split, self._tiles_split,
         self.no_proba) = _layout(
            m, n, self.k, self.dtype, strategy, self._serial, chunks, block_bytes)
        self._buffers: dict[tuple[str, int], tuple[np.ndarray, ...]] = {}
        self._keep_scratch = keep_scratch

    def use_blas(self) -> None:
        """Point the GEMM kernels' products at this host's BLAS for the dtype.

        A large problem without the choice times it first where its products
        weigh (rows of LANES_FROM classes or more, on the kernel the fit
        uses: nothing else compiled for it).
        """
        m, n = self.data.X.shape
        use_chosen(self.dtype, work=m * n * self.k if self.k >= LANES_FROM else 0)

    def bind(self, data) -> None:
        """Run the next calls on ``data``: of the shape, classes and dtype the engine was made for.

        None lets go of the last data (the engine keeps no caller's array
        between calls of the function API; :func:`fastsoftmax._objective.call_objective`).
        """
        self.data = data
        if data is not None:
            self._scale = _scale_of(self.dtype, data.total_weight)

    def describe(self) -> dict:
        """Return what this engine runs, in plain values (``fastsoftmax.show_config``).

        "strategy"; "kernel" (the gradient's variant: "rows", "gemm",
        "gemm_lanes" (the softmax error in vector sweeps), "gemm_t"
        (transposed logits), "gemm_tiles" / "gemm_tiles_lanes" (the block
        products by the tiles of ``_kernels._outer``, not BLAS; "_rest"
        added where the classes past whole vectors take the rows kernels'
        tiles) or
        "gemm_split" (the backward product split by features) or
        "gemm_tiles_split" (the tiles' split by features));
        "products" (the Hessian products' kernel, of the same names:
        "gemm_t" stores each block transposed); "threads" (how many threads
        the pass runs on, at the thread count in force: 1 is the calling
        thread alone); "mode" (whether Hessian products read the stored
        probabilities: "cached", or recompute them); for the rows strategy
        "reads_ahead" (X's rows prefetched ahead of the tiles); for GEMM
        "block_rows" (the gradient's rows per block) and "blas" (the
        library its BLAS products call).
        """
        m, n = self.data.X.shape
        out = {"strategy": self.strategy, "kernel": self._gradient_variant(),
               "products": self._product_variant(), "threads": self._chunks(),
               "mode": self.mode}
        if self.strategy == "rows":
            out["reads_ahead"] = bool(reads_ahead.py_func(m, n, self.dtype.itemsize))
        else:
            variant = self._gradient_variant()
            chunk_rows = -(-m // self._chunks())
            if variant == "gemm_tiles_split":
                out["block_rows"] = tiles_split_rows(self.k, self.dtype.itemsize, chunk_rows)
            elif variant.startswith("gemm_tiles"):
                out["block_rows"] = tiles_block_rows(n, self.dtype.itemsize, chunk_rows, k=self.k)
            else:
                out["block_rows"] = int(self._rows)
            out["blas"] = in_use(self.dtype)
        return out

    # ------------------------------------------------------------ helpers
    @property
    def uses_blas(self) -> bool:
        """Whether the kernels call BLAS (the GEMM strategy's; the rows kernels do not)."""
        return self.strategy == "gemm"

    def _chunks(self) -> int:
        return 1 if self._serial else n_chunks(self.data.n_rows)

    def _buffer(self, what: str, chunks: int, make) -> tuple[np.ndarray, ...]:
        if self._keep_scratch:
            # Looked up on every call, never cached on the engine: the set
            # belongs to the calling thread. The key holds everything the
            # buffers' shapes depend on.
            key = (what, chunks, self.strategy, self._gradient_variant(), self.data.n_rows,
                   self.data.n_features, self.k, self.dtype, self._rows)
            return _kept_buffers(key, lambda: make(chunks))
        buf = self._buffers.get((what, chunks))
        if buf is None:
            buf = self._buffers[(what, chunks)] = make(chunks)
        return buf

    def _weights(self, coef: np.ndarray) -> np.ndarray:
        """Return the kernels' weights: coef (rows) or W = coefᵀ (gemm), C-contiguous.

        ``coef`` (k, n) in any memory order. The rows kernels get a copy
        whose every row starts aligned (``_launch.aligned_rows``: (k, n')
        zero-padded; O(n k) next to the pass's O(m n k)); the transposed
        view of a C-contiguous (n, k) W (the public layout) goes to the GEMM
        kernel without a copy. The rows kernels' copy is written into a
        buffer kept as the scratch is (:meth:`_buffer`), allocated, aligned
        and padded once: a small call after an idle pause spent 40-60
        microseconds allocating and aligning a new one (BENCHMARKS.md,
        "Forty-ninth session").
        """
        if self.strategy == "rows":
            buffer, = self._buffer("weights", 1, lambda _: (aligned_rows(coef),))
            return aligned_rows(coef, out=buffer)
        return np.ascontiguousarray(coef.T)

    def _padded(self, W: np.ndarray, what: str) -> np.ndarray:
        """Return W (n, k), any memory order, as the tiles' Wp (n, kp): zeros to whole vectors.

        Where k is already a whole number of vectors and W is C-contiguous
        (``loss_and_grad``'s W), W itself: the tiles load its rows
        unaligned, where a copy into an aligned buffer cost more (a 24 MB
        pass each call: at (1000, 3000, 1000) float64 the gradient took
        0.97x the time reading W unaligned, BENCHMARKS.md, "Sixty-second
        session"). Otherwise written into the buffer ``what``, kept as the
        scratch is (its padding, zeroed once, never written): a C-contiguous
        W from :data:`_PARALLEL_COPY_FROM` entries by a parallel pass
        (``_kernels._fused._pad_copy``); the transpose of the solvers' (k,
        n) coef by NumPy's strided copy, one pass where a transposing copy
        and then the padding copy were two.
        """
        n, k = W.shape
        kp = padded_width(k, self.dtype.itemsize)
        if (kp == k and W.flags.c_contiguous and W.flags.writeable and W.flags.aligned
                and W.dtype == self.dtype):
            return W
        Wp, = self._buffer(what, 1, lambda _: (np.zeros((n, kp), dtype=self.dtype),))
        if (W.size >= _PARALLEL_COPY_FROM and not self._serial and W.flags.c_contiguous
                and W.dtype == self.dtype):
            _pad_copy(W, Wp)
        else:
            Wp[:, :k] = W
        return Wp

    def _to_coef(self, G: np.ndarray, W: np.ndarray,
                 alpha: float = 0.0) -> tuple[np.ndarray, float]:
        """Sum the per-chunk parts, add alpha W; return them in coef layout (k, n), and Σ W².

        ``W``: the kernels' weights (or direction) whose rows line up with
        G's: (k, n') for the rows strategy, (n, k) or the tiles' (n, kp) for
        the GEMM strategy; its first columns are coef's entries. The sum is
        a fresh array; the GEMM strategy's is (n, k), and its transposed view
        is returned (Fortran-ordered), not a copy: a caller that wants (n, k)
        C-contiguous gets it back by transposing, without a copy either.
        The L2 term and the sum of squares (float64, by rows; 0.0 where alpha
        is 0) come in the same pass as the sum (``_kernels._fused._sum_chunks``,
        the chunks added in NumPy's order): in parallel from
        :data:`_PARALLEL_SUM_BYTES` of partial sums over several chunks, or
        from ``_penalty._KERNEL_FROM`` weights, else on the calling thread.
        """
        rows = self.strategy == "rows"
        # The columns in use: the rows strategy's rows are padded to n' >= n,
        # the tiles' to kp >= k (the padding is not read).
        cols = self.data.n_features if rows else self.k
        chunks, a = G.shape[0], G.shape[1]
        if chunks == 1 and not alpha:  # one chunk's sums are the total
            out = G[0, :, :cols].copy()
            return (out if rows else out.T), 0.0
        out = np.empty((a, cols), dtype=G.dtype)
        # Each row's squares, summed here: the same number whatever the
        # threads (the L2 term's pass summed per thread before).
        squares = np.empty(a if alpha else 0)
        alpha_ = G.dtype.type(alpha)
        if ((chunks > 1 and G.nbytes >= _PARALLEL_SUM_BYTES)
                or (alpha and out.size >= _L2_KERNEL_FROM)):
            _sum_chunks(G, W, alpha_, out, squares, n_chunks(a))
        else:
            _sum_chunks_one(G, W, alpha_, out, squares)
        return (out if rows else out.T), float(squares.sum())

    def _accumulators(self, chunks: int, width: int | None = None) -> tuple[np.ndarray, ...]:
        """Per-chunk partial sums: (chunks, k, n + pad) or (chunks, n, k), and (chunks, k + pad).

        Each thread adds into its own chunk's sums, the intercept's for every
        row and the rows strategy's G every four rows. Unpadded, chunk c's
        sums and chunk c + 1's share cache lines whenever k (or k n) is
        small, and every add then moves the line between cores: that made
        the parallel kernel at 2 threads slower than at 1 on (300000, 20, 2)
        (BENCHMARKS.md, "Threads' partial sums on shared cache lines").
        ``pad`` entries (128 bytes: a pair of lines, which Intel's
        prefetcher fetches together) keep them apart;
        the kernels only touch the first n (or k) entries of a row. Every
        row of the rows strategy's G starts aligned (``_launch.aligned_row``),
        as its tiles load and store it a vector at a time. The GEMM
        strategy's G is written by BLAS, which takes it C-contiguous: not
        padded, unless ``width`` (the tiles' kp) asks for wider rows.
        """
        n, k, dt = self.data.n_features, self.k, self.dtype
        pad = _PAD_BYTES // dt.itemsize
        shape = ((chunks, k, aligned_row(n, dt.itemsize, _PAD_BYTES)) if self.strategy == "rows"
                 else (chunks, n, k if width is None else width))
        return aligned_empty(shape, dt), np.empty((chunks, k + pad), dtype=dt)

    def _row_scratch(self, chunks: int, rows: int) -> np.ndarray:
        """Return the rows kernels' per-chunk scratch rows, (chunks, rows + pad, k).

        The kernels use the first ``rows`` rows (a few rows of k logits,
        rewritten every four data rows): the padding rows keep two chunks'
        scratch out of each other's cache lines, as in :meth:`_accumulators`.
        """
        k, dt = self.k, self.dtype
        pad = -(-_PAD_BYTES // (k * dt.itemsize))
        return np.empty((chunks, rows + pad, k), dtype=dt)

    def _flat_scratch(self, chunks: int, length: int) -> np.ndarray:
        """Return (chunks, length + pad) scratch, each row padded as by :meth:`_row_scratch`."""
        pad = -(-_PAD_BYTES // self.dtype.itemsize)
        return np.empty((chunks, length + pad), dtype=self.dtype)

    def proba_buffer(self) -> np.ndarray:
        """Where a gradient pass stores P for later products: (m, k), or (0, k) to recompute."""
        if self.mode == "cached":  # (aligned: the products read its rows in vectors)
            return aligned_empty((self.data.n_rows, self.k), self.dtype)
        return self.no_proba

    def _gradient_variant(self) -> str:
        """Return the gradient kernel: a key of :data:`_GRADIENT_KERNELS`, or a split's.

        "gemm_split" (BLAS's products) or "gemm_tiles_split" (the tiles').
        """
        if self.strategy == "rows":
            return "rows"
        if self._tiles_split:
            return "gemm_tiles_split"
        if self._split:  # (only rows of LANES_FROM classes or more split)
            return "gemm_split"
        if transposed_logits(self.data.n_features, self.k, self.dtype.itemsize):
            return "gemm_t"
        return self._row_wise()

    def _row_wise(self) -> str:
        """Return the GEMM strategy's row-wise kernels: "gemm" or "gemm_tiles", "_lanes" added.

        Their block products by BLAS or by the tiles (:func:`outer_tiles`);
        from LANES_FROM classes each row's maximum in vector sweeps; on the
        tiles, "_rest" where classes past whole vectors go to the rows
        kernels' tiles (``_outer.rest_classes``).
        """
        n, k, itemsize = self.data.n_features, self.k, self.dtype.itemsize
        lanes = "_lanes" if k >= LANES_FROM else ""
        if outer_tiles(n, k, itemsize):
            return "gemm_tiles" + lanes + ("_rest" if rest_classes_for(k, n, itemsize) else "")
        return "gemm" + lanes

    def _product_variant(self) -> str:
        """Return the Hessian products' kernel: as :meth:`_gradient_variant`'s names.

        "rows", "gemm_split", "gemm_t" (:func:`transposed_products`),
        "gemm_tiles(_lanes)" (:func:`outer_tiles`), "gemm_lanes" or "gemm".
        """
        if self.strategy == "rows":
            return "rows"
        if self._split:
            return "gemm_split"
        if transposed_products(self.data.n_features, self.k, self.dtype.itemsize):
            return "gemm_t"
        return self._row_wise()

    # ------------------------------------------------------------ launches
    def gradient(self, coef, bias, P=None, alpha=0.0):
        """(J, its coef gradient in coef layout, intercept gradient), storing P.

        J = Σ w_i CE_i / Σw + alpha/2 ||coef||² (the L2 term after the pass:
        with the chunks' sum, :meth:`_to_coef`, or for the split pass by
        :func:`fastsoftmax._penalty.penalize`). Raises ValueError naming the
        first row whose logits are not finite.
        """
        data = self.data
        variant = self._gradient_variant()
        P = self.no_proba if P is None else P
        weights = self._kernel_weights(variant, coef)
        if variant == "gemm_split":
            args, (G, gb, loss, bad_row) = self._gradient_split_args(weights, bias, P)
            _loss_grad_gemm_split(*args)
            self._check_rows(bad_row)
        elif variant == "gemm_tiles_split":
            args, (g, gb, loss, bad_row) = self._tiles_split_args(weights, bias, P)
            _loss_grad_tiles_split(*args)
            self._check_rows(bad_row)
        else:
            args, (g, gb, loss, bad_row) = self._gradient_args(variant, weights, bias, P)
            self._run(*_GRADIENT_KERNELS[variant], args)
            self._check_rows(bad_row)
        # One chunk's term is the sum (item: no NumPy reduction nor scalar).
        value = (loss.item(0) if loss.shape[0] == 1 else float(loss.sum())) / data.total_weight
        if variant == "gemm_split":
            # The split pass's one (n, k) sum and W, in one memory order.
            value = penalize(value, G, weights, alpha)
            grad = G.T
        else:
            grad, squares = self._to_coef(g, weights, alpha)
            value += 0.5 * alpha * squares  # Python floats: an overflow is inf
        call_ended(not self._serial)
        return value, grad, _chunks_total(gb, self.k)

    def _kernel_weights(self, variant: str, coef: np.ndarray) -> np.ndarray:
        """Return the weights kernel ``variant`` takes: the tiles' Wp, else :meth:`_weights`.

        The tiles' Wp straight from coef's transposed view, in whatever
        memory order: one copy (or none, :meth:`_padded`), not a transposing
        copy and then the padding one.
        """
        if variant.startswith("gemm_tiles"):
            return self._padded(coef.T, "padded weights")
        return self._weights(coef)

    def _check_rows(self, bad_row: np.ndarray) -> None:
        """Raise ValueError naming the first row a pass found with non-finite logits."""
        row = first_bad(bad_row)
        if row >= 0:
            from ._objective import logits_error

            raise logits_error(row, self.dtype)

    def _gradient_args(self, variant: str, weights, bias, P) -> tuple[tuple, tuple]:
        """(arguments, outputs) of ``_GRADIENT_KERNELS[variant]``'s kernel.

        The arguments are its chunk function's too, less the chunk index;
        the outputs, which the launch writes per chunk: the partial sums g
        and gb, the loss terms and the first bad rows.
        """
        data = self.data
        dt = self.dtype

        tiles = variant.startswith("gemm_tiles")

        def make(c):
            # The tiles' G padded to whole vectors of classes (kp).
            g, gb = self._accumulators(c, padded_width(self.k, dt.itemsize) if tiles else None)
            if variant == "rows":
                scratch: tuple[np.ndarray, ...] = (
                    self._flat_scratch(c, rows_scratch_length(self.k)),)
            elif variant == "gemm_t":  # Zᵀ (k R) and two rows of R
                scratch = (np.empty((c, (self.k + 2) * self._rows), dtype=dt),)
            elif tiles:
                # A block's logits, the rows its last vectors run on into,
                # and below LANES_FROM classes the block transposed.
                # Every block from a cache line on (_outer.LINE_BYTES): rows
                # in whole lines, as the spare rows and the rest's are.
                rows = whole_rows(tiles_block_rows(data.n_features, dt.itemsize,
                                                   -(-data.n_rows // c), k=self.k),
                                  self.k, dt.itemsize)
                # The rest's W and G in the last rows (_fused._tiles_body).
                rows = ((2 * rows if self.k < LANES_FROM else rows)
                        + spare_rows_for(self.k, dt.itemsize)
                        + rest_rows_for(self.k, data.n_features, dt.itemsize, 2))
                scratch = (aligned_zeros((c, rows, self.k), dt),)
            else:
                scratch = (np.empty((c, self._rows, self.k), dtype=dt),)
            return (g, gb, np.empty(c, dtype=np.float64), np.empty(c, dtype=np.int64),
                    *scratch)

        g, gb, loss, bad_row, *scratch = self._buffer("gradient", self._chunks(), make)
        args = (data.X, *data.kernel_targets(), self._scale, weights, bias,
                g, gb, loss, bad_row, *scratch, P)
        if variant == "rows":
            args = (*args, self._width, self._blocks)
        return args, (g, gb, loss, bad_row)

    def _gradient_split_args(self, weights, bias, P) -> tuple[tuple, tuple]:
        """(arguments, outputs) of :func:`~._kernels._fused._loss_grad_gemm_split`.

        The outputs: G (n, k), and per chunk gb, the loss terms and the
        first bad rows.
        """
        data = self.data
        dt = self.dtype
        k = self.k

        def make(c):
            pad = _PAD_BYTES // dt.itemsize
            return (np.empty((c, k + pad), dtype=dt), np.empty(c, dtype=np.float64),
                    np.empty(c, dtype=np.int64), np.empty((data.n_rows, k), dtype=dt))

        gb, loss, bad_row, E = self._buffer("gradient", self._chunks(), make)
        G = np.empty((data.n_features, k), dtype=dt)
        args = (data.X, *data.kernel_targets(), self._scale, weights, bias, G, gb, loss,
                bad_row, E, self._rows, P)
        return args, (G, gb, loss, bad_row)

    def _tiles_split_args(self, weights, bias, P) -> tuple[tuple, tuple]:
        """(arguments, outputs) of :func:`~._kernels._fused._loss_grad_tiles_split`.

        The outputs: G (1, n, kp), one partial sum as :meth:`_to_coef`
        takes it, and per chunk gb, the loss terms and the first bad rows.
        Each chunk's part of E starts on a cache line (its rows, as the
        blocks', in whole lines) and holds the spare rows its last row's
        vector runs on into.
        """
        data = self.data
        dt = self.dtype
        k, n, size = self.k, data.n_features, dt.itemsize
        chunks = self._chunks()
        chunk_rows = -(-data.n_rows // chunks)

        def make(c):
            pad = _PAD_BYTES // size
            rows = whole_rows(chunk_rows, k, size) + spare_rows_for(k, size)
            return (aligned_empty((1, n, padded_width(k, size)), dt),
                    np.empty((c, k + pad), dtype=dt), np.empty(c, dtype=np.float64),
                    np.empty(c, dtype=np.int64), aligned_zeros((c, rows, k), dt))

        g, gb, loss, bad_row, E = self._buffer("gradient", chunks, make)
        R = tiles_split_rows(k, size, chunk_rows)
        args = (data.X, *data.kernel_targets(), self._scale, weights, bias, g, gb, loss,
                bad_row, E, R, P)
        return args, (g, gb, loss, bad_row)

    def hessp(self, coef, bias, P, V, cv, alpha=0.0, scale=1.0, out=None):
        """Return H (scale V, scale cv): (HV in coef layout, Hc), HV with its L2 term.

        ``out`` (k, n): HV is written there too. Directions here have n k
        entries, small next to X: the scale and the L2 term are NumPy
        operations on them.
        """
        dt = self.dtype
        if scale != 1.0:
            V = V * dt.type(scale)
            cv = cv * dt.type(scale)
        if self._product_variant() == "gemm_split":
            args, G, gc = self._hessp_split_args(coef, bias, P, V, cv)
            _hessp_gemm_split(*args)
            HV = G.T
            if alpha:
                add_l2(HV, V, alpha)
        else:
            chunk_fn, kernel, args, G, gc, direction = self._hessp_call(coef, bias, P, V, cv)
            self._run(chunk_fn, kernel, args)
            HV, _ = self._to_coef(G, direction, alpha)
        if out is not None:
            out[...] = HV
            HV = out
        call_ended(not self._serial)
        return HV, _chunks_total(gc, self.k)

    def _hessp_call(self, coef, bias, P, V, cv):
        """(chunk function, kernel, arguments, G, gc, direction) of H (V, cv) without the L2 term.

        The rows or GEMM kernels (not the split pass, :meth:`_hessp_split_args`);
        G and gc are the per-chunk sums the launch writes, ``direction`` the
        kernel's copy (or view) of V whose rows line up with G's.
        """
        dt = self.dtype
        chunks = self._chunks()
        if self.strategy == "rows":
            def make(c):
                return (*self._accumulators(c), self._row_scratch(c, HESSP_SCRATCH_ROWS))
            G, gc, scratch = self._buffer("hessp", chunks, make)
            Vr = aligned_rows(V)
            args = (self.data.X, P, *self._weight_args(), self._weights(coef), bias,
                    Vr, cv, G, gc, scratch, self._width, self._blocks, HESSP_MICRO)
            return _hessp_rows_chunk, _hessp_rows, args, G, gc, Vr

        variant = self._product_variant()
        transposed = variant == "gemm_t"
        tiles = variant.startswith("gemm_tiles")

        def make_gemm(c):
            if tiles:
                # Padded G; blocks of P and of U, each with its spare rows
                # (each from a cache line on, as the gradient's), then the
                # rest's three arrays (_hessp._hessp_tiles_body).
                G, gc = self._accumulators(c, padded_width(self.k, dt.itemsize))
                rows = whole_rows(tiles_block_rows(self.data.n_features, dt.itemsize,
                                                   -(-self.data.n_rows // c), products=True),
                                  self.k, dt.itemsize)
                rows = (2 * (rows + spare_rows_for(self.k, dt.itemsize))
                        + rest_rows_for(self.k, self.data.n_features, dt.itemsize, 3))
                return G, gc, aligned_zeros((c, rows, self.k), dt)
            G, gc = self._accumulators(c)
            if transposed:  # Uᵀ and Pᵀ (k R each) and two rows of R
                rows = transposed_product_rows(self.k, dt.itemsize, self._rows)
                return G, gc, np.empty((c, (2 * self.k + 2) * rows), dtype=dt)
            return G, gc, np.empty((c, 2 * self._rows, self.k), dtype=dt)
        G, gc, scratch = self._buffer("hessp_t" if transposed else "hessp", chunks, make_gemm)
        if tiles:  # each padded from the transposed view in one copy (or none)
            W, Vt = self._padded(coef.T, "padded weights"), self._padded(V.T, "padded direction")
        else:
            W, Vt = self._weights(coef), np.ascontiguousarray(V.T)
        args = (self.data.X, P, *self._weight_args(), W, bias, Vt, cv, G, gc, scratch)
        if transposed:
            kernels = _hessp_gemm_t_chunk, _hessp_gemm_t
        elif tiles:
            kernels = _TILES_PRODUCT_KERNELS[variant]
        elif self.k >= LANES_FROM:
            kernels = _hessp_gemm_chunk_lanes, _hessp_gemm_lanes
        else:
            kernels = _hessp_gemm_chunk, _hessp_gemm
        return *kernels, args, G, gc, Vt

    def _hessp_split_args(self, coef, bias, P, V, cv):
        """(arguments, G (n, k), gc) of :func:`~._kernels._hessp._hessp_gemm_split`: H (V, cv)."""
        dt, k = self.dtype, self.k

        def make(c):
            pad = _PAD_BYTES // dt.itemsize
            return (np.empty((c, k + pad), dtype=dt), np.empty((self.data.n_rows, k), dtype=dt),
                    np.empty((c, self._rows, k), dtype=dt))

        gc, S, scratch = self._buffer("hessp", self._chunks(), make)
        G = np.empty((self.data.n_features, k), dtype=dt)
        args = (self.data.X, P, *self._weight_args(), self._weights(coef), bias,
                np.ascontiguousarray(V.T), cv, G, gc, S, scratch)
        return args, G, gc

    def hessp_kernels(self) -> list[tuple[Any, tuple]]:
        """[(kernel, argument types)]: what this engine's first Hessian product compiles.

        For :mod:`fastsoftmax._side_compile`, before the fit's first
        gradient: the types of the arguments :meth:`hessp` will pass, from
        the same code with zero weights and directions (their shapes and
        layouts are the fit's; X, the targets and the weights are the
        data's own, P's type is that of :meth:`proba_buffer`'s). The launch
        is the engine's: the split pass, the parallel kernel, or for one
        chunk its chunk function (:func:`~._launch.run_one_chunk`).
        """
        k, n, dt = self.k, self.data.n_features, self.dtype
        coef, V = np.zeros((k, n), dt), np.zeros((k, n), dt)
        bias, cv = np.zeros(k, dt), np.zeros(k, dt)
        kernel: Any
        if self._product_variant() == "gemm_split":
            kernel = _hessp_gemm_split
            args = self._hessp_split_args(coef, bias, self.no_proba, V, cv)[0]
        else:
            chunk_fn, kernel, args, *_ = self._hessp_call(coef, bias, self.no_proba, V, cv)
            if self._serial:
                kernel, args = chunk_fn, (0, *args)
        return [(kernel, tuple(kernel.typeof_pyval(a) for a in args))]

    def gradient_kernels(self) -> list[tuple[Any, tuple]]:
        """[(kernel, argument types)]: what this engine's first gradient compiles.

        As :meth:`hessp_kernels`, for :meth:`gradient` (P not stored; a
        stored P has the same type).
        """
        k, n, dt = self.k, self.data.n_features, self.dtype
        variant = self._gradient_variant()
        weights, bias = self._kernel_weights(variant, np.zeros((k, n), dt)), np.zeros(k, dt)
        kernel: Any
        if variant == "gemm_split":
            kernel = _loss_grad_gemm_split
            args = self._gradient_split_args(weights, bias, self.no_proba)[0]
        elif variant == "gemm_tiles_split":
            kernel = _loss_grad_tiles_split
            args = self._tiles_split_args(weights, bias, self.no_proba)[0]
        else:
            chunk_fn, kernel = _GRADIENT_KERNELS[variant]
            args = self._gradient_args(variant, weights, bias, self.no_proba)[0]
            if self._serial:
                kernel, args = chunk_fn, (0, *args)
        return [(kernel, tuple(kernel.typeof_pyval(a) for a in args))]

    def _run(self, chunk_fn, kernel, args) -> None:
        """One chunk on this thread (serial), or the parallel kernel."""
        if self._serial:
            run_one_chunk(chunk_fn, args)
        else:
            kernel(*args)

    def _weight_args(self):
        data = self.data
        return data.sample_weight, data.weighted, self._scale
