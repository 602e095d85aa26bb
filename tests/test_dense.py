"""The dense engine (fastsoftmax._dense.DenseEngine: the kernels of
fastsoftmax._kernels._fused and fastsoftmax._kernels._hessp) in every setting,
whatever the shape rule would pick: both strategies ("rows", "gemm"), both
launch modes (serial below _launch.SERIAL_WORK, parallel above) and, for
Hessian-vector products, both modes (P cached by the gradient pass, or
recomputed). Driven through the Objective, in the public layout, against the
float64 reference, finite differences, PyTorch's double backward and the
algebra (symmetry, positive semi-definiteness).

Tolerances: the loss and gradient use _helpers.TOL (those of
tests/test_loss_and_grad.py); the Hessian products use _helpers.HESSP_TOL,
relative to the magnitude of the terms summed (see _helpers.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from _helpers import (
    FLOAT_DTYPES,
    HESSP_TOL,
    HESSP_VARIANTS,
    PublicObjective,
    assert_close,
    dtype_id,
    f64,
    make_problem,
    product,
    ref_hessp64,
    truth,
)
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numba import njit

import fastsoftmax as fs
from fastsoftmax import _dense, _launch
from fastsoftmax import reference as ref
from fastsoftmax._dense import PROBA_BUDGET, choose_mode
from fastsoftmax._kernels._common import LANES_FROM
from fastsoftmax._kernels._config import VECTOR_BYTES
from fastsoftmax._kernels._outer import (
    ALIAS_BYTES,
    LINE_BYTES,
    REST_FEW_CLASSES,
    REST_FEW_MIN_FEATURES,
    REST_MIN_FEATURES,
    REST_MIN_WHOLE_CLASSES,
    rest_classes,
    rest_classes_for,
    rest_rows,
    rest_rows_for,
    row_unit,
    spare_rows_for,
)

STRATEGIES = ("rows", "gemm")
MODES = ("cached", "recompute")
# The gradient kernels behind the strategies: the GEMM strategy takes the
# kernel with transposed logits over few features and classes on hosts
# without AVX-512 (_dense.transposed_logits), the row-wise one otherwise
# (from 32 classes the one with each row's maximum in lanes), its products
# by BLAS or, on hosts with AVX-512 and on the others below a size of the
# partial sums (_dense.outer_tiles), by the tiles of _kernels._outer
# ("gemm_tiles");
# the tests force each, whatever the shape and the host.
KERNELS = ("rows", "gemm", "gemm_t", "gemm_tiles")
# The Hessian products' kernels: the rows strategy's, and the GEMM
# strategy's row-wise one or, on rows of few features below 32 classes
# (_dense.transposed_products), the one with each block stored transposed;
# the row-wise one's products by BLAS or by the tiles (_dense.outer_tiles);
# the tests force each, whatever the shape and the host.
PRODUCTS = ("rows", "gemm", "gemm_t", "gemm_tiles")


def _launch_mode(monkeypatch, mode):
    """Force one chunk without a parallel region ("serial") or the prange kernels ("parallel").

    Both thresholds: calls that come in a loop (as these tests' do) take
    the solvers' (_launch.calls_in_a_loop).
    """
    big = 1 << 40 if mode == "serial" else 0
    monkeypatch.setattr(_launch, "SERIAL_WORK", big)
    monkeypatch.setattr(_launch, "SERIAL_WORK_WARM", big)


def _force(kernel, monkeypatch):
    """Make the GEMM strategy take ``kernel``'s gradient kernel; return its strategy."""
    if kernel != "rows":
        transpose, tiles = kernel == "gemm_t", kernel == "gemm_tiles"
        monkeypatch.setattr(_dense, "transposed_logits", lambda n, k, itemsize: transpose)
        monkeypatch.setattr(_dense, "outer_tiles", lambda n, k, itemsize: tiles)
    return "rows" if kernel == "rows" else "gemm"


def _force_products(kernel, monkeypatch):
    """Make the GEMM strategy's Hessian products take ``kernel``'s; return its strategy."""
    if kernel != "rows":
        transpose, tiles = kernel == "gemm_t", kernel == "gemm_tiles"
        monkeypatch.setattr(_dense, "transposed_products", lambda n, k, itemsize: transpose)
        monkeypatch.setattr(_dense, "outer_tiles", lambda n, k, itemsize: tiles)
    return "rows" if kernel == "rows" else "gemm"

# ---------------------------------------------------------- loss and gradient

def test_transposed_logits_rule(monkeypatch):
    """_dense.transposed_logits: on hosts without AVX-512, rows of at most 4
    features below 32 classes, where the row-wise kernel's tiles were slower
    (BENCHMARKS.md, "Seventy-third session"); never where the outer tiles
    run at any size (hosts with AVX-512, "Sixtieth session")."""
    from fastsoftmax._kernels._config import WIDE_REGISTERS

    assert _dense._TRANSPOSED_FEATURES == 4
    t = _dense.transposed_logits
    assert not WIDE_REGISTERS or not t(2, 2, 8)
    monkeypatch.setattr(_dense, "_TILES_ANY_SIZE", True)
    assert not t(2, 2, 8) and not t(4, 10, 4) and not t(1, 31, 4)
    monkeypatch.setattr(_dense, "_TILES_ANY_SIZE", False)
    for itemsize in (4, 8):
        assert t(1, 2, itemsize) and t(4, 2, itemsize) and t(4, 31, itemsize)
        assert not t(5, 2, itemsize) and not t(20, 10, itemsize) and not t(64, 31, itemsize)
        # 32+ classes: the row-wise kernel's tiles in lanes
        assert not t(4, 32, itemsize) and not t(1, 80, itemsize)


def test_outer_tiles_rule(monkeypatch):
    """_dense.outer_tiles: on hosts without AVX-512, where the padded
    partial sum (n kp entries) takes at most 256 KiB, or at most 1 MiB up to
    64 classes (BENCHMARKS.md, "Fifty-eighth session"); at any size on hosts
    with it ("Sixtieth session"). The engine names the kernels (gradient and
    Hessian products)."""
    from fastsoftmax._kernels._config import WIDE_REGISTERS

    assert _dense._TILES_ANY_SIZE == WIDE_REGISTERS
    monkeypatch.setattr(_dense, "_TILES_ANY_SIZE", False)
    t = _dense.outer_tiles
    # float32: kp = k rounded up to 8 (AVX2) or 16 lanes
    assert t(20, 1000, 4) and t(200, 300, 4) and t(3000, 30, 4) and t(96, 10, 8)
    assert not t(96, 1000, 4) and not t(784, 300, 4) and not t(3000, 100, 4)
    assert t(3000, 30, 8) and t(96, 300, 8) and not t(200, 300, 8) and not t(3000, 80, 8)
    assert not t(40000, 3, 8) and not t(5000, 64, 8)
    monkeypatch.setattr(_dense, "_TILES_ANY_SIZE", True)
    assert t(96, 1000, 4) and t(3000, 100, 4) and t(5000, 64, 8) and t(20, 10, 4)
    X, y, W, b, sw = make_problem(np.random.default_rng(0), 300, 100, 40, np.float32)
    engine = PublicObjective(X, y, 40, None, strategy="gemm").objective.engine
    assert engine.describe()["kernel"] == engine.describe()["products"] == "gemm_tiles_lanes"
    # 300 rows of 400 bytes: one chunk for a cold call, two where earlier
    # calls ran in a loop (_launch.serial_call); blocks of 96 (AVX2's
    # rule), or one block of a chunk's rows (AVX-512's)
    rows = -(-300 // engine._chunks())
    monkeypatch.setattr(_dense, "_TILES_BLOCK_BYTES", None)
    assert engine.describe()["block_rows"] == _dense.tiles_block_rows(100, 4, rows) == 96
    assert _dense.tiles_block_rows(200, 4, 1000) == 48
    monkeypatch.setattr(_dense, "_TILES_BLOCK_BYTES", 160 << 10)
    assert engine.describe()["block_rows"] == _dense.tiles_block_rows(100, 4, rows) == rows
    # the most rows from 384, halving, whose block of X takes at most 160 KiB
    assert _dense.tiles_block_rows(50, 8, 1000) == 384
    assert _dense.tiles_block_rows(100, 8, 1000) == 192
    assert _dense.tiles_block_rows(200, 8, 1000) == 96
    assert _dense.tiles_block_rows(784, 8, 1000) == _dense.tiles_block_rows(3000, 4, 1000) == 48
    # 192 rows where a chunk's padded G takes 8 MiB or more (3000 x 1008
    # float32: 11.5 MiB), within the chunk's rows; not at 3000 x 304
    # float64 (7 MiB)
    assert _dense.tiles_block_rows(3000, 4, 1000, k=1000) == 192
    assert _dense.tiles_block_rows(3000, 4, 150, k=1000) == 150
    assert _dense.tiles_block_rows(3000, 8, 1000, k=300) == 48
    # the Hessian products by the first rule on every host
    assert _dense.tiles_block_rows(100, 8, 1000, products=True) == 48
    assert _dense.tiles_block_rows(3000, 8, 1000, products=True, k=1000) == 48
    monkeypatch.setattr(_dense, "outer_tiles", lambda n, k, itemsize: False)
    assert engine.describe()["kernel"] == engine.describe()["products"] == "gemm_lanes"


def test_transposed_products_rule(monkeypatch):
    """_dense.transposed_products: on hosts without AVX-512, rows of at most
    10 classes over at most 16 float32 or 8 float64 features
    (BENCHMARKS.md, "Fifty-sixth" and "Seventy-third session"); never on
    hosts with it. Blocks of at most the GEMM strategy's rows, Uᵀ and Pᵀ
    within 64 KiB."""
    from fastsoftmax._kernels._config import WIDE_REGISTERS

    t = _dense.transposed_products
    assert not WIDE_REGISTERS or not t(8, 2, 8)
    monkeypatch.setattr(_dense, "WIDE_REGISTERS", False)
    assert t(16, 10, 4) and t(1, 2, 4) and t(8, 10, 8) and t(1, 2, 8)
    assert not t(17, 2, 4) and not t(8, 11, 4) and not t(9, 2, 8) and not t(8, 11, 8)
    assert not t(32, 10, 4) and not t(20, 2, 8)
    monkeypatch.setattr(_dense, "WIDE_REGISTERS", True)
    assert not t(8, 2, 4) and not t(8, 2, 8)
    # The engine names the products' kernel (show_config prints it); BLAS's
    # products here, whatever the host (_dense.outer_tiles).
    monkeypatch.setattr(_dense, "outer_tiles", lambda n, k, itemsize: False)
    X, y, W, b, sw = make_problem(np.random.default_rng(0), 300, 8, 3, np.float64)
    gemm, rows_engine = (PublicObjective(X, y, 3, None, strategy=s).objective.engine
                         for s in ("gemm", "rows"))
    assert rows_engine.describe()["products"] == "rows"
    assert gemm.describe()["products"] == "gemm"  # (WIDE_REGISTERS True here)
    monkeypatch.setattr(_dense, "WIDE_REGISTERS", False)
    assert gemm.describe()["products"] == "gemm_t"
    rows = _dense.transposed_product_rows
    assert rows(2, 8, 1024) == 1024 and rows(10, 4, 1024) == 819 and rows(10, 8, 1024) == 409
    assert rows(10, 4, 512) == 512 and rows(10 ** 4, 8, 1024) == 16


def _objective_for(X, y, sw, k, strategy, soft):
    labels = None if soft else np.asarray(y, dtype=np.int64)
    targets = np.asarray(y, dtype=X.dtype) if soft else None
    return PublicObjective(X, labels if targets is None else targets, k, sw, strategy=strategy,
                           n_threads=2)


GRADIENT_VARIANTS = ("plain", "no-b", "alpha", "weights", "soft", "all")
# The tiles' kernel shares its error, weights, soft targets and intercept
# with the kernels with transposed logits and row-wise (_fused's
# _block_error_tiles): its own code is the block products, which take no
# part in a variant; each variant is a signature compiled anew (tens of
# seconds on a slow host), so the tiles run the plain one and every option
# at once.
TILES_VARIANTS = ("plain", "alpha", "all")


def _kernel_variants(kernels, ks, variants):
    return [(kernel, k, variant) for kernel in kernels for k in ks for variant in variants
            if kernel != "gemm_tiles" or variant in TILES_VARIANTS]


@pytest.mark.parametrize("kernel,k,variant",
                         _kernel_variants(KERNELS, (2, 3, 10, 31, 33, 100), GRADIENT_VARIANTS))
@pytest.mark.parametrize("mode", ["serial", "parallel"])
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_strategy_and_mode_match_reference(kernel, mode, k, dt, variant, rng, monkeypatch):
    strategy = _force(kernel, monkeypatch)
    _launch_mode(monkeypatch, mode)
    soft = variant in ("soft", "all")
    weights = variant in ("weights", "all")
    alpha = 0.3 if variant in ("alpha", "all") else 0.0
    # 203 rows: chunks of 101/102 rows leave 1-3 rows after the 4-row blocks
    # (in float32, after 8-row blocks and one of 4: 50 features, k <= 31)
    X, y, W, b, sw = make_problem(rng, 203, 50, k, dt, intercept=variant != "no-b",
                                  weights=weights, soft=soft)
    got = _objective_for(X, y, sw, k, strategy, soft)(W, b, alpha)
    assert_close(got, truth(X, y, W, b, alpha=alpha, sample_weight=sw), dt)


@njit
def _rest(X, k, arrays):
    r = rest_classes(X, k)
    return r, rest_rows(X, k, r, arrays)


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_rest_classes_rule(dt):
    """_outer.rest_classes: the classes past whole vectors; from LANES_FROM
    classes at most a quarter of a vector, on rows of REST_MIN_FEATURES
    features or more; below, at most REST_FEW_CLASSES past whole vectors of
    REST_MIN_WHOLE_CLASSES classes or more, on rows of
    REST_FEW_MIN_FEATURES features or more. rest_rows_for (the scratch's
    size) agrees with the kernels' own: enough rows, in whole cache lines."""
    L = VECTOR_BYTES // np.dtype(dt).itemsize
    for n in (REST_MIN_FEATURES - 1, REST_MIN_FEATURES, REST_FEW_MIN_FEATURES - 1,
              REST_FEW_MIN_FEATURES, 784):
        for k in (L - 1, L, L + 1, L + 2, L + 3, 2 * L + 1, 2 * L + 2, 2 * L + 3,
                  LANES_FROM - 1, LANES_FROM + 1, 6 * L + L // 4, 100):
            r = k % L
            if k >= LANES_FROM:
                want = r if n >= REST_MIN_FEATURES and 4 * r <= L else 0
            else:
                want = r if (n >= REST_FEW_MIN_FEATURES and r <= REST_FEW_CLASSES
                             and k - r >= REST_MIN_WHOLE_CLASSES) else 0
            for arrays in (2, 3):
                got, rows = _rest(np.zeros((1, n), dt), k, arrays)
                assert got == want, (n, k)
                itemsize = np.dtype(dt).itemsize
                assert rows == rest_rows_for(k, n, itemsize, arrays)
                need = -(-arrays * want * n // k)
                assert need <= rows < need + row_unit(k, itemsize)
                assert rows * k * itemsize % LINE_BYTES == 0


# Classes with a rest past whole vectors (_outer.rest_classes), on rows of
# 400 features: float32 (16 lanes) 18, 33, 36, 100 (20: none below
# LANES_FROM); float64 (8 lanes) 18, 26, 33, 98 (10: none, one whole
# vector); below and from LANES_FROM (_fused._tiles_chunk,
# _tiles_chunk_lanes).
REST_KS = [10, 18, 20, 26, 33, 36, 98, 100]


def _tiles_variant(k, n, dt):
    """The tiles' kernel variant for k classes on n features: "_lanes", "_rest" as they apply."""
    lanes = "_lanes" if k >= LANES_FROM else ""
    rest = "_rest" if rest_classes_for(k, n, np.dtype(dt).itemsize) else ""
    return "gemm_tiles" + lanes + rest


@pytest.mark.parametrize("k", REST_KS)
@pytest.mark.parametrize("mode", ["serial", "parallel"])
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_tiles_with_a_rest_of_classes_match_reference(k, mode, dt, rng, monkeypatch):
    """The tiles' kernels with the last classes by the rows kernels' tiles
    (_fused._tiles_body, where _outer.rest_classes is not 0: rows of 400
    features): every option at once against the float64 truth, on 203
    rows (chunks whose blocks end in 1-3 rows after the 4-row groups)."""
    _force("gemm_tiles", monkeypatch)
    _launch_mode(monkeypatch, mode)
    X, y, W, b, sw = make_problem(rng, 203, 400, k, dt, intercept=True, weights=True,
                                  soft=True)
    obj = _objective_for(X, y, sw, k, "gemm", True)
    assert obj.objective.engine.describe()["kernel"] == _tiles_variant(k, 400, dt)
    got = obj(W, b, 0.3)
    assert_close(got, truth(X, y, W, b, alpha=0.3, sample_weight=sw), dt)


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_tiles_kernels_without_a_rest_on_a_shape_with_one(dt, rng, monkeypatch):
    """The tiles' kernels compiled without the rest's code (_outer.no_rest)
    run every class on the padded vectors: sent a shape with a rest (its
    scratch sized for one), the gradient and the Hessian products are
    still the reference's."""
    _force("gemm_tiles", monkeypatch)
    strategy = _force_products("gemm_tiles", monkeypatch)
    monkeypatch.setattr(_dense, "rest_classes_for", lambda k, n, itemsize: 0)
    k = 33
    assert rest_rows_for(k, 400, np.dtype(dt).itemsize, 2) > 0
    X, y, W, b, sw = make_problem(rng, 203, 400, k, dt, intercept=True, weights=True,
                                  soft=True)
    W *= dt(0.25)
    obj = _objective_for(X, y, sw, k, "gemm", True)
    assert obj.objective.engine.describe()["kernel"] == "gemm_tiles_lanes"
    assert_close(obj(W, b, 0.3), truth(X, y, W, b, alpha=0.3, sample_weight=sw), dt)
    H = product(X, y, W, b, sw, 0.3, n_threads=2, strategy=strategy, mode="recompute")
    assert H.objective.engine.describe()["products"] == "gemm_tiles_lanes"
    V = rng.standard_normal(W.shape).astype(dt)
    assert_hessp_close(H, X, y, W, b, V, rng.standard_normal(k).astype(dt), 0.3, sw)


@pytest.mark.parametrize("k", [10, 33])
@pytest.mark.parametrize("mode", ["serial", "parallel"])
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_tiles_on_rows_that_alias(k, mode, dt, rng, monkeypatch):
    """Rows a whole multiple of _outer.ALIAS_BYTES long, which AVX2 hosts
    copy block by block into rows a line longer (_outer.pack_block) for
    the tiles' products: the gradient and the Hessian products, P stored
    and recomputed, the reference's, on 203 rows (blocks of 48, the last
    of 11 or 7; at 33 classes float32 a rest of classes read from X
    itself)."""
    _force("gemm_tiles", monkeypatch)
    strategy = _force_products("gemm_tiles", monkeypatch)
    _launch_mode(monkeypatch, mode)
    n = ALIAS_BYTES // np.dtype(dt).itemsize
    X, y, W, b, sw = make_problem(rng, 203, n, k, dt, intercept=True, weights=True,
                                  soft=True)
    W *= dt(0.2)
    obj = _objective_for(X, y, sw, k, "gemm", True)
    assert obj.objective.engine.describe()["kernel"] == _tiles_variant(k, n, dt)
    assert_close(obj(W, b, 0.3), truth(X, y, W, b, alpha=0.3, sample_weight=sw), dt)
    for hmode in MODES:
        H = product(X, y, W, b, sw, 0.3, n_threads=2, strategy=strategy, mode=hmode)
        assert H.objective.engine.describe()["products"] == _tiles_variant(k, n, dt)
        V = rng.standard_normal(W.shape).astype(dt)
        assert_hessp_close(H, X, y, W, b, V, rng.standard_normal(k).astype(dt), 0.3, sw)


@pytest.mark.parametrize("k", [7, 20, 33, 100])
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_tiles_blocks_start_on_a_cache_line(k, dt, rng, monkeypatch):
    """The tiles' scratch (_outer.LINE_BYTES): every chunk's first block of
    logits, the Hessian products' block of U after the block of P, and the
    stored P start on a line, whatever k."""
    _force("gemm_tiles", monkeypatch)
    strategy = _force_products("gemm_tiles", monkeypatch)
    X, y, W, b, sw = make_problem(rng, 203, 400, k, dt, intercept=True)
    H = product(X, y, W, b, None, 0.3, n_threads=2, strategy=strategy, mode="cached")
    H.matvec(rng.standard_normal(W.shape).astype(dt), np.zeros(k, dt))
    engine = H.objective.engine
    itemsize = np.dtype(dt).itemsize
    scratch = engine._buffers[("gradient", engine._chunks())][-1]
    products = engine._buffers[("hessp", engine._chunks())][-1]
    rows = (products.shape[1] - rest_rows_for(k, 400, itemsize, 3)) // 2  # a block and its spare
    assert rows > spare_rows_for(k, itemsize)
    for buf in (scratch, products):
        for c in range(buf.shape[0]):
            assert buf[c].ctypes.data % LINE_BYTES == 0
    assert products[0, rows:].ctypes.data % LINE_BYTES == 0
    assert engine.proba_buffer().ctypes.data % LINE_BYTES == 0
    assert all(row_unit(j, itemsize) * j * itemsize % LINE_BYTES == 0 for j in range(1, 70))


@pytest.mark.parametrize("k", REST_KS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_tiles_products_with_a_rest_of_classes_match_reference(k, mode, dt, launch, rng,
                                                                monkeypatch):
    """The tiles' Hessian products with the last classes by the rows
    kernels' tiles (_hessp._hessp_tiles_body, rows of 400 features), P
    stored and recomputed, serial and parallel: every option at once
    against the reference, on 203 rows, two directions at one point."""
    strategy = _force_products("gemm_tiles", monkeypatch)
    X, y, W, b, sw = make_problem(rng, 203, 400, k, dt, intercept=True, weights=True,
                                  soft=True)
    W *= dt(0.25)  # logits of 400 features as the other tests' of 50
    H = product(X, y, W, b, sw, 0.3, n_threads=2, strategy=strategy, mode=mode)
    assert H.objective.engine.describe()["products"] == _tiles_variant(k, 400, dt)
    for _ in range(2):
        V = rng.standard_normal(W.shape).astype(dt)
        c = rng.standard_normal(k).astype(dt)
        assert_hessp_close(H, X, y, W, b, V, c, 0.3, sw)


@pytest.mark.parametrize("k", [18, 33])
@pytest.mark.parametrize("row", [0, 101, 102, 200, 202])
@pytest.mark.parametrize("feature", [5, 399])
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_tiles_with_a_rest_catch_nonfinite_x(k, row, feature, dt, monkeypatch):
    """A NaN of X in a row of a chunk's 4-row groups or of its last rows
    (chunks of 101 and 102 rows), in the first or the last feature: named
    by the error, with all-zero weights (the rest's logits take it too)."""
    _force("gemm_tiles", monkeypatch)
    _launch_mode(monkeypatch, "parallel")
    rng = np.random.default_rng(2)
    X = rng.standard_normal((203, 400)).astype(dt)
    X[row, feature] = np.nan
    # 18 and 33 classes: a rest of two and of one in both dtypes (whole
    # vectors of 16 and 8), below and from LANES_FROM
    obj = _objective_for(X, rng.integers(0, k, 203), None, k, "gemm", False)
    with np.errstate(all="ignore"), pytest.raises(ValueError, match=f"not finite at row {row}"):
        obj(np.zeros((400, k), dt), np.zeros(k, dt))


@pytest.mark.parametrize("k", range(1, 14))
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_rows_blocks_of_every_class_count(k, dt, rng):
    # The rows kernels split the classes into register blocks of 5 (float64
    # on AVX-512 hosts), 3, 2 and 1 by what remains (_kernels._micro): k = 1
    # to 13 runs every sequence of them, at four rows a block plus 1-3 left;
    # the float32 logits of eight rows (_ahead's 8 x 2 and 8 x 1 tiles, 50
    # features here) blocks of 2 and 1.
    X, y, W, b, sw = make_problem(rng, 203, 50, k, dt, weights=True)
    got = _objective_for(X, y, sw, k, "rows", False)(W, b, 0.0)
    assert_close(got, truth(X, y, W, b, sample_weight=sw), dt)


@pytest.mark.parametrize("mode", ["serial", "parallel"])
@pytest.mark.parametrize("n", [127, 128, 131])
@pytest.mark.parametrize("k", [2, 7, 13])
@pytest.mark.parametrize("variant", ["plain", "all"])
def test_rows_kernel_of_long_float64_rows(mode, n, k, variant, rng, monkeypatch):
    """On AVX-512 hosts, float64 rows of _dense._WIDE_ROWS_FEATURES or more
    go to the rows kernels' specialisation with 512-bit vectors (the marker
    _kernels._width.FLOAT64_512, tests/test_width.py), shorter rows and
    float32 to the other; elsewhere every row to the other (one
    specialisation compiled, not two alike); either way the reference's
    results (gradient and Hessian products), serial and parallel."""
    from fastsoftmax._data import make_dataset
    from fastsoftmax._kernels._config import WIDE_REGISTERS
    from fastsoftmax._kernels._width import DEFAULT_WIDTH, FLOAT64_512

    _launch_mode(monkeypatch, mode)
    soft = weights = variant == "all"
    X, y, W, b, sw = make_problem(rng, 203, n, k, np.float64, weights=weights, soft=soft)
    labels = None if soft else y
    targets = y if soft else None
    data = make_dataset(X, labels, targets, sw, k)
    wide = WIDE_REGISTERS and n >= _dense._WIDE_ROWS_FEATURES
    assert _dense.DenseEngine(data, "rows")._width is (FLOAT64_512 if wide else DEFAULT_WIDTH)
    data32 = make_dataset(X.astype(np.float32), labels,
                          None if targets is None else targets.astype(np.float32),
                          None if sw is None else sw.astype(np.float32), k)
    assert _dense.DenseEngine(data32, "rows")._width is DEFAULT_WIDTH
    got = _objective_for(X, y, sw, k, "rows", soft)(W, b, 0.2)
    assert_close(got, truth(X, y, W, b, alpha=0.2, sample_weight=sw), np.float64)
    if not soft:  # Hessian products (the same kernels' rule), P cached and recomputed
        V = rng.standard_normal(W.shape)
        c = rng.standard_normal(k)
        for hmode in MODES:
            H = product(X, y, W, b, sw, 0.2, n_threads=2, strategy="rows", mode=hmode)
            assert_hessp_close(H, X, y, W, b, V, c, 0.2, sw)


@pytest.mark.parametrize("dt,n,least", [
    ("float32", 95, None), ("float32", 96, "short"), ("float32", 127, "short"),
    ("float32", 128, "long"), ("float64", 64, None), ("float64", 72, "long")])
def test_which_rows_are_read_ahead(dt, n, least):
    """Rows of 512 bytes or more in float32, 576 in float64 (64 features
    there made the Hessian products slower), X of TOUCH_X_BYTES or more;
    float32 rows of 384 to 511 bytes from X of TOUCH_SHORT_X_BYTES."""
    from fastsoftmax._calibration import rows_read_ahead
    from fastsoftmax._kernels._common import TOUCH_SHORT_X_BYTES, TOUCH_X_BYTES, _touches

    itemsize = np.dtype(dt).itemsize
    row = n * itemsize
    big = 2 * max(TOUCH_X_BYTES, TOUCH_SHORT_X_BYTES) // row  # np.empty: nothing is written
    assert _touches(np.empty((big, n), dt)) == (least is not None)
    sizes = [0, big]
    if least is not None:
        floor = TOUCH_X_BYTES if least == "long" else TOUCH_SHORT_X_BYTES
        assert _touches(np.empty((floor // row + 1, n), dt))
        assert not _touches(np.empty((floor // row - 1, n), dt))
        sizes += [floor // row - 1, floor // row + 1]
    # the rule as the calibration reads it in Python (grid_cell) agrees
    for m in sizes:
        assert rows_read_ahead(m, n, itemsize) == _touches(np.empty((m, n), dt))


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("n,k", [(210, 3), (300, 30), (100, 3), (1100, 5), (1100, 10),
                                 (1100, 31)])
@pytest.mark.parametrize("mode", ["serial", "parallel"])
def test_rows_kernels_reading_ahead(dt, n, k, mode, rng, monkeypatch):
    """X just beyond the size from which the rows kernels read each block
    of rows in order before their tiles do (_common._touch: TOUCH_X_BYTES
    for long rows; TOUCH_SHORT_X_BYTES for float32 rows of 100 features),
    in the float32 blocks of transposed logits (k <= 31 over at most
    ERROR_T_MAX_FEATURES features, or longer rows of at least PANEL_MIN_K
    classes, whose gradient and Hessian products go in panels of features:
    (1100, 10), three panels, the last partial; n = 100 and 210 take the eight-row
    logits) and in the four- and eight-row loop (n = 300, (1100, 5)); an odd number of
    rows leaves a partial block at each chunk's end. Gradient and Hessian
    products (P cached and recomputed) against the reference."""
    from fastsoftmax._kernels._common import (
        TOUCH_ROW_BYTES,
        TOUCH_ROW_BYTES_64,
        TOUCH_SHORT_X_BYTES,
        TOUCH_X_BYTES,
        _touches,
    )

    _launch_mode(monkeypatch, mode)
    itemsize = np.dtype(dt).itemsize
    long_rows = n * itemsize >= (TOUCH_ROW_BYTES if itemsize == 4 else TOUCH_ROW_BYTES_64)
    m = (TOUCH_X_BYTES if long_rows else TOUCH_SHORT_X_BYTES) // (n * itemsize) + 37
    X, y, W, b, sw = make_problem(rng, m, n, k, dt, weights=True)
    assert _touches(X)
    got = _objective_for(X, y, sw, k, "rows", False)(W, b, 0.1)
    assert_close(got, truth(X, y, W, b, alpha=0.1, sample_weight=sw), dt)
    V = rng.standard_normal(W.shape).astype(dt)
    c = rng.standard_normal(k).astype(dt)
    for hmode in MODES:
        H = product(X, y, W, b, sw, 0.1, n_threads=2, strategy="rows", mode=hmode)
        assert_hessp_close(H, X, y, W, b, V, c, 0.1, sw)


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("n,k", [(210, 3), (300, 30)])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_rows_kernels_reading_ahead_catch_nonfinite_x(dt, n, k, bad, rng):
    """X read ahead (on AVX-512 hosts by the prefetching tiles of
    _kernels._ahead): a NaN or inf of X, in a row deep in the second chunk
    and in the features of the tiles' masked last step, is reported with
    its row."""
    from fastsoftmax._kernels._common import TOUCH_X_BYTES, _touches

    itemsize = np.dtype(dt).itemsize
    m = TOUCH_X_BYTES // (n * itemsize) + 37
    X, y, W, b, _ = make_problem(rng, m, n, k, dt)
    assert _touches(X)
    row = m // 2 + 1001
    X[row, n - 1] = bad
    obj = _objective_for(X, y, None, k, "rows", False)
    with np.errstate(all="ignore"), pytest.raises(ValueError, match=f"not finite at row {row}"):
        obj(np.zeros_like(W), b)


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", [(2000, 160, 10), (2000, 20, 10), (3000, 50, 60)])
def test_public_function_on_shapes_of_each_rule_branch(shape, dt, rng):
    m, n, k = shape
    X, y, W, b, _ = make_problem(rng, m, n, k, dt)
    W *= 0.2
    assert_close(fs.loss_and_grad(X, y, W, b), truth(X, y, W, b), dt)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("mode", ["serial", "parallel"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("row", [37, 100, 133, 145, 149])
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_nonfinite_x_is_caught_by_the_kernel(kernel, mode, bad, row, dt, monkeypatch):
    """loss_and_grad does not pre-scan X: every kernel must see a NaN/inf
    of X in the logits, even with all-zero weights (x * 0 is NaN). The rows
    kernel's blocks in one chunk of 150 rows: rows 37 and 100 are in the
    two blocks of 64 with their error on transposed logits (float32), 133 in the
    second half of an eight-row block (float32 on AVX-512), 145 in a block
    of four, 149 in the last block of fewer than four rows; in two chunks
    of 75, 133 is in a transposed block and 145 in an eight-row one."""
    strategy = _force(kernel, monkeypatch)
    _launch_mode(monkeypatch, mode)
    rng = np.random.default_rng(1)
    X = rng.standard_normal((150, 50)).astype(dt)
    X[row, 11] = bad
    obj = _objective_for(X, rng.integers(0, 4, 150), None, 4, strategy, False)
    with np.errstate(all="ignore"), pytest.raises(ValueError, match=f"not finite at row {row}"):
        obj(np.zeros((50, 4), dt), np.zeros(4, dt))


@pytest.mark.parametrize("kernel,k", [("rows", 4), ("gemm", 4), ("gemm_t", 4), ("gemm", 40),
                                      ("gemm_tiles", 4), ("gemm_tiles", 40), ("split", 40)])
@pytest.mark.parametrize("where", ["W", "b"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_nonfinite_weights_are_caught_by_the_kernel(kernel, k, where, bad, dt, monkeypatch):
    """On dense X, loss_and_grad scans W and b only once the kernel has
    found a non-finite logit: every kernel must see a NaN/inf weight in the
    logits, even one of a feature that is zero in every row (0 * NaN is
    NaN), and the error then names the weight, not the logits."""
    calls = {"gradient": 0}
    if kernel == "split":
        calls = _force_split(monkeypatch)
        strategy = "gemm"
    else:
        strategy = _force(kernel, monkeypatch)
    monkeypatch.setenv("FASTSOFTMAX_STRATEGY", strategy)
    rng = np.random.default_rng(2)
    n = 60
    X = rng.standard_normal((40, n)).astype(dt)
    X[:, 11] = 0
    W = rng.standard_normal((n, k)).astype(dt)
    b = np.zeros(k, dt)
    if where == "W":
        W[11, 2] = bad
        match = r"W contains -?(NaN|inf) at row 11, column 2"
    else:
        b[2] = bad
        match = r"b contains -?(NaN|inf) at index 2"
    y = rng.integers(0, k, 40)
    with np.errstate(all="ignore"), pytest.raises(ValueError, match=match):
        fs.loss_and_grad(X, y, W, b, n_threads=2)
    assert calls["gradient"] == (kernel == "split")
    obj = _objective_for(X, y, None, k, strategy, False)
    assert obj.strategy == strategy
    with np.errstate(all="ignore"), pytest.raises(ValueError, match="not finite at row"):
        obj(W, b)


@pytest.mark.parametrize("k", [3, 10, 40])
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("soft", [False, True], ids=["labels", "soft"])
def test_rows_and_gemm_strategies_agree(k, dt, soft, rng):
    X, y, W, b, sw = make_problem(rng, 157, 9, k, dt, weights=True, soft=soft)
    results = {}
    for strategy in ("rows", "gemm"):
        obj = PublicObjective(X, y, k, sw, n_threads=2, strategy=strategy)
        assert obj.strategy == strategy
        results[strategy] = obj(W, b, 0.1)
    assert_close(results["rows"], results["gemm"], dt)
    assert_close(results["rows"], truth(X, y, W, b, alpha=0.1, sample_weight=sw), dt)


@pytest.mark.parametrize("m", [700, 5000], ids=["one-block-per-chunk", "blocks-of-2048"])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_gemm_blocks_when_the_partial_sum_outgrows_the_cache(m, n_threads, rng):
    """n k float64 above _dense._G_CACHE_BYTES_64: GEMM blocks hold a whole chunk,
    or 2048 rows with a second block added into the chunk's sum by BLAS
    (beta = 1); gradient and Hessian products match the reference either way."""
    n, k = 300, 450
    assert n * k * 8 > _dense._G_CACHE_BYTES_64
    X, y, W, b, sw = make_problem(rng, m, n, k, np.float64, weights=True)
    W *= 0.1
    obj = PublicObjective(X, y, k, sw, n_threads=n_threads, strategy="gemm")
    assert_close(obj(W, b, 0.1), truth(X, y, W, b, alpha=0.1, sample_weight=sw), np.float64)
    V = rng.standard_normal(W.shape)
    c = rng.standard_normal(k)
    got = fs.hessp(X, y, W, b, V, c, alpha=0.1, sample_weight=sw, n_threads=n_threads)
    want = ref.hessp(X, y, W, b, V, c, alpha=0.1, sample_weight=sw)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12 * np.abs(w).max())


def test_block_rows_rule():
    """Rows per GEMM block (_dense.gemm_block_rows): narrow rows of many
    classes over few weights take the largest power of two of rows whose X
    block and logits fit the block bytes (at least _MIN_BLOCK_ROWS);
    fewer classes, wider rows, more weights and partial sums past
    _G_CACHE_BYTES (float32) or _G_CACHE_BYTES_64 (float64) keep the other rules."""
    g = _dense.gemm_block_rows
    fit = 1 << 16  # the default budget
    assert g(20, 4, 100, 50000) == 128  # (20 + 100) 4 128 = 61 KiB <= 64 KiB < 2x
    assert g(20, 4, 100, 50000) * 120 * 4 <= fit < 2 * g(20, 4, 100, 50000) * 120 * 4
    assert g(20, 4, 1000, 5000) == _dense._MIN_BLOCK_ROWS  # 16 rows would fit: the floor
    assert g(20, 8, 50, 100000) == 64
    assert g(20, 8, 50, 100000, block_bytes=1 << 17) == 128  # a host's calibrated budget
    assert g(20, 4, 10, 150000) == 1024  # fewer than LANES_FROM classes: X's block alone
    assert g(784, 4, 48, 30000) == g(784, 4, 10, 30000) == 83  # wide rows: X's block alone
    assert g(100, 8, 100, 10000) == 32  # 40 rows fit
    assert g(200, 4, 300, 10000) == 327  # more than _NARROW_FEATURES: X's block alone
    assert g(96, 4, 400, 10000) == 682  # more than _NARROW_WEIGHTS: X's block alone
    assert g(20, 4, 3000, 2500) == 1024  # likewise
    assert g(20, 8, 3000, 2500) == 2048  # 480 KiB of partial sums, small chunks: whole chunks
    assert g(20, 8, 8000, 2500) == 2048  # n k 8 > _G_CACHE_BYTES_64: whole chunks
    assert g(784, 8, 100, 1500) == 64  # 612 KiB of float64 partial sums, 9.4 MB chunks: L2
    assert g(784, 8, 100, 1000) == 1000  # the same on chunks of 6.3 MB of X: whole chunks
    assert g(784, 4, 100, 1500) == 1500  # 306 KiB of float32 ones: the whole chunk


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("launch", ["serial", "parallel"])
def test_narrow_rows_many_classes_in_several_blocks(dt, launch, rng, monkeypatch):
    """Narrow rows of many classes: chunks of several small blocks (the last
    one partial), each block's Xᵀ E added into the chunk's sum by BLAS in
    place; gradient and Hessian products (P recomputed and cached) match the
    reference."""
    n_threads = 2 if launch == "parallel" else 1
    if launch == "parallel":
        monkeypatch.setattr(_launch, "SERIAL_WORK", 0)
    m, n, k = 703, 20, 100
    rows = _dense.gemm_block_rows(n, np.dtype(dt).itemsize, k, m)
    assert m // 2 > 2 * rows and (m // 2) % rows
    X, y, W, b, sw = make_problem(rng, m, n, k, dt, weights=True)
    W *= 0.3
    obj = PublicObjective(X, y, k, sw, n_threads=n_threads, strategy="gemm")
    assert_close(obj(W, b, 0.1), truth(X, y, W, b, alpha=0.1, sample_weight=sw), dt)
    V = rng.standard_normal(W.shape).astype(dt)
    c = rng.standard_normal(k).astype(dt)
    want = ref.hessp(f64(X), y, f64(W), f64(b), f64(V), f64(c), alpha=0.1,
                     sample_weight=f64(sw))
    got = fs.hessp(X, y, W, b, V, c, alpha=0.1, sample_weight=sw, n_threads=n_threads)
    tol = HESSP_TOL[np.dtype(dt)]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * np.abs(w).max())


def _assert_split_matches(X, y, W, b, sw, k, soft, alpha, force):
    """The GEMM pass that ``force()`` makes split by features (it returns a
    counter of the split's gradient calls): loss and gradient against the
    float64 reference and the row split, and P when stored."""
    dt = X.dtype.type
    rows = _objective_for(X, y, sw, k, "gemm", soft)(W, b, alpha)
    calls = force()
    got = _objective_for(X, y, sw, k, "gemm", soft)(W, b, alpha)
    assert calls["gradient"] == 1
    assert_close(got, truth(X, y, W, b, alpha=alpha, sample_weight=sw), dt)
    assert_close(got, rows, dt)
    labels = np.asarray(y, dtype=dt) if soft else y
    H = product(X, labels, W, b, sw, alpha, n_threads=2, strategy="gemm", mode="cached")
    assert calls["gradient"] == 2
    eps = np.finfo(dt).eps
    P64 = ref.softmax(f64(X) @ f64(W) + (0 if b is None else f64(b)))
    np.testing.assert_allclose(H.P, P64, rtol=0, atol=(64 if dt == np.float32 else 8) * eps)


def _force_split(monkeypatch):
    """Make every parallel GEMM pass of 32+ classes split its backward product by
    features (_dense.split_features); return counters of the two kernels' calls."""
    for name, value in (("_SPLIT_G_BYTES", 0), ("_SPLIT_MIN_FEATURES", 0),
                        ("_SPLIT_ROWS_PER_FEATURE", 1 << 30),
                        ("_TILES_ANY_SIZE", False)):
        monkeypatch.setattr(_dense, name, value)
    # (BLAS's split, not the tiles': _dense.tiles_split)
    monkeypatch.setattr(_dense, "tiles_split", lambda m, n, k, itemsize, chunks: False)
    _dense._layout.cache_clear()  # layouts kept under the constants before
    monkeypatch.setattr(_launch, "SERIAL_WORK", 0)
    monkeypatch.setattr(_launch, "SERIAL_WORK_WARM", 0)
    calls = {"gradient": 0, "hessp": 0}
    for what, name in (("gradient", "_loss_grad_gemm_split"), ("hessp", "_hessp_gemm_split")):
        kernel = getattr(_dense, name)

        def spy(*args, _kernel=kernel, _what=what):
            calls[_what] += 1
            return _kernel(*args)

        monkeypatch.setattr(_dense, name, spy)
    return calls


def test_split_by_features_rule(monkeypatch):
    """_dense.split_features: 32+ classes, n k of at least _SPLIT_G_BYTES, no
    more than _SPLIT_ROWS_PER_FEATURE rows a feature, at least
    _SPLIT_MIN_FEATURES features a thread; never where the outer tiles run at
    any size (AVX-512 hosts: the tiles' own split, _dense.tiles_split)."""
    s = _dense.split_features
    monkeypatch.setattr(_dense, "_TILES_ANY_SIZE", False)
    assert s(1000, 3000, 1000, 4, 2) and s(700, 784, 1000, 8, 2) and s(3000, 3000, 100, 4, 2)
    assert s(1000, 1000, 1000, 4, 2) and not s(1001, 1000, 1000, 4, 2)  # a row a feature
    assert not s(1000, 3000, 31, 8, 2)  # fewer than LANES_FROM classes
    assert not s(100, 300, 300, 8, 2) and not s(500, 784, 100, 8, 2)  # n k < 1 MiB
    assert s(500, 1024, 256, 4, 2) and not s(500, 1024, 255, 4, 2)  # the bound, 1 MiB
    assert not s(1000, 1000, 1000, 4, 32)  # 31 features a thread
    monkeypatch.setattr(_dense, "_TILES_ANY_SIZE", True)
    assert not s(100, 3000, 1000, 8, 2) and not s(1000, 3000, 1000, 4, 16)


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("k", [33, 100])
@pytest.mark.parametrize("variant", ["plain", "no-b", "alpha", "weights", "soft", "all"])
def test_gemm_split_by_features_matches_reference(dt, k, variant, rng, monkeypatch):
    """The GEMM pass whose backward product is split by features: loss and
    gradient (and P when stored) against the float64 reference, and the same
    results as the row split up to the order of the sums."""
    soft = variant in ("soft", "all")
    weights = variant in ("weights", "all")
    alpha = 0.3 if variant in ("alpha", "all") else 0.0
    # 203 rows, 45 features: two chunks of each, of 101 and 102 rows, 22 and 23 features
    X, y, W, b, sw = make_problem(rng, 203, 45, k, dt, intercept=variant != "no-b",
                                  weights=weights, soft=soft)
    _assert_split_matches(X, y, W, b, sw, k, soft, alpha, lambda: _force_split(monkeypatch))


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("variant", HESSP_VARIANTS)
def test_gemm_split_hessp_matches_reference(dt, mode, variant, rng, monkeypatch):
    """Hessian products split by features, P cached or recomputed, against
    the float64 reference."""
    calls = _force_split(monkeypatch)
    weights, intercept = variant in ("weights", "all"), variant != "no-b"
    alpha = 0.2 if variant in ("alpha", "all") else 0.0
    X, y, W, b, sw = make_problem(rng, 203, 45, 40, dt, intercept=intercept, weights=weights)
    V = rng.standard_normal(W.shape).astype(dt)
    c = rng.standard_normal(40).astype(dt) if intercept else None
    H = product(X, y, W, b, sw, alpha, n_threads=2, strategy="gemm", mode=mode)
    assert_hessp_close(H, X, y, W, b, V, c, alpha, sw)
    assert calls["hessp"] == 1


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("row", [3, 150])
@pytest.mark.parametrize("split", ["blas", "tiles"])
def test_split_reports_nonfinite_logits(split, bad, row, rng, monkeypatch):
    """A NaN or inf in X, in either row chunk, is reported by row by both
    splits by features (BLAS's, the tiles'); the gradient is not written."""
    calls = (_force_split if split == "blas" else _force_tiles_split)(monkeypatch)
    X, y, W, b, _ = make_problem(rng, 203, 45, 40, np.float64)
    X[row, 7] = bad
    obj = _objective_for(X, y, None, 40, "gemm", False)
    with np.errstate(all="ignore"), pytest.raises(ValueError, match=f"not finite at row {row}"):
        obj(np.zeros_like(W), b)
    assert calls["gradient"] == 1


def _force_tiles_split(monkeypatch, block_rows=None):
    """Make every parallel GEMM gradient of LANES_FROM+ classes without a rest
    run the tiles split by features (_dense.tiles_split), in blocks of
    ``block_rows`` rows if given; return a counter of its kernel's calls
    ({"gradient": n}, as _force_split's)."""
    for name, value in (("_TILES_SPLIT_MIN_CLASSES", LANES_FROM), ("_SPLIT_MIN_FEATURES", 0),
                        ("_TILES_SPLIT_CHUNK_ROWS", 1 << 30)):
        monkeypatch.setattr(_dense, name, value)
    monkeypatch.setattr(_dense, "outer_tiles", lambda n, k, itemsize: True)
    if block_rows is not None:
        monkeypatch.setattr(_dense, "tiles_block_rows", lambda *a, **kw: block_rows)
    _dense._layout.cache_clear()  # layouts kept under the constants before
    monkeypatch.setattr(_launch, "SERIAL_WORK", 0)
    monkeypatch.setattr(_launch, "SERIAL_WORK_WARM", 0)
    calls = {"gradient": 0}
    kernel = _dense._loss_grad_tiles_split

    def spy(*args):
        calls["gradient"] += 1
        return kernel(*args)

    monkeypatch.setattr(_dense, "_loss_grad_tiles_split", spy)
    return calls


def test_tiles_split_rule(monkeypatch):
    """_dense.tiles_split: more than one chunk, of at most
    _TILES_SPLIT_CHUNK_ROWS rows, at least _TILES_SPLIT_MIN_CLASSES classes
    (and LANES_FROM), _SPLIT_MIN_FEATURES features a thread, the outer
    tiles for the GEMM products, none of the classes left to the rows
    kernels' tiles (rest_classes)."""
    s = _dense.tiles_split
    assert _dense._TILES_SPLIT_MIN_CLASSES >= LANES_FROM
    monkeypatch.setattr(_dense, "outer_tiles", lambda n, k, itemsize: True)
    assert s(1000, 3000, 1000, 4, 2) and s(1000, 784, 1000, 8, 2) and s(100, 3000, 1000, 4, 2)
    assert s(1024, 784, 1000, 4, 2) and not s(1025, 784, 1000, 4, 2)  # 512 rows a chunk
    assert s(8192, 784, 1000, 4, 16) and not s(8193, 784, 1000, 4, 16)
    assert s(1000, 784, 256, 4, 2) and not s(1000, 784, 255, 8, 2)  # the classes
    assert not s(100, 784, 255, 8, 2)  # ... in small chunks too
    monkeypatch.setattr(_dense, "_TILES_SPLIT_MIN_CLASSES", 0)  # LANES_FROM at least
    assert s(1000, 784, LANES_FROM, 8, 2) and not s(1000, 784, LANES_FROM - 1, 8, 2)
    monkeypatch.setattr(_dense, "_TILES_SPLIT_MIN_CLASSES", 256)
    assert not s(1000, 784, 1000, 4, 1)  # one chunk: nothing to split
    assert s(1000, 64, 1000, 4, 2) and not s(1000, 63, 1000, 4, 2)  # 32 features a thread
    # A rest of classes (258 float32 classes: 2 past whole vectors of 8 or 16
    # lanes, on 96+ features); none at 256
    assert rest_classes_for(258, 784, 4) == 2 and not s(1000, 784, 258, 4, 2)
    assert rest_classes_for(256, 784, 4) == 0 and s(1000, 784, 256, 4, 2)
    monkeypatch.setattr(_dense, "outer_tiles", lambda n, k, itemsize: False)
    assert not s(1000, 3000, 1000, 4, 2)


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("k", [33, 48])
@pytest.mark.parametrize("variant", TILES_VARIANTS)
@pytest.mark.parametrize("block_rows", [None, 16])
def test_tiles_split_matches_reference(dt, k, variant, block_rows, rng, monkeypatch):
    """The tiles' gradient split by features: loss and gradient (and P when
    stored) against the float64 reference and the row split, with each
    chunk in one block or several; k = 33 pads a vector (its lanes run on
    into the next row), 48 is whole vectors in both dtypes."""
    soft = variant == "all"
    weights = variant == "all"
    alpha = 0.3 if variant in ("alpha", "all") else 0.0
    # 203 rows, 45 features: two chunks, of 101 and 102 rows
    X, y, W, b, sw = make_problem(rng, 203, 45, k, dt, weights=weights, soft=soft)
    _assert_split_matches(X, y, W, b, sw, k, soft, alpha,
                          lambda: _force_tiles_split(monkeypatch, block_rows))


@pytest.mark.parametrize("chunks", [3, 4])
def test_tiles_split_over_more_chunks(chunks, rng, monkeypatch):
    """More chunks than two (as on more threads): each part's features over
    every chunk's rows of E in turn; 21 features in 4 parts leave one part
    without a tile of features."""
    calls = _force_tiles_split(monkeypatch, 16)
    monkeypatch.setattr(_dense, "n_chunks", lambda m: chunks)
    for n in (45, 21):
        X, y, W, b, _ = make_problem(rng, 203, n, 40, np.float64)
        obj = _objective_for(X, y, None, 40, "gemm", False)
        assert_close(obj(W, b, 0.1), truth(X, y, W, b, alpha=0.1), np.float64)
        assert obj.objective.engine._chunks() == chunks
    assert calls["gradient"] == 2


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape,cols", [((2, 7, 5), 5), ((3, 40, 19), 17), ((2, 1, 3), 3),
                                        ((5, 3, 8), 8), ((16, 33, 24), 20), ((1, 9, 6), 4)])
@pytest.mark.parametrize("alpha", [0.0, 0.3])
@pytest.mark.parametrize("parts", [1, 2, 3])
def test_sum_chunks_equals_numpy(dt, shape, cols, alpha, parts, rng):
    """_kernels._fused._sum_chunks (and _sum_chunks_one): the chunks' sum over
    the first cols columns, bit for bit NumPy's sum over the chunk axis,
    whatever the chunk count next to the rows and the parts; then alpha W
    added as _penalty.add_l2 adds it, and each row's Σ W² (float64), the
    same whatever the parts. W wider than cols (the tiles' padded Wp): its
    extra columns are not read."""
    from fastsoftmax._kernels._fused import _sum_chunks, _sum_chunks_one
    from fastsoftmax._penalty import l2_penalty

    G = rng.standard_normal(shape).astype(dt)
    W = rng.standard_normal((shape[1], shape[2] + 3)).astype(dt)
    W[:, cols:] = np.nan  # never read
    G0, W0 = G.copy(), W.copy()
    want = G[:, :, :cols].sum(axis=0)
    want += dt(alpha) * W[:, :cols]
    want_squares = l2_penalty(W[:, :cols], 1.0) * 2 if alpha else 0.0
    # Without the L2 term bit for bit; with it, to the last bits (fast-math
    # may fuse the multiply and add).
    rtol = 0 if not alpha else (1e-14 if dt == np.float64 else 1e-6)
    out = np.full((shape[1], cols), np.nan, dt)
    squares = np.full(shape[1] if alpha else 0, np.nan)
    _sum_chunks(G, W, dt(alpha), out, squares, parts)
    np.testing.assert_allclose(out, want, rtol=rtol, atol=rtol)
    assert squares.sum() == pytest.approx(want_squares, rel=1e-12)
    out[...] = np.nan
    squares_one = np.full_like(squares, np.nan)
    _sum_chunks_one(G, W, dt(alpha), out, squares_one)
    np.testing.assert_allclose(out, want, rtol=rtol, atol=rtol)
    np.testing.assert_array_equal(squares_one, squares)  # whatever the parts
    np.testing.assert_array_equal(G, G0)
    np.testing.assert_array_equal(W, W0)


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", [(1, 1), (31, 33), (70, 100), (129, 5)])
def test_pad_copy_writes_only_the_first_columns(dt, shape, rng):
    """_kernels._fused._pad_copy: Wp[:, :k] = W, Wp's padding untouched."""
    from fastsoftmax._kernels._fused import _pad_copy

    W = rng.standard_normal(shape).astype(dt)
    W0 = W.copy()
    Wp = np.full((shape[0], shape[1] + 7), -1.0, dt)
    _pad_copy(W, Wp)
    np.testing.assert_array_equal(Wp[:, :shape[1]], W)
    assert (Wp[:, shape[1]:] == -1).all()
    np.testing.assert_array_equal(W, W0)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_parallel_sum_of_partial_sums(kernel, dt, rng, monkeypatch):
    """The partial sums reduced by the parallel kernel (any size, with
    _PARALLEL_SUM_BYTES at 0) give the NumPy reduction's gradient and
    Hessian products bit for bit, every kernel (the tiles' sums padded to
    whole vectors of classes, the rows strategy's to aligned rows)."""
    strategy = _force(kernel, monkeypatch)
    monkeypatch.setattr(_launch, "SERIAL_WORK", 0)
    X, y, W, b, sw = make_problem(rng, 301, 45, 12, dt, weights=True)
    V = rng.standard_normal(W.shape).astype(dt)
    c = rng.standard_normal(12).astype(dt)

    def run():
        obj = PublicObjective(X, y, 12, sw, n_threads=2, strategy=strategy)
        H = product(X, y, W, b, sw, 0.1, n_threads=2, strategy=strategy, mode="cached")
        return (*obj(W, b, 0.1), *H.matvec(V.T, c))

    monkeypatch.setattr(_dense, "_PARALLEL_SUM_BYTES", 1 << 40)
    want = run()
    monkeypatch.setattr(_dense, "_PARALLEL_SUM_BYTES", 0)
    got = run()
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_gemm_into_adds_in_place(dt, rng):
    """_kernels._blas._gemm_into: C = A B + beta C for C- and F-contiguous
    operands (a transposed view is F-contiguous); beta = 0 never reads C (a
    NaN there does not propagate)."""
    from numba import njit

    from fastsoftmax._kernels._blas import _gemm_into

    @njit
    def run(A, B, C, beta):
        _gemm_into(A, B, C, beta)

    @njit
    def run_t(X, Z, C, beta):
        _gemm_into(X.T, Z, C, beta)

    A = rng.standard_normal((7, 5)).astype(dt)
    B = rng.standard_normal((5, 3)).astype(dt)
    C0 = rng.standard_normal((7, 3)).astype(dt)
    tol = 1e-5 if dt == np.float32 else 1e-12
    for beta in (0.0, 1.0, 0.5):
        for a, bb in ((A, B), (np.asfortranarray(A), B), (A, np.asfortranarray(B))):
            C = C0.copy()
            run(a, bb, C, beta)
            np.testing.assert_allclose(C, f64(A) @ f64(B) + beta * f64(C0), rtol=tol, atol=tol)
    C = np.full((7, 3), np.nan, dt)
    run(A, B, C, 0.0)
    np.testing.assert_allclose(C, f64(A) @ f64(B), rtol=tol, atol=tol)
    X = rng.standard_normal((40, 5)).astype(dt)
    Z = rng.standard_normal((40, 3)).astype(dt)
    G = C0[:5].copy()
    run_t(X, Z, G, 1.0)
    np.testing.assert_allclose(G, f64(X).T @ f64(Z) + f64(C0[:5]), rtol=tol, atol=tol * 10)
    # Strided operands (Numba's layout "A", unit stride along one axis): column
    # ranges of X and their transposes, down to one column and one row.
    X = rng.standard_normal((40, 9)).astype(dt)
    for f0, f1 in ((0, 9), (2, 7), (4, 5), (8, 9)):
        G = rng.standard_normal((f1 - f0, 3)).astype(dt)
        want = f64(X[:, f0:f1]).T @ f64(Z) + 0.5 * f64(G)
        run(X[:, f0:f1].T, Z, G, 0.5)
        np.testing.assert_allclose(G, want, rtol=tol, atol=tol * 10)
        right = rng.standard_normal((f1 - f0, 3)).astype(dt)
        C = np.full((40, 3), np.nan, dt)
        run(X[:, f0:f1], right, C, 0.0)
        np.testing.assert_allclose(C, f64(X[:, f0:f1]) @ f64(right), rtol=tol, atol=tol * 10)
    C = np.zeros((1, 3), dt)
    run(X[2:3, 1:6], B, C, 0.0)
    np.testing.assert_allclose(C, f64(X[2:3, 1:6]) @ f64(B), rtol=tol, atol=tol)
    C = np.zeros((40, 1), dt)
    run(X[:, 1:6], np.asfortranarray(X[:5, :3])[:, 1:2], C, 0.0)
    np.testing.assert_allclose(C, f64(X[:, 1:6]) @ f64(X[:5, 1:2]), rtol=tol, atol=tol * 10)


# ------------------------------------------------ scratch kept between calls

@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("launch", ["serial", "parallel"])
def test_kept_scratch_never_leaks_into_results(kernel, launch, rng, monkeypatch):
    """The function API's engines keep their scratch between calls (per
    thread): a second call with other weights leaves the first call's
    results as they were, and both equal the reference."""
    strategy = _force(kernel, monkeypatch)
    monkeypatch.setenv("FASTSOFTMAX_STRATEGY", strategy)
    if launch == "parallel":
        monkeypatch.setattr(_launch, "SERIAL_WORK", 0)
    k = 10 if kernel == "gemm" else 5
    X, y, W, b, _ = make_problem(rng, 700, 8 if kernel == "gemm_t" else 70, k, np.float64)
    W2, V = rng.standard_normal(W.shape), rng.standard_normal(W.shape)
    first = fs.loss_and_grad(X, y, W, b, alpha=0.1)
    kept = [np.copy(a) for a in first[1:]]
    hv = fs.hessp(X, y, W, b, V, alpha=0.1)[0]
    hv_kept = hv.copy()
    second = fs.loss_and_grad(X, y, W2, b, alpha=0.1)
    fs.hessp(X, y, W2, b, V, alpha=0.1)
    for got, want in zip(first[1:], kept, strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(hv, hv_kept)
    for Wi, res in ((W, first), (W2, second)):
        want = ref.loss_and_grad(X, y, Wi, b, alpha=0.1)
        np.testing.assert_allclose(res[0], want[0], rtol=1e-10)
        np.testing.assert_allclose(res[1], want[1], rtol=1e-9, atol=1e-12)
    assert _dense._kept.buffers, "nothing was kept"


def test_kept_scratch_is_per_thread_and_bounded(rng, monkeypatch):
    """Threads calling at once each use their own kept set (their results
    equal the sequential ones); a set larger than the bound is not kept."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setenv("FASTSOFTMAX_STRATEGY", "gemm")
    monkeypatch.setattr(_launch, "SERIAL_WORK", 0)
    X, y, W, b, _ = make_problem(rng, 900, 60, 40, np.float64)
    Ws = [rng.standard_normal(W.shape) for _ in range(8)]
    want = [fs.loss_and_grad(X, y, Wi, b) for Wi in Ws]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda Wi: fs.loss_and_grad(X, y, Wi, b, n_threads=1), Ws * 3))
    for i, res in enumerate(got):
        np.testing.assert_allclose(res[1], want[i % 8][1], rtol=1e-12, atol=1e-15)
    monkeypatch.setattr(_dense, "_KEPT_SCRATCH_BYTES", 0)
    _dense._kept.buffers = {}
    fs.loss_and_grad(X, y, W, b)
    assert _dense._kept.buffers == {}


@pytest.mark.parametrize("strategy", ["rows", "gemm"])
def test_function_api_objective_kept_per_shape_and_made_anew_when_its_choices_change(
        strategy, rng, monkeypatch):
    """loss_and_grad and hessp bind the objective this thread made for the
    shape to each call's data (_objective.call_objective): results as a new
    objective's on other data and weights of the shape, no caller's array
    held once the call is done, and a new objective where the strategy
    override, the wisdom or the shape changes."""
    import gc
    import weakref

    from fastsoftmax import _calibration, _objective

    made = []
    real = _objective.Objective.__init__

    def counted(self, *args, **kwargs):
        made.append(1)
        real(self, *args, **kwargs)

    monkeypatch.setattr(_objective.Objective, "__init__", counted)
    monkeypatch.setenv("FASTSOFTMAX_STRATEGY", strategy)
    X, y, W, b, sw = make_problem(rng, 300, 40, 6, np.float64, weights=True)
    X2, y2, _, _, _ = make_problem(rng, 300, 40, 6, np.float64)
    V = rng.standard_normal(W.shape)
    for Xi, yi, swi in ((X, y, sw), (X2, y2, None), (X, y, sw)):
        got = fs.loss_and_grad(Xi, yi, W, b, alpha=0.2, sample_weight=swi)
        want = ref.loss_and_grad(Xi, yi, W, b, alpha=0.2, sample_weight=swi)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(got[2], want[2], rtol=1e-10, atol=1e-13)
        hv = fs.hessp(Xi, yi, W, b, V, alpha=0.2, sample_weight=swi)[0]
        np.testing.assert_allclose(
            hv, ref.hessp(Xi, yi, W, b, V, alpha=0.2, sample_weight=swi)[0],
            rtol=1e-10, atol=1e-13)
    assert len(made) == 1
    (_, kept), = _objective._kept.objectives.values()
    assert kept.strategy == strategy and kept.data is None and kept.engine.data is None
    gone = weakref.ref(X2)
    del X2
    gc.collect()
    assert gone() is None, "a kept objective holds the caller's X"
    other = "gemm" if strategy == "rows" else "rows"
    monkeypatch.setenv("FASTSOFTMAX_STRATEGY", other)
    fs.loss_and_grad(X, y, W, b)
    assert len(made) == 2
    monkeypatch.setattr(_calibration, "_wisdom", {})  # a calibration wrote new wisdom
    fs.loss_and_grad(X, y, W, b)
    fs.loss_and_grad(X, y, W, b)
    assert len(made) == 3
    got = fs.loss_and_grad(X[:200], y[:200], W, b)  # another shape
    assert len(made) == 4
    np.testing.assert_allclose(got[1], ref.loss_and_grad(X[:200], y[:200], W, b)[1],
                               rtol=1e-10, atol=1e-13)



@pytest.mark.parametrize("shape", [(3,), (7, 5), (2, 3, 17), (0, 4)])
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_aligned_buffers(shape, dt):
    from fastsoftmax._launch import ALIGN, aligned_empty, aligned_row, aligned_rows

    for _ in range(4):  # several allocations: each lands on its own boundary
        a = aligned_empty(shape, dt)
        assert a.shape == shape and a.dtype == dt and a.flags.c_contiguous
        assert a.size == 0 or a.ctypes.data % ALIGN == 0
    if len(shape) == 2:
        src = np.arange(np.prod(shape), dtype=dt).reshape(shape)
        c = aligned_rows(src)
        assert c.shape[0] == shape[0] and c.shape[1] * c.itemsize % ALIGN == 0
        assert c.size == 0 or c.ctypes.data % ALIGN == 0
        assert np.array_equal(c[:, :shape[1]], src) and not c[:, shape[1]:].any()
    itemsize = np.dtype(dt).itemsize
    for n in (1, 7, 16, 784):
        for pad in (0, 128):
            row = aligned_row(n, itemsize, pad)
            assert row * itemsize % ALIGN == 0
            assert row - n >= pad // itemsize
            assert row * itemsize - ALIGN < n * itemsize + pad  # no more than one line over


@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_rows_kernels_get_aligned_weights_and_sums(dt, rng, monkeypatch):
    """The rows strategy's tiles read W and add into G a vector at a time: both
    start every row on a cache line, whatever the caller's arrays."""
    from fastsoftmax._launch import ALIGN

    X, y, W, b, _ = make_problem(rng, 300, 37, 5, dt)
    engine = PublicObjective(X, y, 5, strategy="rows").objective.engine
    seen = []
    chunk_fn, kernel = _dense._GRADIENT_KERNELS["rows"]

    # The launch is the parallel kernel, or on one thread its chunk function
    # (whether the call runs there depends on the calls just before it).
    def spy(*args):
        seen.append(args)
        return kernel(*args)

    def spy_chunk(c, *args):
        seen.append(args)
        return chunk_fn(c, *args)

    monkeypatch.setitem(_dense._GRADIENT_KERNELS, "rows", (spy_chunk, spy))
    coef = np.asfortranarray(W.T[:, :])  # not C-contiguous: copied, and aligned
    engine.gradient(coef, b)
    (args,) = seen
    Wt, G = args[7], args[9]
    assert np.array_equal(Wt[:, :37], W.T) and not Wt[:, 37:].any()
    for a in (Wt, G):
        assert a.ctypes.data % ALIGN == 0 and a.strides[-2] % ALIGN == 0


@pytest.mark.parametrize("strategy", ["rows", "gemm"])
def test_nan_logit_behind_a_finite_max_is_reported(strategy):
    k = 40
    X = np.array([[1e30, 1e30]], np.float32)
    W = np.ones((2, k), np.float32)
    W[:, 1] = [1e30, -1e30]  # logit 1 is inf + (-inf) = NaN; logit 0 is finite
    obj = PublicObjective(X, np.array([k - 1]), k, strategy=strategy)
    with np.errstate(all="ignore"), pytest.raises(ValueError, match="not finite at row 0"):
        obj(W, None)


# ------------------------------------------------- Hessian-vector products

def assert_hessp_close(H, X, y, W, b, V, c, alpha, sw):
    HV, Hc = H.matvec(V.T, c)
    HV_r, Hc_r, mag, mag_c = ref_hessp64(X, y, W, b, V, c, alpha, sw)
    tol = HESSP_TOL[X.dtype]
    assert HV.dtype == X.dtype and HV.shape == W.T.shape
    np.testing.assert_allclose(HV.T, HV_r, rtol=0, atol=tol * mag.max())
    if b is None:
        assert Hc is None
    else:
        assert Hc.dtype == X.dtype and Hc.shape == b.shape
        np.testing.assert_allclose(Hc, Hc_r, rtol=0, atol=tol * mag_c.max())


@pytest.fixture(params=["serial", "parallel"])
def launch(request, monkeypatch):
    """One chunk without a parallel region, or the prange kernels."""
    _launch_mode(monkeypatch, request.param)
    return request.param


@pytest.mark.parametrize("kernel,k,variant", _kernel_variants(PRODUCTS, (2, 10), HESSP_VARIANTS))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_matvec_matches_reference(kernel, mode, k, dt, variant, launch, rng, monkeypatch):
    strategy = _force_products(kernel, monkeypatch)
    weights = variant in ("weights", "all")
    soft = variant in ("soft", "all")
    alpha = 0.3 if variant == "all" else 0.0
    # 203 rows: two chunks of 101/102 rows leave 1-3 rows after the 4-row
    # blocks (in float32, after 8-row blocks and one of 4); 50 features;
    # k = 2 and 10 run the 4 x 2 and 4 x 3 tiles (8 x 2 in float32).
    X, y, W, b, sw = make_problem(rng, 203, 50, k, dt, intercept=variant != "no-b",
                                  weights=weights, soft=soft)
    H = product(X, y, W, b, sw, alpha, n_threads=2, strategy=strategy, mode=mode)
    assert (H.strategy, H.mode) == (strategy, mode)
    for _ in range(2):  # the same point serves several products
        V = rng.standard_normal(W.shape).astype(dt)
        c = rng.standard_normal(k).astype(dt) if b is not None else None
        assert_hessp_close(H, X, y, W, b, V, c, alpha, sw)
    # the intercept direction defaults to 0
    if b is not None:
        HV, Hc = H.matvec(V.T)
        HV0, Hc0 = H.matvec(V.T, np.zeros(k, dt))
        np.testing.assert_array_equal(HV, HV0)
        np.testing.assert_array_equal(Hc, Hc0)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("k", [7, 40])
def test_gradient_pass_stores_the_probabilities(kernel, dt, k, launch, rng, monkeypatch):
    """The P-storing gradient pass: the same loss and gradient as the plain
    one (Objective.loss_grad, same chunks: to the bit but for the penalty's
    float64 sum, taken in another order), P = softmax(X W + b)."""
    strategy = _force(kernel, monkeypatch)
    X, y, W, b, sw = make_problem(rng, 203, 50, k, dt, weights=True)
    cached = product(X, y, W, b, sw, 0.2, n_threads=2, strategy=strategy, mode="cached")
    plain = product(X, y, W, b, sw, 0.2, n_threads=2, strategy=strategy, mode="recompute")
    assert cached.P.shape == (203, k) and plain.P.shape == (0, k)
    obj = PublicObjective(X, y, k, sw, n_threads=2, strategy=strategy)
    loss, gW, gb = obj(W, b, 0.2)
    for H in (cached, plain):
        assert H.loss == pytest.approx(loss, rel=1e-15)  # penalty summed in another order
        np.testing.assert_array_equal(H.grad_coef, gW.T)
        np.testing.assert_array_equal(H.grad_intercept, gb)
    eps = np.finfo(dt).eps
    P64 = ref.softmax(f64(X) @ f64(W) + f64(b))
    np.testing.assert_allclose(cached.P, P64, rtol=0, atol=(64 if dt == np.float32 else 8) * eps)
    # and the reference's loss and gradient
    r = ref.loss_and_grad(f64(X), y, f64(W), f64(b), alpha=0.2, sample_weight=f64(sw))
    assert cached.loss == pytest.approx(r[0], rel=2e-5 if dt == np.float32 else 1e-12)


@pytest.mark.parametrize("kernel", PRODUCTS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=dtype_id)
def test_thread_counts_agree(kernel, mode, dt, monkeypatch, rng):
    strategy = _force_products(kernel, monkeypatch)
    monkeypatch.setattr(_launch, "SERIAL_WORK", 0)
    X, y, W, b, sw = make_problem(rng, 1001, 45, 10, dt, weights=True)
    V = rng.standard_normal(W.shape).astype(dt)
    c = rng.standard_normal(10).astype(dt)
    out = {}
    for nt in (1, 2):
        H = product(X, y, W, b, sw, 0.1, n_threads=nt, strategy=strategy, mode=mode)
        out[nt] = H.matvec(V.T, c)
        assert_hessp_close(H, X, y, W, b, V, c, 0.1, sw)
    hv1, hc1 = out[1]
    hv2, hc2 = out[2]
    # only the order of the partial sums differs
    eps = float(np.finfo(dt).eps)
    scale = 1e3 * eps
    np.testing.assert_allclose(hv2, hv1, rtol=0, atol=scale * np.abs(hv1).max())
    np.testing.assert_allclose(hc2, hc1, rtol=0, atol=scale * np.abs(hc1).max())


# ------------------------------------------------------------ the whole matrix

def full_hessian(hv, n, k, intercept):
    """Columns hv(e_j) for every unit direction e_j of (V (n, k), c (k,))."""
    size = n * k + (k if intercept else 0)
    Hm = np.empty((size, size))
    for col in range(size):
        e = np.zeros(size)
        e[col] = 1.0
        V = e[:n * k].reshape(n, k)
        c = e[n * k:] if intercept else None
        HV, Hc = hv(V, c)
        Hm[:, col] = np.concatenate([np.ravel(HV), [] if Hc is None else Hc])
    return Hm


@pytest.mark.parametrize("kernel", PRODUCTS)
@pytest.mark.parametrize("mode", MODES)
def test_full_hessian_matches_reference(kernel, mode, rng, monkeypatch):
    """Every column of the kernel's Hessian, intercept rows included."""
    strategy = _force_products(kernel, monkeypatch)
    X, y, W, b, sw = make_problem(rng, 11, 5, 4, np.float64, weights=True, soft=True)
    n, k = W.shape
    want = full_hessian(lambda V, c: ref.hessp(X, y, W, b, V, c, alpha=0.1,
                                               sample_weight=sw), n, k, True)
    H = product(X, y, W, b, sw, 0.1, n_threads=2, strategy=strategy, mode=mode)

    def hv(V, c):
        HV, Hc = H.matvec(np.ascontiguousarray(V.T), c)
        return HV.T, Hc

    got = full_hessian(hv, n, k, True)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)


# --------------------------------------------- finite differences, PyTorch

@pytest.mark.parametrize("kernel", PRODUCTS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("variant", ["plain", "all", "no-b"])
def test_matvec_matches_central_differences_of_the_gradient(kernel, mode, variant, rng,
                                                             monkeypatch):
    """H v ≈ (g(w + h v) - g(w - h v)) / 2h in float64: truncation O(h²)
    (~1e-10 here) plus rounding eps/h (~1e-11), against |Hv| ~ 0.1-1."""
    strategy = _force_products(kernel, monkeypatch)
    weights = variant == "all"
    soft = variant == "all"
    alpha = 0.2 if variant == "all" else 0.0
    X, y, W, b, sw = make_problem(rng, 57, 45, 6, np.float64, intercept=variant != "no-b",
                                  weights=weights, soft=soft)
    H = product(X, y, W, b, sw, alpha, n_threads=2, strategy=strategy, mode=mode)
    h = 1e-5
    for _ in range(3):
        V = rng.standard_normal(W.shape)
        c = rng.standard_normal(6) if b is not None else None
        HV, Hc = H.matvec(V.T, c)
        bp = None if b is None else b + h * c
        bm = None if b is None else b - h * c
        _, gWp, gbp = fs.loss_and_grad(X, y, W + h * V, bp, alpha=alpha, sample_weight=sw)
        _, gWm, gbm = fs.loss_and_grad(X, y, W - h * V, bm, alpha=alpha, sample_weight=sw)
        scale = np.abs(HV).max()
        np.testing.assert_allclose(HV.T, (gWp - gWm) / (2 * h), rtol=0, atol=1e-7 * scale)
        if b is not None:
            np.testing.assert_allclose(Hc, (gbp - gbm) / (2 * h), rtol=0, atol=1e-7 * scale)


@pytest.mark.parametrize("kernel", PRODUCTS)
@pytest.mark.parametrize("mode", MODES)
def test_matvec_matches_torch_double_backward(kernel, mode, rng, monkeypatch):
    torch = pytest.importorskip("torch")
    strategy = _force_products(kernel, monkeypatch)
    X, y, W, b, sw = make_problem(rng, 57, 45, 6, np.float64, weights=True, soft=True)
    alpha = 0.15
    V = rng.standard_normal(W.shape)
    c = rng.standard_normal(6)
    tX, tY, tsw = torch.from_numpy(X), torch.from_numpy(y), torch.from_numpy(sw)
    tW = torch.from_numpy(W.copy()).requires_grad_(True)
    tb = torch.from_numpy(b.copy()).requires_grad_(True)
    Z = tX @ tW + tb
    ce = torch.logsumexp(Z, dim=1) - (tY * Z).sum(dim=1)
    J = (tsw * ce).sum() / tsw.sum() + 0.5 * alpha * (tW * tW).sum()
    gW, gb = torch.autograd.grad(J, (tW, tb), create_graph=True)
    inner = (gW * torch.from_numpy(V)).sum() + (gb * torch.from_numpy(c)).sum()
    hW, hb = torch.autograd.grad(inner, (tW, tb))
    H = product(X, y, W, b, sw, alpha, n_threads=2, strategy=strategy, mode=mode)
    HV, Hc = H.matvec(V.T, c)
    scale = float(hW.abs().max())
    np.testing.assert_allclose(HV.T, hW.numpy(), rtol=0, atol=1e-13 * max(scale, 1.0))
    np.testing.assert_allclose(Hc, hb.numpy(), rtol=0, atol=1e-13 * max(scale, 1.0))


# ------------------------------------------------------ algebra (hypothesis)

@st.composite
def problems(draw):
    m = draw(st.integers(1, 30))
    n = draw(st.integers(1, 9))
    k = draw(st.integers(2, 7))
    elements = st.floats(-4, 4, allow_nan=False, allow_infinity=False, width=64)
    X = draw(hnp.arrays(np.float64, (m, n), elements=elements))
    W = draw(hnp.arrays(np.float64, (n, k), elements=elements))
    b = draw(hnp.arrays(np.float64, k, elements=elements))
    U = draw(hnp.arrays(np.float64, (n + 1, k), elements=elements))
    V = draw(hnp.arrays(np.float64, (n + 1, k), elements=elements))
    weighted = draw(st.booleans())
    sw = (draw(hnp.arrays(np.float64, m, elements=st.floats(0, 3, width=64)))
          if weighted else None)
    alpha = draw(st.sampled_from([0.0, 0.01, 1.0]))
    return X, W, b, U, V, sw, alpha


@given(problems())
def test_symmetric_and_positive_semidefinite(problem):
    """<U, H V> = <H U, V> and <V, H V> >= alpha ||V_W||² for every strategy
    and mode; the intercept is the last row of U and V."""
    X, W, b, U, V, sw, alpha = problem
    assume(sw is None or sw.sum() > 1e-3)
    m, n = X.shape
    y = np.zeros(m, dtype=np.int64)  # the Hessian does not depend on the targets
    for kernel in PRODUCTS:
        for mode in MODES:
            with pytest.MonkeyPatch.context() as mp:
                strategy = _force_products(kernel, mp)
                H = product(X, y, W, b, sw, alpha, n_threads=2, strategy=strategy, mode=mode)
                HU = H.matvec(U[:n].T, U[n])
                HV = H.matvec(V[:n].T, V[n])

            def dot(A, hA):
                return float(np.sum(A[:n].T * hA[0]) + A[n] @ hA[1])

            uhv, hu_v, vhv = dot(U, HV), dot(V, HU), dot(V, HV)
            # each product is a sum of terms of size <= |X|² |P| |U| |V|
            bound = 1e-12 * (1 + np.abs(X).max() ** 2) * (
                np.abs(U).sum() * np.abs(V).sum() + np.abs(V).sum() ** 2)
            assert abs(uhv - hu_v) <= bound, (kernel, mode)
            assert vhv >= alpha * float(np.sum(V[:n] ** 2)) - bound, (kernel, mode)


# ------------------------------------------------------------- P cached or not

def test_mode_follows_the_memory_budget():
    X = np.empty((1000, 20))
    assert choose_mode(X, 20) == "cached"              # P no larger than X
    assert choose_mode(X, 21, budget=0) == "recompute"
    assert choose_mode(X, 21) == "cached"              # under the floor
    assert choose_mode(X, 10 ** 5, budget=8 * 10 ** 8) == "cached"
    assert choose_mode(X, 10 ** 5 + 1, budget=8 * 10 ** 8) == "recompute"
    assert PROBA_BUDGET >= 1 << 20


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_nonfinite_logits_are_reported(strategy):
    X = np.array([[1e200, 1.0]] * 5)
    W = np.full((2, 3), 1e200)
    with np.errstate(all="ignore"), pytest.raises(ValueError, match="not finite at row 0"):
        product(X, np.zeros(5, dtype=np.int64), W, None, None, 0.0, strategy=strategy)


def test_function_api_calls_in_a_loop_take_the_solvers_threshold(rng, monkeypatch):
    """Calls of loss_and_grad that follow one another (each within
    _launch.LOOP_GAP_S of the last one's end) run as one chunk until the
    run of calls has lasted LOOP_SPAN_S, then as the parallel kernel above
    SERIAL_WORK_WARM; a longer gap starts a new run. The results do not
    depend on it. The clock is the test's: no call takes any time on it."""
    import math

    m, n, k = 2000, 100, 10
    assert _launch.SERIAL_WORK_WARM <= _launch.launch_work(m, n, k) < _launch.SERIAL_WORK
    X, y, W, b, _ = make_problem(rng, m, n, k, np.float64)
    one_chunk = []
    run = _dense.run_one_chunk
    monkeypatch.setattr(_dense, "run_one_chunk",
                        lambda *a, **kw: one_chunk.append(1) or run(*a, **kw))
    now = [1000.0]
    monkeypatch.setattr(_launch, "_clock", lambda: now[0])
    monkeypatch.setattr(_launch._calls, "last_end", -math.inf)
    gap, span = _launch.LOOP_GAP_S, _launch.LOOP_SPAN_S
    step = 0.8 * gap
    results, chunked = [], []
    calls = int(span / step) + 3
    for _ in range(calls):
        results.append(fs.loss_and_grad(X, y, W, b, alpha=0.1, n_threads=2))
        chunked.append(len(one_chunk))
        now[0] += step
    # one chunk while the run is younger than LOOP_SPAN_S, then parallel
    in_loop = [i * step >= span for i in range(calls)]
    assert 0 < in_loop.count(False) < calls
    assert list(np.diff([0, *chunked])) == [int(not x) for x in in_loop]
    for got in results[1:]:
        for g, w in zip(got, results[0], strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
    now[0] += 1.5 * gap  # a longer gap: a new run, one chunk again
    fs.loss_and_grad(X, y, W, b, alpha=0.1, n_threads=2)
    assert len(one_chunk) == chunked[-1] + 1


def test_calls_after_an_idle_spell_measure_the_wake_up_then_stay_on_one_thread(
        rng, monkeypatch):
    """A call above SERIAL_WORK that comes COLD_GAP_S after the thread's last
    parallel region, and would go parallel, wakes the workers with an empty
    region first and times it (not the thread's first region, which starts
    its team, nor the kernel's first load, on one thread); once
    WAKE_SAMPLES wake-ups are known, such calls run as one
    chunk while their work is below CALL_WAKES times the mean wake-up over
    UNIT_S (1 - 1/p) on p threads, and on
    every thread above it (timing their wake-up too) or when the workers are
    awake. The clock is the test's: each wake-up takes 8 ms on it, nothing
    else takes any time."""
    import collections
    import math

    from fastsoftmax._kernels import _checks

    m, n, k = 5000, 400, 10
    work = _launch.launch_work(m, n, k)
    assert _launch.SERIAL_WORK <= work < 0.008 / _launch.UNIT_S
    X, y, W, b, _ = make_problem(rng, m, n, k, np.float64)
    one_chunk, probes, loads = [], [], []
    run = _dense.run_one_chunk
    monkeypatch.setattr(_dense, "run_one_chunk",
                        lambda *a, **kw: one_chunk.append(1) or run(*a, **kw))
    now = [1000.0]
    region = _checks._first_nonfinite_row
    monkeypatch.setattr(_launch, "_probe_loaded", False)

    def probe(rows, bad):
        region(rows, bad)
        if rows.shape[0] == 1:  # the kernel loaded on one thread first
            loads.append(1)
            return
        probes.append(rows.shape[0])
        now[0] += 0.008

    monkeypatch.setattr(_checks, "_first_nonfinite_row", probe)
    monkeypatch.setattr(_launch, "_clock", lambda: now[0])
    monkeypatch.setattr(_launch._calls, "last_end", -math.inf)
    monkeypatch.setattr(_launch._calls, "last_region_end", -math.inf)
    samples = collections.deque(maxlen=_launch.WAKE_WINDOW)
    monkeypatch.setattr(_launch, "_wake_samples", samples)
    monkeypatch.setattr(_launch, "COLD_SERIAL_MAX", 1 << 28)
    assert _launch.cold_serial_work(2) == _launch.SERIAL_WORK

    def call(n_threads=2):
        now[0] += 2 * _launch.COLD_GAP_S
        return fs.loss_and_grad(X, y, W, b, alpha=0.1, n_threads=n_threads)

    first = call()  # the thread's first region: every thread, no sample
    assert (one_chunk, probes) == ([], [])
    results = [call() for _ in range(_launch.WAKE_SAMPLES)]
    assert one_chunk == [] and probes == [2] * _launch.WAKE_SAMPLES and loads == [1]
    assert list(samples) == [pytest.approx(0.008)] * _launch.WAKE_SAMPLES
    # What one thread adds on p threads, 1 - 1/p of the work's time, against
    # what a cold parallel call pays, CALL_WAKES wake-ups; COLD_SERIAL_MAX at most.
    wakes = _launch.CALL_WAKES * 0.008
    for p, share in ((2, 0.5), (4, 0.75), (16, 15 / 16)):
        want = min(_launch.COLD_SERIAL_MAX, wakes / share / _launch.UNIT_S)
        assert _launch.cold_serial_work(p) == pytest.approx(want, abs=1)
    results.append(call())  # cold: one chunk, no more probes
    assert one_chunk == [1] and len(probes) == _launch.WAKE_SAMPLES
    results.append(call(n_threads=1))  # one thread asked for: nothing to wake
    assert len(one_chunk) == 2 and len(probes) == _launch.WAKE_SAMPLES
    # Workers awake (a region ended just now): every thread, no probe.
    _launch.region_ended()
    now[0] += _launch.COLD_GAP_S / 2
    results.append(fs.loss_and_grad(X, y, W, b, alpha=0.1, n_threads=2))
    assert len(one_chunk) == 2 and len(probes) == _launch.WAKE_SAMPLES
    # Short wake-ups: the limit is SERIAL_WORK again; the call takes every
    # thread and times its wake-up, which raises the mean.
    samples.extend([0.0001] * _launch.WAKE_WINDOW)
    assert _launch.cold_serial_work(2) == _launch.SERIAL_WORK
    results.append(call())
    assert len(one_chunk) == 2 and len(probes) == _launch.WAKE_SAMPLES + 1
    assert samples[-1] == pytest.approx(0.008) and len(samples) == _launch.WAKE_WINDOW
    for got in results:
        for g, w in zip(got, first, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_rows_weights_buffer_is_rewritten_each_call(dt, rng, monkeypatch):
    """The rows kernels' aligned weights are one kept buffer, rewritten per call:
    gradients at two points in turn each match NumPy's, and the buffer's
    padding stays zero."""
    from fastsoftmax._launch import ALIGN, aligned_rows

    monkeypatch.setenv("FASTSOFTMAX_STRATEGY", "rows")
    X, y, W, b, _ = make_problem(rng, 50, 13, 4, dt)
    for point in (W, 3 * W, -W, W):
        got = fs.loss_and_grad(X, y, point, b, alpha=0.1, n_threads=1)
        want = ref.loss_and_grad(X, y, point, b, alpha=0.1)
        assert_close(got, want, dt)
    coef = rng.standard_normal((4, 13)).astype(dt)
    out = aligned_rows(coef)
    assert out.ctypes.data % ALIGN == 0 and not out[:, 13:].any()
    other = np.asfortranarray(rng.standard_normal((4, 13)).astype(dt))
    assert aligned_rows(other, out=out) is out
    np.testing.assert_array_equal(out[:, :13], other)
    assert not out[:, 13:].any()
