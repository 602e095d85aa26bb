"""The dense kernel strategy and block size, chosen per host and remembered ("wisdom").

Two kernels compute the same fused gradient: "rows" (register-blocked
tiles, weights (k, n)) and "gemm" (BLAS on row blocks). Which is faster
depends on the shape and on the machine: the vector width, the cache sizes
and the BLAS library. :func:`calibrate` times both on cells of a grid of
shapes and writes the winners to a small JSON file, as FFTW keeps its
wisdom; :func:`strategy` looks a shape up there (the ratio of the two
times interpolated in log n, log k between the cells around it, or the
nearest cell's alone while those are not all timed), and falls back to
a fixed rule for a cell not timed yet. Each cell is timed with its X
read back to back (in the caches where it fits) and with X from memory
(:data:`COLD_X_BYTES`), and a shape's X size weighs the two. A cell whose
own X the rows kernels do not read ahead, but a larger one of its rows
they would, is timed on such an X too, for shapes read ahead
(:func:`ahead_cell`).
The same calibration times the GEMM strategy's block size for narrow rows
of many classes (:func:`narrow_block_bytes`) and, where the process holds
more than one BLAS library the kernels can call, which of them multiplies
faster for each dtype (:func:`blas_library`, :mod:`._blas_choice`).

Where the file lives: ``$FASTSOFTMAX_CACHE_DIR``, else beside Numba's cache
(``$NUMBA_CACHE_DIR/fastsoftmax``), else ``~/.cache/fastsoftmax``. Its name
carries the host (CPU model, core count), the versions of Numba, SciPy and
NumPy (whose BLAS libraries the GEMM kernels call) and of the ``mkl`` wheel
where one is installed (:mod:`._blas_choice`), a digest of the kernels'
source and the file's layout, so a new machine, library or kernel
calibrates afresh.
``FASTSOFTMAX_STRATEGY`` overrides everything: "rows" or "gemm" for every
shape, "fixed" for the fixed rule (no wisdom read, no calibration: the
choice, and so the rounding of results, is the same on every machine).

Calibration runs by itself, lazily, a few cells at a time: the first time
a problem of at least :data:`AUTO_WORK` multiply-adds meets a cell (dtype,
n, k) of no wisdom, that cell and the others around the shape that it is
interpolated between (up to four) are timed, up to a second or so each
once both strategies' kernels are compiled. On an empty Numba cache the
kernels of the strategy the fit would not have used are compiled for it
(seconds; a second process compiles the GEMM strategy's meanwhile, and
a Newton fit's Hessian products: :func:`_compile_aside`); timing the whole
grid at once compiles every variant of both, most of a minute per dtype
(BENCHMARKS.md, "Thirteenth session"), which is why it is lazy.
``fastsoftmax bench --calibrate`` times every cell ahead of time, and
small problems never wait for a calibration.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import platform
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ._kernels._common import LANES_FROM
from ._kernels._config import WIDE_REGISTERS
from ._settings import env_value

# The fixed rule, used where this host has no wisdom for a shape: every
# call below AUTO_WORK multiply-adds until ``fastsoftmax bench --calibrate``
# has run or a large problem has timed its cells, so most of what a user
# runs. The rows kernels for fewer than FIXED_K classes on rows of at least
# FIXED_N features and FIXED_FEATURES_PER_CLASS features a class, GEMM
# blocks otherwise. From FIXED_K = LANES_FROM classes on, the GEMM kernels
# take each row's softmax error in vector sweeps, and they won from there
# at up to 100 features by 1.3-1.6x, while the rows kernels still won at
# 24 classes (1.2x in float32, level in float64); at 784 and 3,000 features
# the two are within 1.2x up to 48 classes. Short rows do not pay for the
# rows kernels' per-row work (max, exp and error over k classes): at 24
# features GEMM won or tied; at 40 the rows kernels won by 1.1-1.4x up to
# 10 classes and lost by 1.2x in float32 at 20; at 48 features and 20
# classes GEMM won by 1.1x, at 64 features the rows kernels by 1.3x.
# Within those bounds the rows kernels took 0.44-0.85x GEMM's time in the
# calibration of an AVX-512 host (48 to 3,072 features, 2 to 20 classes,
# float32; float64 0.55-1.17x, 0.93x or less from memory at up to 10
# classes). The former rule (rows from 128 features, up to 48 classes)
# predates the rows kernels' vector tiles and the GEMM kernels' sweeps: at
# 100 features and 10 classes it ran GEMM, 2x the rows kernels' time
# (BENCHMARKS.md, "Thirtieth session"). Below FIXED_WORK multiply-adds a
# gradient (m n k) the rule keeps GEMM at any shape: there a call takes
# about half a millisecond either way, the two within 0.1 ms of each other
# (1.2e6-2.4e6 multiply-adds, measured; at 1.2e7-1.6e7 GEMM took 1.4x the
# rows kernels' time, 0.4-0.7 ms more), and on an empty Numba cache the
# rows kernels take about 12 s more to compile than GEMM's in float64 (a
# first fit at 5,000 x 100 x 3 in 22.6 s with them, 10.5 s with GEMM), so
# a small first fit starts fast.
FIXED_N = 40
FIXED_K = LANES_FROM
FIXED_FEATURES_PER_CLASS = 2.5
FIXED_WORK = 1 << 22

# FIXED_K is an AVX-512 host's bound. On a host without AVX-512
# (_kernels._config.WIDE_REGISTERS false: on x86, AVX2's 16 vector
# registers) a rows tile takes 3 classes a pass, not 5, and a GEMM tile's
# vector 8 float32 or 4 float64 classes, not 16 or 8: the rows kernels
# stop paying at fewer classes, by dtype (itemsize: classes). Measured on
# an AVX2 host only, the 2-core Zen 3:
# both strategies alternating in one process at m n k = 3e8 on 100 to
# 3,000 features (`benchmarks/gradient_variants.py strategies`, the
# Hessian product from stored probabilities, as Newton's), the rows
# kernels took, against GEMM's time: float32 1.10-1.60x from 14 classes
# (the product 1.12-1.92x), 0.95-1.35x at 12 (0.99-1.54x), 0.84-0.87x at
# 10 from 300 features (0.86-1.03x; on 100, 1.26x), 0.56-0.94x at 5 and
# 8 (0.72-1.50x); float64 1.02-1.37x from 7 classes (the product
# 0.96-1.49x), 0.93-1.10x at 6 (0.91-1.37x, from 784 features
# 1.15-1.37x), a tie at 5 (0.88-1.18x, 0.87-1.24x), 0.74-0.83x at 3
# (BENCHMARKS.md, "Seventy-second session").
# That host's calibration (`fastsoftmax bench --calibrate`) chose alike:
# GEMM from 20 float32 classes on 96 to 3,040 features (at 128 a tie, 1.04)
# and from 7 float64 classes on 784 or more.
FIXED_K_AVX2 = {4: 12, 8: 6}
# On rows of at most FIXED_NARROW_FEATURES features the bound is
# FIXED_K_NARROW_AVX2's. There the GEMM strategy took the transposed logits
# until the seventy-third session, and its row-wise tiles, which it takes
# now (_dense.transposed_logits), were 1.1-1.9x faster; the comparisons
# above were at 100 features or more, and the rows kernels are unchanged.
# On that host at 40-64 features, alternating in one process as above
# (`gradient_variants.py strategies --dtype float32 --ns 40,48,64,96 --ks
# 3,5,8,10 --work 3e8 --rounds 5`), the rows kernels took float32 0.88-1.23x
# GEMM's time at 8 and 10 classes (the product 1.00-1.76x), 0.69-0.95x at
# 3 and 5 (0.63-1.21x); whole default fits in fresh processes
# (`FASTSOFTMAX_CACHE_DIR=$(mktemp -d) python benchmarks/strategy_fits.py
# --shapes 300000x48x10,300000x64x8,300000x40x8,300000x64x5 --dtypes float32
# --rounds 3`) 0.39-0.42 s with GEMM against 0.46-0.60 s with the rows
# kernels at 8 and 10 classes, a tie at 5 (0.42 s each); at 100 to 784
# features and 8 and 10 classes GEMM took 0.91-1.32x the rows kernels'
# time, and in float64 at 40-64 features and 3-5 classes 0.88-1.13x
# (BENCHMARKS.md, "Seventy-third session").
FIXED_NARROW_FEATURES = 64
FIXED_K_NARROW_AVX2 = {**FIXED_K_AVX2, 4: 8}  # float32's bound only

# n = 96 sits where the two strategies cross in float32 at few classes on
# the AVX-512 hosts: rows of 100 features went by the n = 128 cell's "rows"
# and ran 1.17-1.22x slower than GEMM at k = 3 (float64: 1.17x at k = 14),
# where n = 128 itself is a tie (BENCHMARKS.md, "Eighteenth session").
# n = 112 too: the float32 rows kernels take about the same time a row from
# 96 to 128 features while GEMM's grows with n, so the two cross in between
# at 5-10 classes; going by the n = 128 cell, (161000, 112, 5) took
# 1.11-1.16x the faster strategy's time, by its own 1.04x; 17 of 18
# float32 shapes of 100-120 features within 1.06x, one at 1.15x
# (BENCHMARKS.md, "Twentieth session").
# The wide columns, 1,520 and 3,040 features, are whole vectors of float32
# but not rows of a whole multiple of 1 KiB: at 1,536 and 3,072 features
# a block's rows of float64 (12 and 24 KiB) share sets of L1 and L2, which
# the GEMM tiles' backward product pays for (_kernels._outer.ALIAS_BYTES),
# and those columns spoke for every wide row: on the Zen 3 host the rows
# kernels took 0.64x the GEMM time at (4368, 3072, 10) float64 but 1.13x
# at 3,000 features, 0.91x at 1,536 but 1.29x at 1,500, and (7000, 3000,
# 10) ran the rows kernels at 1.43x the GEMM time (BENCHMARKS.md,
# "Sixty-eighth session").
GRID_N = (16, 48, 96, 112, 128, 384, 784, 1520, 3040)
# k = 7 sits where the two strategies cross in float64 on a 32 KB-L1 host
# (four rows of a wide X and three weight rows stop fitting L1 together):
# with only 5 and 10 to go by, k = 7 took the k = 5 column's "rows" and ran
# 1.4-1.6x slower than GEMM (BENCHMARKS.md, "Fifth session").
# k = 30: from LANES_FROM (32) classes on, the GEMM kernels take the softmax
# error in vector sweeps and the rows kernels leave their float32 blocks
# (_kernels._fused.ERROR_T_MAX_K), so the two strategies' ratio jumps there
# and a shape is never interpolated across it (_k_columns). With only 20
# and 48 to go by, rows of 24-30 classes were decided by a ratio that
# neither kernel had: (4000, 1500, 30) float32 ran the rows kernels at 1.52x
# GEMM's time and (6000, 1500, 24) float64 GEMM at 1.37x the rows kernels'
# (BENCHMARKS.md, "Thirty-second session").
# k = 100 and 200: the rows kernels also win beyond 48 classes on some
# hosts. On the 2-core Zen 4 host, both strategies alternating in one
# process at m n k = 1.2e8, they took 0.69-0.95x GEMM's time in float64
# at 384-3,072 features and 48-200 classes (the Hessian product
# 0.64-0.96x), and in float32 0.80-0.94x from 1,536 features
# (benchmarks/gradient_variants.py strategies); on tall X read from memory
# the Hessian product 0.78-0.95x, the gradient 0.78-1.17x. At 128
# features GEMM won by 1.2-1.9x; at 400-1,000 classes the two were level
# or GEMM won by up to 2.5x (BENCHMARKS.md, "Forty-first session"). Before
# these columns every shape above 48 classes ran GEMM, 1.10-1.11x the rows
# kernels' time at (3000, 784, 100) and (1000, 3000, 100) float64 on that
# host (benchmarks/strategy_check.py, five rounds).
GRID_K = (2, 3, 5, 7, 10, 20, 30, 48, 100, 200)
# Above SMALL_K classes (the grid's last column) the strategy is always
# GEMM (_winner), so no cell is timed there. Nor above MANY_K classes on
# rows of fewer than MANY_K_FEATURES features: there (16-128 features, 100
# and 200 classes, both dtypes, on the Zen 4 host above) 61 of the 64
# timings of a calibration put GEMM ahead (rows / GEMM 0.91-2.03; the
# three below 1 at 96-128 features and 200 classes, two of them on an X
# read ahead), both strategies alternating at 128 features GEMM by
# 1.18-1.25x in float64 and 1.32-1.86x in float32; and timing those cells
# made a first fit of 300,000 x 20 x 200 float64 on an empty cache compile
# the rows kernels for nothing (8.2 -> 27 s; BENCHMARKS.md, "Forty-first
# session").
SMALL_K = GRID_K[-1]
MANY_K = 48
MANY_K_FEATURES = 384


def timed_shape(n_features: int, n_classes: int) -> bool:
    """Whether the grid's cells decide a shape's strategy (else GEMM, above MANY_K classes)."""
    return n_classes <= MANY_K or (n_classes <= SMALL_K and n_features >= MANY_K_FEATURES)


# Multiply-adds per timed call. Cells are timed for problems of at least
# AUTO_WORK, whose X streams from memory: calls 8x longer than the first
# choice (2**23, an X of a few MB, kept in cache between calls) chose
# better for them, at up to a second per cell (BENCHMARKS.md, "Thirteenth
# session").
CELL_WORK = 1 << 26
ROUNDS = 5
# ...and at least this many rows: with fewer, each thread's chunk is a
# block or two of the GEMM strategy, a regime of its own (the per-call
# costs of BLAS), and cells of large n k were decided by it although the
# same shapes with more rows went the other way (measured).
MIN_ROWS = 2048
WARMUP_CALLS = 3
# rows / gemm time ratios beyond this (either way) are timed once more.
OUTLIER = 2.5
# A problem of at least this many multiply-adds per gradient times its own
# grid cell (and, where it uses them, the narrow GEMM blocks) when this host
# has no wisdom for it yet.
AUTO_WORK = 1 << 30
# Cells timed again on an X read ahead (ahead_cell) take up to this many
# bytes of X: enough for every row length of the grid.
AHEAD_X_BYTES = 1 << 28
# Each cell is timed twice: with its X read call after call (in the caches
# where it fits, as a small problem's X is between a solver's calls), and
# with X from memory, as large problems read it: the calls cycle through
# copies of the cell's X, at least this many bytes in all, so that the X a
# call reads was last read that many bytes of X ago (an X of half as many
# bytes or more is timed alone, cold_copies). A shape's X size
# weighs the two (_ratio). On the 2-core Intel host, whose last-level
# cache held the cells' own X of 54 MB between calls, the rows kernel took
# 0.90-1.11x the GEMM strategy's time at n = 96 and 112, k = 10 in float64
# with X read back to back (the winner changed from run to run), 0.70-0.83x
# from memory, as on an X of 200,000 such rows (0.72-0.86x); timed back to
# back only, (200000, 100, 10) float64 went to GEMM at 1.32x the rows
# kernel's time. Timed from memory only, (1000, 3000, 48) float32 (a 12 MB
# X) went to the rows kernel at 1.53x GEMM's time (BENCHMARKS.md,
# "Twenty-sixth session").
COLD_X_BYTES = 1 << 28
# The layout of the wisdom file, in its name: another layout is not read.
# (4: cells timed on an X read ahead, "n,k,ahead"; 5: cells timed with X
# from memory too, COLD_X_BYTES; 6: the BLAS library, "blas".)
WISDOM_FORMAT = 6

# The GEMM strategy's blocks for narrow rows of many classes hold as many
# rows as fit this many bytes of X and logits (``_dense.gemm_block_rows``).
# The fastest size depends on the caches: on the 2-core AVX-512 host the
# sweep behind the rule put it at 64 KiB in float32 (32 KiB within 8 %)
# and at 64-128 KiB in float64, with up to 1.4x between block sizes a
# power of two apart on one shape (BENCHMARKS.md, "Tenth session"). A calibration
# times the candidates on NARROW_SHAPES (n, k) and keeps the one of least
# total time relative to each shape's fastest. Candidates that give a
# shape the same block rows share one timing: timed apart, the same
# blocks differed by up to 19 % between two candidates (their noise), and
# that decided a calibration. (20, 1000) was a shape here until then: at
# 4 KB a row every candidate gives it the 32-row minimum, so it only ever
# added noise; (100, 100), a cell of the peers grid, replaced it
# (BENCHMARKS.md, "Sixteenth session").
NARROW_BLOCK_BYTES = 1 << 16
NARROW_CANDIDATES = (1 << 15, 1 << 16, 1 << 17)
NARROW_SHAPES = ((100, 100), (50, 200), (64, 64))
# Multiply-adds per timed call there: these kernels are fast, and at
# CELL_WORK a call took about a millisecond, mostly its fixed costs.
NARROW_WORK = 1 << 26

# The BLAS library (_blas_choice.candidates) is timed on the GEMM strategy's
# gradient at these (n, k), at least NARROW_WORK multiply-adds a call,
# interleaved: shapes whose time is mostly the products (on narrow rows of
# a few classes the row-wise work hides the libraries' difference, measured
# in BENCHMARKS.md, "Twenty-eighth session"). A candidate other than the
# default must take at most BLAS_MARGIN of the default's summed relative
# time to be chosen: the candidates are builds of one library family, often
# within noise of each other.
# All of at least _common.LANES_FROM classes and fewer features than
# MIN_ROWS: the one GEMM kernel that a large fit of such rows compiles
# anyway (not the features-split one, _dense.split_features).
BLAS_SHAPES = ((784, 100), (100, 1000), (1536, 48))
BLAS_MARGIN = 0.97

# strategy() remembers its answers by the problem's m n k: a program of
# ever new sizes starts afresh beyond this many.
FOUND_LIMIT = 4096

# Reentrant: a lazy lookup holds it while it calibrates.
_lock = threading.RLock()
_state = threading.local()
_wisdom: dict[str, dict] | None = None
# What strategy() and narrow_block_bytes() found in the wisdom, by their
# arguments: every call of the function API asks, and finding the cell
# again took about 15 microseconds. Valid while the wisdom object and the
# override are the ones in _found_under (a calibration, forget() or another
# override starts afresh). _ABSENT marks a cell the wisdom lacks: the
# common case without a full calibration, whose lookups cost each call
# 15 + 4 microseconds until they were remembered too.
_found: dict[tuple, object] = {}
_found_under: tuple | None = None
_ABSENT = object()


# A calibration's ``aside``: the [(kernel, argument types)] its caller
# needs next, for the second compiling process (:func:`calibrate`).
Aside = Callable[[], "list[tuple[Any, tuple]]"]


def _nothing() -> None:
    """Do nothing: a calibration's end of the second process where none was started."""


def fixed_classes(itemsize: int, n_features: int) -> int:
    """Return the classes below which the fixed rule runs the rows kernels on this host.

    :data:`FIXED_K`, or on a host without AVX-512 :data:`FIXED_K_AVX2`'s
    bound for the dtype's ``itemsize`` (4 or 8), on rows of at most
    :data:`FIXED_NARROW_FEATURES` features :data:`FIXED_K_NARROW_AVX2`'s.
    """
    if WIDE_REGISTERS:
        return FIXED_K
    narrow = n_features <= FIXED_NARROW_FEATURES
    return (FIXED_K_NARROW_AVX2 if narrow else FIXED_K_AVX2)[itemsize]


def fixed_rule(n_features: int, n_classes: int, work: float, itemsize: int) -> str:
    """Return the strategy without wisdom (see :data:`FIXED_N`): "rows" or "gemm".

    ``work``: the multiply-adds of one gradient, m n k (below
    :data:`FIXED_WORK`, GEMM); ``itemsize``: the dtype's, 4 or 8
    (:func:`fixed_classes`).
    """
    rows = (work >= FIXED_WORK and n_classes < fixed_classes(itemsize, n_features)
            and n_features >= FIXED_N and n_features >= FIXED_FEATURES_PER_CLASS * n_classes)
    return "rows" if rows else "gemm"


def _cache_dir() -> Path:
    explicit = os.environ.get("FASTSOFTMAX_CACHE_DIR")
    if explicit:
        return Path(explicit)
    numba_dir = os.environ.get("NUMBA_CACHE_DIR")
    if numba_dir:
        return Path(numba_dir) / "fastsoftmax"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "fastsoftmax"


def _host_key() -> str:
    import numba
    import scipy

    from ._blas_choice import mkl_version

    text = (f"{cpu_model()}|{os.cpu_count()}|numba {numba.__version__}|"
            f"scipy {scipy.__version__}|numpy {np.__version__}|"
            f"kernels {_kernels_digest()}|wisdom {WISDOM_FORMAT}")
    mkl = mkl_version()
    if mkl:  # only then: a host without the mkl wheel keeps its wisdom's name
        text += f"|mkl {mkl}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _kernels_digest() -> str:
    """Return a digest of the kernels' source: new kernels mean new timings.

    The wisdom, which records which strategy was faster, is only as good
    as the kernels it timed (block sizes, padding), so it is keyed by their
    source: every kernel file (the digest that also keys their compiled
    code, :mod:`._kernels._cache`), and the launches' block sizes.
    """
    from ._kernels._cache import kernels_digest

    digest = hashlib.sha256(kernels_digest().encode())
    digest.update((Path(__file__).parent / "_dense.py").read_bytes())
    return digest.hexdigest()[:16]


def cpu_model() -> str:
    """Return the CPU's model name (from /proc/cpuinfo on Linux; else what platform says)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return cpu


def wisdom_path() -> Path:
    """Return where this host's wisdom is read from and written to."""
    return _cache_dir() / f"strategy-{_host_key()}.json"


def _read() -> dict[str, dict]:
    try:
        wisdom = json.loads(wisdom_path().read_text())
    except (OSError, ValueError):
        return {}
    return wisdom if isinstance(wisdom, dict) else {}


def _load() -> dict[str, dict]:
    global _wisdom
    if _wisdom is None:
        _wisdom = _read()
    return _wisdom


def wisdom_object() -> dict[str, dict]:
    """Return the wisdom in force, read once: a new object whenever it changes.

    For callers that keep an answer derived from it (``_blas_choice.use_chosen``).
    """
    return _load()


# A cell as the lookup uses it: (n, k, ahead), ahead when it is the cell's
# timing on an X read ahead (ahead_cell).
Cell = tuple[int, int, bool]


def cell_rows(n: int, k: int, itemsize: int = 0, ahead: bool = False) -> int:
    """Rows of the X on which the cell (n, k) is timed; with ``ahead``, rows read ahead.

    ``ahead`` (with the itemsize): at least the fewest rows of n features
    that the rows kernels read ahead (:func:`ahead_cell` says where that
    adds rows).
    """
    rows = max(MIN_ROWS, CELL_WORK // (n * k))
    if ahead:
        rows = max(rows, _least_rows_ahead(n, itemsize) or 0)
    return rows


@functools.cache
def _least_rows_ahead(n: int, itemsize: int) -> int | None:
    """Return the fewest rows of an (m, n) X read ahead; None if none up to AHEAD_X_BYTES.

    By bisection on the kernels' own rule (:func:`rows_read_ahead`), which
    holds from some X size on for a given row.
    """
    lo, hi = 0, max(1, AHEAD_X_BYTES // (n * itemsize))
    if not rows_read_ahead(hi, n, itemsize):
        return None
    while hi - lo > 1:  # not read ahead at lo, read ahead at hi
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if rows_read_ahead(mid, n, itemsize) else (mid, hi)
    return hi


def ahead_cell(n: int, k: int, itemsize: int) -> bool:
    """Whether the cell (n, k) is timed a second time, for shapes whose rows are read ahead.

    Where the cell's own X (:func:`cell_rows`) is not read ahead but a
    larger X of such rows would be: the rows kernels then prefetch the rows
    ahead of their tiles, a regime of its own. The cells at 96 and 112
    float32 features and 10 classes (X of 27 MB) are not, and chose GEMM
    (rows / GEMM 1.04-1.16 in three processes); on an X read ahead (67-68
    MB) the rows kernels took 0.85-0.92x the GEMM time, and at (200000,
    100, 10), which those cells decided, 0.83x (BENCHMARKS.md,
    "Twenty-second session").
    """
    return (itemsize > 0 and not rows_read_ahead(cell_rows(n, k), n, itemsize)
            and _least_rows_ahead(n, itemsize) is not None)


def grid_cell(n_features: int, n_classes: int, itemsize: int = 0,
              ahead: bool = True) -> tuple[int, int]:
    """Return the grid cell (n, k) that decides a shape: the nearest in log n, log k.

    Given the itemsize, a shape between two columns of the grid whose rows
    are not read ahead (``ahead``; see ``_kernels._common.reads_ahead``)
    goes by the farther column when the nearer one's cell reads its rows
    ahead and the farther one's does not: reading ahead is what made the
    rows kernels win that cell. At 112 and 120 float32 features and 10
    classes on X of 22-36 MB, the n = 128 cell's "rows" took 1.12-1.26x
    the GEMM strategy's time, the n = 96 cell's GEMM 0.98-0.99x. Not the
    other way round: rows of 100 features on 120 MB, read ahead, took
    1.10-1.14x the GEMM time by the n = 128 cell's "rows" at 5 and 10
    classes, and the n = 96 cell's GEMM was the faster (BENCHMARKS.md,
    "Twentieth session", measured before the n = 112 column).
    """
    n, k, _ = _heaviest(_around(max(n_features, 1), n_classes, itemsize,
                                ahead or not itemsize))
    return n, k


def _heaviest(around: list[tuple[Cell, float]]) -> Cell:
    """Return the cell of most weight among those a shape is interpolated between."""
    return max(around, key=lambda cell_weight: cell_weight[1])[0]


# _kernels._common.reads_ahead as plain Python, once imported.
_reads_ahead = None


def rows_read_ahead(n_rows: int, n_features: int, itemsize: int) -> bool:
    """Whether the rows kernels read ahead the rows of such an X (the kernels' own rule)."""
    global _reads_ahead
    if _reads_ahead is None:  # imported on first use: it imports Numba
        from ._kernels._common import reads_ahead
        _reads_ahead = reads_ahead.py_func
    return bool(_reads_ahead(n_rows, n_features, itemsize))


def _bracket(grid: tuple[int, ...], x: int) -> list[tuple[int, float]]:
    """Return the values of an ascending grid around ``x``, weighted linearly in log x.

    One value, of weight 1, where ``x`` is on the grid or beyond its ends.
    """
    below = [g for g in grid if g <= x]
    above = [g for g in grid if g >= x]
    if not below or not above or below[-1] == above[0]:
        return [(below[-1] if below else above[0], 1.0)]
    lo, hi = below[-1], above[0]
    t = math.log(x / lo) / math.log(hi / lo)
    return [(lo, 1.0 - t), (hi, t)]


def _k_columns(n_classes: int) -> tuple[int, ...]:
    """Return the grid's k columns a shape of ``n_classes`` goes by (its side of LANES_FROM).

    Both kernels change at LANES_FROM classes (see :data:`GRID_K`), so a
    shape below it is interpolated between columns below it, or goes by
    the last of them alone, and one from it on likewise (all columns where
    its side has none).
    """
    below = n_classes < LANES_FROM
    return tuple(k for k in GRID_K if (k < LANES_FROM) == below) or GRID_K


def _around(n_features: int, n_classes: int, itemsize: int,
            ahead: bool) -> list[tuple[Cell, float]]:
    """Return the (up to four) grid cells around a shape, with weights summing to 1.

    Linear in log n and log k (k between the columns on the shape's side
    of LANES_FROM, :func:`_k_columns`). Between a column whose cell reads its rows
    ahead and one whose cell does not, a shape not read ahead goes by the
    latter alone (as in :func:`grid_cell`). A shape read ahead goes by the
    cells' timings on an X read ahead where they have one (:func:`ahead_cell`).
    """
    columns = _bracket(GRID_N, n_features)
    ks = _bracket(_k_columns(n_classes), max(n_classes, 2))
    if not ahead and len(columns) == 2:
        k0 = max(ks, key=lambda kw: kw[1])[0]
        read = [rows_read_ahead(cell_rows(n, k0), n, itemsize) for n, _ in columns]
        if read[0] != read[1]:
            columns = [(n, 1.0) for (n, _), r in zip(columns, read, strict=True) if not r]
    return [((n, k, ahead and ahead_cell(n, k, itemsize)), wn * wk)
            for n, wn in columns for k, wk in ks]


def _ratio(cells: dict, cell: Cell, x_bytes: int = 0) -> float | None:
    """Return a timed cell's rows / GEMM time ratio for an X of ``x_bytes``; None without it.

    The ratio with X read back to back up to the cell's own X bytes, the
    one with X from memory from COLD_X_BYTES, and between the two its
    logarithm interpolated in log x_bytes (where the caches stop holding X
    depends on the host and on its other work). A cell timed one way only
    (its X alone half of COLD_X_BYTES) has one ratio for every X.
    """
    entry = cells.get(_cell_key(*cell))
    if not isinstance(entry, dict):
        return None
    warm = _times_ratio(entry, "rows_s", "gemm_s")
    cold = _times_ratio(entry, "rows_cold_s", "gemm_cold_s")
    if warm is None or cold is None:
        return warm
    return math.exp(math.log(warm) + _cold_weight(x_bytes, entry.get("x_bytes"))
                    * math.log(cold / warm))


def _times_ratio(entry: dict, rows_key: str, gemm_key: str) -> float | None:
    rows_s, gemm_s = entry.get(rows_key), entry.get(gemm_key)
    # A cell without both times (hand-edited, damaged) decides nothing.
    if not (isinstance(rows_s, (int, float)) and isinstance(gemm_s, (int, float))
            and 0 < rows_s < math.inf and 0 < gemm_s < math.inf):
        return None
    return rows_s / gemm_s


def _cold_weight(x_bytes: int, cell_bytes) -> float:
    """Return the weight of a cell's X-from-memory ratio for an X of ``x_bytes`` (0 to 1)."""
    if not (isinstance(cell_bytes, int) and 0 < cell_bytes < COLD_X_BYTES):
        return 1.0
    if x_bytes <= cell_bytes:
        return 0.0
    return min(1.0, math.log(x_bytes / cell_bytes) / math.log(COLD_X_BYTES / cell_bytes))


def _interpolated(dtype: str, n_features: int, n_classes: int,
                  around: list[tuple[Cell, float]], x_bytes: int = 0) -> str | None:
    """Return the strategy by the rows / GEMM time ratio of the cells around the shape.

    The ratio's logarithm (each cell's for an X of ``x_bytes``,
    :func:`_ratio`) is interpolated between the cells :func:`_around`
    gives and decided as a cell's is (:func:`_winner`: the shape's own
    fixed rule and margin); None unless every one holds both times. The
    ratio changes smoothly between cells that disagree: at (67000, 100,
    30) float32 the k = 20 cell's "rows" took 1.35x the GEMM time and the
    k = 48 cell chose GEMM; interpolated, GEMM. Off the grid, 24 shapes
    took 1.009x the faster strategy's time on average (worst 1.17x), 1.027x
    (worst 1.30x) by the nearest cell (BENCHMARKS.md, "Twentieth session").
    """
    cells = _table(_load().get(dtype))["cells"]
    log_ratio = 0.0
    for cell, weight in around:
        ratio = _ratio(cells, cell, x_bytes)
        if ratio is None:
            return None
        log_ratio += weight * math.log(ratio)
    return _winner(n_features, n_classes, np.dtype(dtype).itemsize, math.exp(log_ratio), 1.0)


def _cell_key(n: int, k: int, ahead: bool = False) -> str:
    return f"{n},{k},ahead" if ahead else f"{n},{k}"


def _table(table) -> dict:
    """Return one dtype's wisdom (a copy), its "cells" a dict ({} for what a damaged file holds)."""
    table = dict(table) if isinstance(table, dict) else {}
    if not isinstance(table.get("cells"), dict):
        table["cells"] = {}
    return table


def _known_or_timed(lookup, time_it, work: int):
    """Return ``lookup()``; when it is None for a problem of AUTO_WORK, ``time_it()`` first.

    Not inside a calibration (whose own engines must not start another);
    checked again under the lock, as another thread may have timed it.
    """
    value = lookup()
    if value is None and work >= AUTO_WORK and not _no_timing():
        with _lock:
            value = lookup()
            if value is None:
                time_it()
                value = lookup()
    return value


def _entry(dtype: str, cell: Cell) -> dict | None:
    entry = _table(_load().get(dtype))["cells"].get(_cell_key(*cell))
    # A hand-edited or damaged file must not choose a kernel.
    if isinstance(entry, dict) and entry.get("winner") in ("rows", "gemm"):
        return entry
    return None


def _remembered(override: str, key: tuple, find):
    """Return what ``find()`` gave for ``key`` under the current wisdom and ``override``.

    Kept in :data:`_found` until the wisdom object or the override changes,
    None too (as :data:`_ABSENT`), except where cells are not timed now
    (inside a calibration, whose own kernels never time a cell, or
    :func:`looking_only`). A key says whether its call was large
    enough to time a missing cell, so a small problem's None never stops
    a large one from timing it.
    """
    global _found, _found_under
    wisdom = _load()
    if _found_under is None or _found_under[0] is not wisdom or _found_under[1] != override:
        _found, _found_under = {}, (wisdom, override)
    value = _found.get(key)
    if value is None:
        value = find()
        if value is not None or not _no_timing():
            if len(_found) >= FOUND_LIMIT:  # a program of ever new shapes
                _found.clear()
            _found[key] = _ABSENT if value is None else value
    return None if value is _ABSENT else value


def strategy(n_features: int, n_classes: int, dtype: np.dtype, work: int = 0,
             aside: Aside | None = None) -> str:
    """Return the kernel strategy for this host, shape and dtype.

    The wisdom's cell for the shape (:func:`grid_cell`) when it was timed,
    interpolated between the cells around the shape where those were
    timed too (:func:`_interpolated`), each cell's timings weighed by the
    size of X, m n = ``work`` / k (:func:`_ratio`). With ``work`` (m n k)
    of at least :data:`AUTO_WORK`, those of the cells not timed yet are
    timed now (and remembered), with ``aside`` (:func:`calibrate`'s) if
    given. Else, without the shape's own cell, the fixed rule.
    """
    override = env_value("FASTSOFTMAX_STRATEGY")
    forced = override.strip().lower()
    if forced in ("rows", "gemm"):
        return forced
    if forced == "fixed" or not timed_shape(n_features, n_classes):  # GEMM, as _winner decides
        return fixed_rule(n_features, n_classes, work, np.dtype(dtype).itemsize)

    def find() -> str | None:
        name = np.dtype(dtype).name
        around, cell, needed, x_bytes = _shape_cells(n_features, n_classes, name, work)
        found: dict[str, dict | None] = {}

        def untimed() -> list[Cell]:
            return _untimed(name, needed)

        def lookup() -> dict | None:
            """Return the shape's cell once it and the cells around it are timed."""
            found["entry"] = entry = _entry(name, cell)
            return entry if entry is not None and not untimed() else None

        def time_them() -> None:
            calibrate((name,), cells=untimed(), blocks=False, aside=aside)

        _known_or_timed(lookup, time_them, work)
        entry = found["entry"]
        if entry is None:
            return None
        # The cell alone decides while the others are not timed.
        return (_interpolated(name, n_features, n_classes, around, x_bytes)
                or _interpolated(name, n_features, n_classes, [(cell, 1.0)], x_bytes)
                or entry["winner"])

    winner = _remembered(override, ("strategy", n_features, n_classes, dtype, work), find)
    if winner is not None:
        return winner
    return fixed_rule(n_features, n_classes, work, np.dtype(dtype).itemsize)


def _shape_cells(n_features: int, n_classes: int, dtype: str, work: int):
    """Return the grid cells that decide a shape: (around, cell, needed, x_bytes).

    ``around``: the cells with their weights (:func:`_around`); ``cell``
    the heaviest (:func:`grid_cell`'s); ``needed`` every one of them, that
    cell first; ``x_bytes`` X's size. ``work``: m n k, which gives the
    rows (whether they are read ahead) and X's size (which weighs each
    cell's two timings, :func:`_ratio`).
    """
    itemsize = np.dtype(dtype).itemsize
    ahead = rows_read_ahead(work // max(n_features * n_classes, 1), n_features, itemsize)
    x_bytes = work // max(n_classes, 1) * itemsize
    around = _around(max(n_features, 1), n_classes, itemsize, ahead)
    cell = _heaviest(around)
    return around, cell, list(dict.fromkeys([cell] + [c for c, _ in around])), x_bytes


def _untimed(dtype: str, cells: list[Cell]) -> list[Cell]:
    """Return those of ``cells`` that this host's wisdom has no timing of for ``dtype``."""
    table = _table(_load().get(dtype))["cells"]
    return [c for c in cells if _ratio(table, c) is None]


def explain(n_features: int, n_classes: int, dtype: np.dtype, work: int = 0) -> dict:
    """Return how :func:`strategy` decides a shape, without timing anything.

    A dict: "strategy" ("rows" or "gemm": what a call of ``work``
    multiply-adds runs as the wisdom stands now; None where such a call
    would time cells first, "times_first"), "source" (in words: the
    override, the fixed rule, or the wisdom's cells) and "untimed" (the
    grid cells, as "n,k" or "n,k,ahead", that the decision needs and this
    host has not timed; a call of at least :data:`AUTO_WORK` times them
    first).
    """
    name = np.dtype(dtype).name
    forced = env_value("FASTSOFTMAX_STRATEGY").strip().lower()
    out: dict[str, Any] = {"strategy": None, "source": "", "untimed": [], "times_first": False}
    with looking_only():
        out["strategy"] = strategy(n_features, n_classes, dtype, work)
    if forced in ("rows", "gemm"):
        out["source"] = f"FASTSOFTMAX_STRATEGY={forced}"
        return out
    rule = _rule_words(np.dtype(dtype), n_features)
    if forced == "fixed":
        out["source"] = f"{rule} (FASTSOFTMAX_STRATEGY=fixed)"
        return out
    if n_classes > SMALL_K:
        out["source"] = f"the fixed rule: GEMM blocks above {SMALL_K} classes"
        return out
    if not timed_shape(n_features, n_classes):
        out["source"] = (f"the fixed rule: GEMM blocks above {MANY_K} classes on rows of "
                         f"fewer than {MANY_K_FEATURES} features")
        return out
    _, cell, needed, _ = _shape_cells(n_features, n_classes, name, work)
    untimed = _untimed(name, needed)
    missing = [_cell_key(*c) for c in untimed]
    timed = [_cell_key(*c) for c in needed if c not in untimed]
    out["untimed"] = missing
    out["times_first"] = bool(missing) and work >= AUTO_WORK
    if not missing:
        out["source"] = "this host's wisdom, the cells " + "; ".join(timed)
    elif out["times_first"]:
        out["strategy"] = None
        out["source"] = ("not decided yet: a call of this size times the cells "
                         f"{'; '.join(missing)} first (about a second each)")
    elif cell not in untimed:
        out["source"] = f"this host's wisdom, the nearest cell {_cell_key(*cell)} alone"
    else:
        out["source"] = f"{rule}: the shape's cell is not timed on this host"
    return out


def _rule_words(dtype: np.dtype, n_features: int) -> str:
    """Return the fixed rule in words, with its bound for ``dtype`` and n on this host."""
    cpu = "" if WIDE_REGISTERS else " on a CPU without AVX-512"
    if cpu and n_features <= FIXED_NARROW_FEATURES:
        cpu = f" on rows of at most {FIXED_NARROW_FEATURES} features," + cpu
    return (f"the fixed rule (the rows kernels below {fixed_classes(dtype.itemsize, n_features)} "
            f"{dtype.name} classes{cpu})")


def calibrated(dtype: np.dtype) -> dict:
    """Return what this host's wisdom holds for ``dtype``, for reports.

    A dict: "cells" (how many grid cells are timed, timings on an X read
    ahead included), "grid" (how many there are), "blas" and
    "narrow_block_bytes" (the calibration's choices; None where not timed).
    """
    name = np.dtype(dtype).name
    table = _table(_load().get(name))
    grid = _cells_to_time((name,), None)[name]
    untimed = _untimed(name, grid)
    return {"cells": len(grid) - len(untimed), "grid": len(grid),
            "blas": table.get("blas") if isinstance(table.get("blas"), str) else None,
            "narrow_block_bytes": (table["narrow_block_bytes"]
                                   if isinstance(table.get("narrow_block_bytes"), int) else None)}


@contextlib.contextmanager
def looking_only():
    """Within the block, this thread's lookups never time anything (what is untimed reads so).

    For reports of what a call would run (:func:`explain`,
    ``fastsoftmax.show_config``): a lookup for a large problem would
    otherwise calibrate its cells first.
    """
    before = getattr(_state, "looking", False)
    _state.looking = True
    try:
        yield
    finally:
        _state.looking = before


def _no_timing() -> bool:
    """Whether this thread's lookups must not time cells now (in a calibration, or looking)."""
    return _busy() or getattr(_state, "looking", False)


def narrow_block_bytes(dtype: np.dtype, work: int = 0) -> int:
    """Return this host's block bytes for narrow rows (:data:`NARROW_BLOCK_BYTES` without wisdom).

    As :func:`_blocks_step`'s value "narrow_block_bytes".
    """
    return _blocks_step("narrow_block_bytes", dtype, work,
                        lambda v: isinstance(v, int) and v > 0, NARROW_BLOCK_BYTES)


def blas_library(dtype: np.dtype, work: int = 0) -> str:
    """Return this host's BLAS library for ``dtype``'s products (``_blas_choice.DEFAULT`` without).

    As :func:`_blocks_step`'s value "blas".
    """
    from ._blas_choice import DEFAULT

    return _blocks_step("blas", dtype, work, lambda v: isinstance(v, str) and bool(v), DEFAULT)


def _blocks_step(key: str, dtype: np.dtype, work: int, valid, default):
    """Return what the calibration's ``blocks`` step wrote under ``key`` for ``dtype``.

    Read from the wisdom when a calibration wrote it (and ``valid`` holds
    for it: a hand-edited or damaged file must not decide); else, with
    ``work`` of at least :data:`AUTO_WORK`, timed now (and remembered);
    else ``default``. The "fixed" override (``FASTSOFTMAX_STRATEGY``)
    always gives the default, as it does the fixed strategy rule.
    """
    override = env_value("FASTSOFTMAX_STRATEGY")
    if override.strip().lower() == "fixed":
        return default
    # The dtype's name only where the remembered value is missing: after an
    # idle pause NumPy's ``dtype.name`` (Python code) took about 0.1 ms.

    def lookup():
        value = _table(_load().get(np.dtype(dtype).name)).get(key)
        return value if valid(value) else None

    def find():
        return _known_or_timed(
            lookup, lambda: calibrate((np.dtype(dtype).name,), cells=[], blocks=True), work)

    value = _remembered(override, (key, dtype, work >= AUTO_WORK), find)
    return value if value is not None else default


def winner_grid(table: dict, ahead: bool = False,
                cold: bool = False) -> list[list[str | None]]:
    """Return a dtype's winners on GRID_N x GRID_K (None where a cell is not timed).

    ``ahead``: those of the cells' timings on an X read ahead (:func:`ahead_cell`).
    ``cold``: with X from memory (the one timing where a cell has only one).
    """
    cells = _table(table)["cells"]

    def winner(entry: dict) -> str | None:
        return entry.get("winner_cold", entry.get("winner")) if cold else entry.get("winner")

    return [[winner(cells.get(_cell_key(n, k, ahead)) or {}) if timed_shape(n, k) else None
             for k in GRID_K] for n in GRID_N]


def _gemm_problem(n: int, k: int, dtype: str, rng: np.random.Generator):
    """Return (data, coef, b): a random problem of n features and k classes.

    NARROW_WORK multiply-adds and at least MIN_ROWS rows: the problems the
    calibration's blocks step times the GEMM engine on.
    """
    from ._data import make_dataset

    m = max(MIN_ROWS, NARROW_WORK // (n * k))
    X = rng.standard_normal((m, n), dtype=np.float32).astype(dtype, copy=False)
    data = make_dataset(X, rng.integers(0, k, m), None, None, k)
    coef = (0.01 * rng.standard_normal((k, n))).astype(dtype)
    return data, coef, np.zeros(k, dtype)


def _time_blas(dtype: str, rng: np.random.Generator) -> dict[str, list[float]]:
    """Fastest of ROUNDS gradient timings per BLAS candidate, per BLAS_SHAPES shape.

    The GEMM engine, every candidate in turn before each timed call. Leaves
    the kernels calling the default.
    """
    from ._blas_choice import DEFAULT, candidates, use
    from ._dense import DenseEngine

    names = list(candidates())
    times: dict[str, list[float]] = {name: [] for name in names}
    try:
        for n, k in BLAS_SHAPES:
            data, coef, b = _gemm_problem(n, k, dtype, rng)
            eng = DenseEngine(data, "gemm", warm=True, block_bytes=NARROW_BLOCK_BYTES)
            best = dict.fromkeys(names, float("inf"))
            for name in names:
                use(dtype, name)
                for _ in range(WARMUP_CALLS):
                    eng.gradient(coef, b)
            for _ in range(ROUNDS):
                for name in names:
                    use(dtype, name)
                    t0 = time.perf_counter()
                    eng.gradient(coef, b)
                    best[name] = min(best[name], time.perf_counter() - t0)
            for name in names:
                times[name].append(best[name])
    finally:
        use(dtype, DEFAULT)
    return times


def _blas_winner(times: dict[str, list[float]]) -> str:
    """Return the candidate of least summed relative time (the default unless BLAS_MARGIN below)."""
    from ._blas_choice import DEFAULT

    n_shapes = len(times[DEFAULT])
    fastest = [min(t[i] for t in times.values()) for i in range(n_shapes)]
    cost = {name: sum(t / f for t, f in zip(ts, fastest, strict=True))
            for name, ts in times.items()}
    best = min(cost, key=cost.__getitem__)
    return best if cost[best] <= BLAS_MARGIN * cost[DEFAULT] else DEFAULT


def _time_blocks(dtype: str, rng: np.random.Generator) -> dict[int, list[float]]:
    """Fastest of ROUNDS gradient timings per NARROW_CANDIDATES size, per NARROW_SHAPES shape.

    The GEMM engine with each block size, interleaved within a shape.
    """
    from ._dense import DenseEngine

    times: dict[int, list[float]] = {b: [] for b in NARROW_CANDIDATES}
    for n, k in NARROW_SHAPES:
        data, coef, b = _gemm_problem(n, k, dtype, rng)
        engines = {c: DenseEngine(data, "gemm", warm=True, block_bytes=c)
                   for c in NARROW_CANDIDATES}
        # One engine per distinct block size (see NARROW_SHAPES).
        distinct: dict[int, DenseEngine] = {}
        for eng in engines.values():
            distinct.setdefault(eng._rows, eng)
        for eng in distinct.values():
            for _ in range(WARMUP_CALLS):
                eng.gradient(coef, b)
        best = {rows: float("inf") for rows in distinct}
        for _ in range(ROUNDS):
            for rows, eng in distinct.items():
                t0 = time.perf_counter()
                eng.gradient(coef, b)
                best[rows] = min(best[rows], time.perf_counter() - t0)
        for c, eng in engines.items():
            times[c].append(best[eng._rows])
    return times


def _block_winner(times: dict[int, list[float]]) -> int:
    """Return the candidate of least summed time relative to each shape's fastest."""
    n_shapes = len(next(iter(times.values())))
    fastest = [min(t[i] for t in times.values()) for i in range(n_shapes)]
    return min(times, key=lambda c: sum(t / f for t, f in zip(times[c], fastest, strict=True)))


def _time_cell(n: int, k: int, dtype: str, rng: np.random.Generator,
               ahead: bool = False, settle: Callable[[], None] = _nothing) -> dict:
    """Time (rows, gemm) on one shape: X read back to back, and X from memory.

    The shape: :func:`cell_rows` rows (read ahead, with ``ahead``). Returns
    the cell's wisdom entry (``settle()`` is called between the warm-up
    calls and the timed ones): ``rows_s`` and ``gemm_s`` with the cell's X
    read call after call (in the caches where it fits), ``rows_cold_s`` and
    ``gemm_cold_s`` with each call reading the least recently read of
    :func:`cold_copies` of X (from memory; absent where X is timed alone,
    half of COLD_X_BYTES: the first two are from memory already), ``x_bytes`` (the
    cell's X), and each timing's ``winner`` / ``winner_cold`` (:func:`_winner`).
    """
    from ._data import make_dataset
    from ._objective import Objective

    itemsize = np.dtype(dtype).itemsize
    m = cell_rows(n, k, itemsize, ahead)
    X = rng.standard_normal((m, n), dtype=np.float32).astype(dtype, copy=False)
    labels = rng.integers(0, k, m)
    data = [make_dataset(Xc, labels, None, None, k) for Xc in cold_copies(X)]
    # objs[s][c]: strategy s on copy c.
    objs = [[Objective(d, strategy=s, warm=True) for d in data] for s in ("rows", "gemm")]
    coef = (0.01 * rng.standard_normal((k, n))).astype(dtype)
    b = np.zeros(k, dtype)
    for per_copy in objs:  # compile / warm up (BLAS touches its buffers over the first calls)
        for _ in range(WARMUP_CALLS):
            per_copy[0].loss_grad(coef, b)
        for obj in per_copy[1:]:  # each engine's scratch, allocated on its first call
            obj.loss_grad(coef, b)
    settle()
    rows_s, gemm_s = _time_pair(objs, coef, b, lambda call: 0, ROUNDS)
    entry = {"winner": _winner(n, k, itemsize, rows_s, gemm_s), "rows_s": rows_s,
             "gemm_s": gemm_s, "x_bytes": X.nbytes}
    copies = len(objs[0])
    if copies > 1:
        # From copy 1: copy 0 was just read. An odd number of copies, read in
        # turn by calls that alternate between the strategies, gives each
        # strategy every copy (where a copy lies in memory made it up to about
        # 1.2x faster than another, measured), one round per copy at least.
        rows_s, gemm_s = _time_pair(objs, coef, b, lambda call: (call + 1) % copies,
                                    max(ROUNDS, copies))
        entry.update(winner_cold=_winner(n, k, itemsize, rows_s, gemm_s), rows_cold_s=rows_s,
                     gemm_cold_s=gemm_s)
    return entry


def _time_pair(objs, coef, b, copy, rounds: int) -> tuple[float, float]:
    """Fastest of ``rounds`` timings of (rows, gemm), interleaved; call i reads copy(i) of X.

    The minimum, not the median: interference from other processes only
    ever adds time, and a calibration must not be decided by it.
    """
    times: list[list[float]] = [[], []]
    calls = 0
    for _attempt in range(2):
        for _ in range(rounds):
            for t, per_copy in zip(times, objs, strict=True):
                obj = per_copy[copy(calls)]
                calls += 1
                t0 = time.perf_counter()
                obj.loss_grad(coef, b)
                t.append(time.perf_counter() - t0)
        ratio = np.min(times[1]) / np.min(times[0])
        # A ratio this far from 1 was, when it happened, a stall of one
        # contender (a burst of load, a page-faulting buffer): time again.
        if 1 / OUTLIER < ratio < OUTLIER:
            break
    return float(np.min(times[0])), float(np.min(times[1]))


def cold_copies(X: np.ndarray) -> list[np.ndarray]:
    """Return X and copies of it, an odd number, at least COLD_X_BYTES in all.

    X alone from half of COLD_X_BYTES: read back to back, an X that large
    comes from memory already (at (200000, 100, 10) float64, 160 MB, the
    rows kernel took 0.72-0.86x GEMM's time, as the cells around it did
    cycling through copies, 0.70-0.83x), and three copies of it would hold
    up to 768 MB at once.

    Read in turn, each is read again only after the others: from memory
    (up to a host whose cache holds COLD_X_BYTES). The copies are written
    here, so no call of a timing meets their first-touch page faults.
    """
    if 2 * X.nbytes >= COLD_X_BYTES:
        return [X]
    count = -(-COLD_X_BYTES // max(X.nbytes, 1))
    count += 1 - count % 2
    return [X] + [X.copy() for _ in range(count - 1)]


# The other strategy replaces the fixed rule's choice only when it is at
# least this much faster: the cells are short (CELL_WORK) and two kernels
# within a few percent of each other swap places from run to run on a
# shared machine; a near-tie is not worth a change of rounding. A wide
# margin also keeps the fixed rule where it is wrong by less than the
# margin. Charged at both strategies timed at m n k = 2e8 on every cell of
# the grid with k <= 48 (benchmarks/strategy_margin.py, three runs of two
# or three calibrations, 2-core Intel host): 28 of 784 cell choices above
# 1.10x the faster strategy with 0.95, 35 with 0.9, 32 without a margin;
# about 1 % above the faster on average with each (BENCHMARKS.md,
# "Seventh session").
MARGIN = 0.95


def _winner(n: int, k: int, itemsize: int, rows_s: float, gemm_s: float) -> str:
    """Return one grid cell's strategy: the fixed rule's, unless the other is clearly faster.

    The fixed rule as a large problem's: with wisdom, both strategies'
    kernels are compiled already.
    """
    default = fixed_rule(n, k, AUTO_WORK, itemsize)
    if not timed_shape(n, k):
        # Not timed there: the rows kernels' 4 x 3 tiles stop paying (see
        # GRID_K and MANY_K).
        return default
    mine, other = (rows_s, gemm_s) if default == "rows" else (gemm_s, rows_s)
    if other < MARGIN * mine:
        return "gemm" if default == "rows" else "rows"
    return default


def calibrate(dtypes=("float32", "float64"), *, cells=None, blocks: bool = True,
              n_threads: int | None = None, write: bool = True,
              aside: Aside | None = None) -> dict[str, dict]:
    """Time both strategies on grid cells for each dtype; remember and return the winners.

    ``cells``: the (n, k) cells to time, each on the grid (GRID_N x GRID_K),
    or (n, k, True) for a cell's timing on an X read ahead (only where
    :func:`ahead_cell` holds for every dtype asked); None times every cell,
    with those timings. ``blocks``: also time the GEMM blocks' budget for
    narrow rows. Returns, per dtype, what this call timed: ``{"cells":
    {"n,k": entry}}`` (the key "n,k,ahead" for a timing on an X read
    ahead; an entry as :func:`_time_cell` returns it), with
    ``"narrow_block_bytes"`` and ``"narrow_s"`` ({bytes: [seconds per
    NARROW_SHAPES shape]}) when ``blocks``. With ``write`` it is merged
    into this host's wisdom file (written atomically) and into what this
    process has read from it.

    Without ``blocks``, a second process compiles meanwhile, where a core
    is spare (:func:`_compile_aside`): the kernels ``aside()`` names (what
    the caller needs next), then the GEMM strategy's gradient kernels of
    the cells, while this process compiles the rows strategy's.
    """
    from ._blas_choice import chosen, use
    from ._threads import thread_policy

    todo = _cells_to_time(dtypes, cells)
    rng = np.random.default_rng(0)
    result: dict[str, dict] = {}
    with _lock, thread_policy(n_threads):
        _state.busy = True
        try:
            # Inside the calibration: whatever the second process's list
            # looks up is not timed. Not with ``blocks``: their first timing
            # (the BLAS choice) comes before anything is compiled here.
            settle = _compile_aside(aside, todo) if not blocks else _nothing

            for dtype in dtypes:
                table: dict = {"cells": {}}
                if blocks:
                    blas_s = _time_blas(dtype, rng)
                    table["blas"] = _blas_winner(blas_s)
                    table["blas_s"] = blas_s
                    use(dtype, table["blas"])
                else:
                    use(dtype, chosen(dtype))  # the cells timed on the kernels' BLAS
                for n, k, ahead in todo[dtype]:
                    table["cells"][_cell_key(n, k, ahead)] = _time_cell(n, k, dtype, rng, ahead,
                                                                        settle)
                if blocks:
                    times = _time_blocks(dtype, rng)
                    table["narrow_block_bytes"] = _block_winner(times)
                    table["narrow_s"] = {str(c): t for c, t in times.items()}
                result[dtype] = table
        finally:
            _state.busy = False
        if write:
            global _wisdom
            # Cells another process timed since this one read the file are kept.
            _wisdom = _merge(_merge(_read(), _load()), result)
            _write(_wisdom)
    return result


def _compile_aside(aside: Aside | None, todo: dict[str, list[Cell]]) -> Callable[[], None]:
    """Start a second process compiling what a calibration and its caller need; return its end.

    On an empty cache the calibration compiles both strategies' gradient
    kernels (to time them), each single threaded, and its caller then
    compiles what it runs next (a Newton fit: the winner's Hessian
    products). Here a second process (:mod:`._side_compile`, under its
    conditions) compiles ``aside()``'s kernels and then the GEMM
    gradients of the cells in ``todo`` (the rows kernels, which this
    process compiles first, take the longer), into the same cache: this
    process, reaching one, waits for it through its compile lock or loads
    it. Returns the function to call before anything is timed: it waits
    for the process as long again as the calibration has run so far (its
    own compiling), then stops it if it still runs, so that no timing
    shares the cores with a compile, and a calibration whose kernels were
    compiled already does not wait out a long compile (what was stopped
    is compiled where it is first called, as without the process).
    """
    from ._data import make_dataset
    from ._dense import DenseEngine
    from ._side_compile import finish, start

    def kernels() -> list[tuple[Any, tuple]]:
        found = list(aside()) if aside is not None else []
        for dtype, cells in todo.items():
            for n, k, ahead in cells:
                # The engine of _time_cell's GEMM objective (X's pages never
                # touched here).
                m = cell_rows(n, k, np.dtype(dtype).itemsize, ahead)
                data = make_dataset(np.empty((m, n), dtype), np.zeros(m, np.int64), None, None,
                                    k)
                found += DenseEngine(data, "gemm", warm=True).gradient_kernels()
        return list(dict.fromkeys(found))

    started = time.perf_counter()
    proc = start(kernels)
    if proc is None:
        return _nothing
    return lambda: finish(proc, time.perf_counter() - started)


def _cells_to_time(dtypes, cells) -> dict[str, list[Cell]]:
    """Return calibrate()'s cells per dtype as (n, k, ahead), checked: an error names a bad one."""
    if cells is None:
        return {dtype: [(n, k, ahead) for ahead in (False, True) for n in GRID_N for k in GRID_K
                        if timed_shape(n, k)
                        and (not ahead or ahead_cell(n, k, np.dtype(dtype).itemsize))]
                for dtype in dtypes}
    todo = [(cell[0], cell[1], len(cell) > 2 and bool(cell[2])) for cell in cells]
    for n, k, ahead in todo:
        if n not in GRID_N or k not in GRID_K:
            raise ValueError(f"({n}, {k}) is not a cell of the calibration grid")
        if not timed_shape(n, k):
            raise ValueError(f"({n}, {k}) is not timed: above {MANY_K} classes, rows of fewer "
                             f"than {MANY_K_FEATURES} features always run GEMM")
        for dtype in dtypes:
            if ahead and not ahead_cell(n, k, np.dtype(dtype).itemsize):
                raise ValueError(f"({n}, {k}) is not timed on an X read ahead in {dtype}: "
                                 "its own X is read ahead, or no X of such rows is")
    return {dtype: todo for dtype in dtypes}


def _merge(old: dict, new: dict) -> dict:
    """Return ``old`` with ``new``'s dtypes merged in: cells joined, other keys replaced."""
    out = dict(old)
    for dtype, table in new.items():
        merged = _table(out.get(dtype))
        cells = {**merged["cells"], **table.get("cells", {})}
        merged.update(table)
        merged["cells"] = cells
        out[dtype] = merged
    return out


def _busy() -> bool:
    """Whether this thread is inside a calibration (whose own kernels must not start another)."""
    return getattr(_state, "busy", False)


def _write(wisdom: dict) -> None:
    path = wisdom_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".strategy-", suffix=".json")
        with os.fdopen(fd, "w") as fh:
            json.dump(wisdom, fh)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: the wisdom lives for this process only


def forget() -> None:
    """Drop the wisdom read into this process (the file stays)."""
    global _wisdom
    with _lock:
        _wisdom = None
