"""Row-wise softmax and log_softmax: fastsoftmax, the NumPy reference and
scipy.special, one table per function, shape and dtype."""

import pytest
import scipy.special

import fastsoftmax as fs
from fastsoftmax import reference

from ._common import pedantic_or_call, shapes

SHAPES = shapes(small=[(2000, 100), (1000, 10)],
                full=[(100000, 100), (100000, 10), (10000, 1000)])

IMPLS = {
    ("softmax", "fastsoftmax"): fs.softmax,
    ("softmax", "reference"): reference.softmax,
    ("softmax", "scipy"): lambda Z: scipy.special.softmax(Z, axis=1),
    ("log_softmax", "fastsoftmax"): fs.log_softmax,
    ("log_softmax", "reference"): reference.log_softmax,
    ("log_softmax", "scipy"): lambda Z: scipy.special.log_softmax(Z, axis=1),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "m{}-k{}".format(*s))
@pytest.mark.parametrize("func", ["softmax", "log_softmax"])
@pytest.mark.parametrize("impl", ["fastsoftmax", "reference", "scipy"])
def test_softmax(benchmark, rng, impl, func, shape, dtype):
    Z = (3 * rng.standard_normal(shape)).astype(dtype)
    f = IMPLS[func, impl]
    benchmark.group = f"{func} {dtype} m={shape[0]} k={shape[1]}"
    pedantic_or_call(benchmark, lambda: f(Z))
