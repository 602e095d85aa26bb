"""_kernels._width: the 512-bit vector request of float32 kernels.

What it changes is only how LLVM compiles the calling function: the tests
check that the two function attributes reach the compiled IR exactly where
they are asked for (float32, on a host with AVX-512), that nothing else in
the module gets them, and that a kernel compiled with them computes what
the same kernel compiled without them does. Compiled here without the disk
cache (Numba cannot show the IR of a function loaded from it).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from numba import njit

from fastsoftmax._kernels._config import WIDE_REGISTERS
from fastsoftmax._kernels._micro import _accumulate4, _logits4
from fastsoftmax._kernels._width import (
    DEFAULT_WIDTH,
    FLOAT64_512,
    _wide_vectors,
    _wide_vectors_float64,
    _wide_vectors_marked,
)

ATTRIBUTE = '"prefer-vector-width"="512"'
LEGAL = '"min-legal-vector-width"="512"'


@njit(fastmath={"reassoc", "contract"}, error_model="numpy")
def _tile_wide(X, Wt, b, z4, G):
    _wide_vectors(X)
    _logits4(X, 0, 1, 2, 3, Wt, b, z4)
    _accumulate4(X, 0, 1, 2, 3, z4, G)


@njit(fastmath={"reassoc", "contract"}, error_model="numpy")
def _tile_plain(X, Wt, b, z4, G):
    _logits4(X, 0, 1, 2, 3, Wt, b, z4)
    _accumulate4(X, 0, 1, 2, 3, z4, G)


def _attributes_of(fn, *args) -> list[str]:
    """The attribute groups of the compiled function itself (not its wrappers)."""
    fn(*args)
    ir = fn.inspect_llvm(fn.signatures[-1])
    groups = dict(re.findall(r"^attributes (#\d+) = \{(.*)\}$", ir, flags=re.M))
    name = fn.__name__
    found = []
    for line in ir.splitlines():
        if line.startswith("define") and f"{name}B" in line and "cpython" not in line \
                and "cfunc." not in line:
            found += [groups.get(g, "") for g in re.findall(r"(#\d+) \{", line)]
            found.append(line[line.rfind(")"):])  # attributes written inline
    return found


def _tile_args(dt, n=37, k=7):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((4, n)).astype(dt)
    Wt = rng.standard_normal((k, n)).astype(dt)
    b = rng.standard_normal(k).astype(dt)
    return X, Wt, b, np.zeros((4, k), dt), rng.standard_normal((k, n)).astype(dt)


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["float32", "float64"])
def test_attributes_only_where_asked(dt):
    wide = " ".join(_attributes_of(_tile_wide, *_tile_args(dt)))
    plain = " ".join(_attributes_of(_tile_plain, *_tile_args(dt)))
    expected = WIDE_REGISTERS and dt == np.float32
    assert (ATTRIBUTE in wide) == expected
    assert (LEGAL in wide) == expected
    assert ATTRIBUTE not in plain and LEGAL not in plain


@njit(fastmath={"reassoc", "contract"}, error_model="numpy")
def _tile_wide64(X, Wt, b, z4, G):
    _wide_vectors_float64(X)
    _logits4(X, 0, 1, 2, 3, Wt, b, z4)
    _accumulate4(X, 0, 1, 2, 3, z4, G)


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["float32", "float64"])
def test_float64_request_only_for_float64(dt):
    """_wide_vectors_float64 (the GEMM strategy's long-row kernel): the
    attributes in float64 only, and the same results as without them."""
    args = _tile_args(dt, n=100)
    wide = " ".join(_attributes_of(_tile_wide64, *args))
    expected = WIDE_REGISTERS and dt == np.float64
    assert (ATTRIBUTE in wide) == expected
    assert (LEGAL in wide) == expected
    plain = tuple(a.copy() for a in _tile_args(dt, n=100))
    _tile_plain(*plain)
    tol = 1e-5 if dt == np.float32 else 1e-12
    np.testing.assert_allclose(args[3], plain[3], rtol=tol, atol=tol)
    np.testing.assert_allclose(args[4], plain[4], rtol=tol, atol=tol)


@njit(fastmath={"reassoc", "contract"}, error_model="numpy")
def _tile_marked(X, Wt, b, z4, G, width):
    _wide_vectors_marked(width, X)
    _logits4(X, 0, 1, 2, 3, Wt, b, z4)
    _accumulate4(X, 0, 1, 2, 3, z4, G)


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("marker", ["float64_512", "default"])
def test_marked_request(dt, marker):
    """_wide_vectors_marked (the rows kernels): float32 always wide, as
    _wide_vectors; float64 only with the FLOAT64_512 marker; each marker its
    own specialisation; the same results as without the request."""
    width = FLOAT64_512 if marker == "float64_512" else DEFAULT_WIDTH
    args = _tile_args(dt, n=131)
    wide = " ".join(_attributes_of(_tile_marked, *args, width))
    expected = WIDE_REGISTERS and (dt == np.float32 or marker == "float64_512")
    assert (ATTRIBUTE in wide) == expected
    assert (LEGAL in wide) == expected
    plain = tuple(a.copy() for a in _tile_args(dt, n=131))
    _tile_plain(*plain)
    tol = 1e-5 if dt == np.float32 else 1e-12
    np.testing.assert_allclose(args[3], plain[3], rtol=tol, atol=tol * 10)
    np.testing.assert_allclose(args[4], plain[4], rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("n", [1, 15, 16, 17, 64, 100, 784])
def test_wide_kernel_computes_the_same(dt, n):
    # The same sums in another vector grouping: equal up to float rounding
    # of the n-term dot products.
    args_w = _tile_args(dt, n=n)
    args_p = tuple(a.copy() for a in args_w)
    _tile_wide(*args_w)
    _tile_plain(*args_p)
    eps = np.finfo(dt).eps
    X, Wt = args_w[0], args_w[1]
    scale = np.abs(X).sum(axis=1)[:, None] * np.abs(Wt).max() + 1
    assert np.all(np.abs(args_w[3] - args_p[3]) <= 8 * n * eps * scale)
    np.testing.assert_allclose(args_w[4], args_p[4], rtol=64 * eps, atol=16 * n * eps * 4)


def test_request_is_idempotent_and_keeps_other_attributes():
    from llvmlite import ir

    from fastsoftmax._kernels import _width

    module = ir.Module()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), []), "f")
    fn.attributes.add("nounwind")
    _width._widen(fn)
    _width._widen(fn)
    text = str(module)
    assert text.count(ATTRIBUTE) == 1 and text.count(LEGAL) == 1
    assert "nounwind" in text
