"""Target 3 (memory) as a test: peak RSS of a subprocess stays under
size(X) + 1 GiB. Small shape by default; the issue's shape (m = 2,000,000,
n = 50, k = 1000, float32) under FASTSOFTMAX_BENCH_FULL=1."""

import pytest

from ._common import shapes
from .memory import measure


@pytest.mark.parametrize("shape", shapes([(200_000, 50, 100)], [(2_000_000, 50, 1000)]),
                         ids=lambda s: "m{}-n{}-k{}".format(*s))
def test_peak_rss_under_x_plus_1gib(shape):
    r = measure(*shape, "float32")
    assert r["peak"] - r["x_bytes"] < (1 << 30), r
