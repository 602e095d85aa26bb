"""The per-host kernel strategy ("wisdom"): calibration, lookup, overrides."""

import json

import numpy as np
import pytest

from fastsoftmax import _calibration as cal


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """No override, an empty cache folder of our own, a small grid."""
    monkeypatch.delenv("FASTSOFTMAX_STRATEGY", raising=False)
    monkeypatch.setenv("FASTSOFTMAX_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cal, "GRID_N", (16, 784))
    monkeypatch.setattr(cal, "GRID_K", (3, 100))
    monkeypatch.setattr(cal, "CELL_WORK", 1 << 16)
    monkeypatch.setattr(cal, "ROUNDS", 1)
    monkeypatch.setattr(cal, "NARROW_SHAPES", ((20, 100),))
    monkeypatch.setattr(cal, "NARROW_WORK", 1 << 16)
    cal.forget()
    yield tmp_path
    cal.forget()


def test_without_wisdom_small_problems_use_the_fixed_rule(fresh):
    for n, k in [(784, 10), (16, 10), (784, 100), (5, 2)]:
        assert cal.strategy(n, k, np.float64, work=1000) == cal.fixed_rule(n, k)
    assert not list(fresh.iterdir()), "nothing is written without a calibration"


def test_calibration_is_written_and_looked_up(fresh):
    result = cal.calibrate(("float64",))
    table = result["float64"]
    assert table["n"] == [16, 784] and table["k"] == [3, 100]
    assert all(w in ("rows", "gemm") for row in table["winner"] for w in row)
    assert all(t > 0 for row in table["rows_s"] + table["gemm_s"] for t in row)
    path = cal.wisdom_path()
    assert path.parent == fresh and json.loads(path.read_text())["float64"] == table
    cal.forget()  # read back from the file
    for i, n in enumerate((16, 784)):
        for j, k in enumerate((3, 100)):
            assert cal.strategy(n, k, np.float64) == table["winner"][i][j]
    # off the grid: the nearest cell in log n, log k; beyond the last k, GEMM
    assert cal.strategy(700, 4, np.float64) == table["winner"][1][0]
    assert cal.strategy(784, 1000, np.float64) == "gemm"
    # another dtype has no wisdom yet: the fixed rule
    assert cal.strategy(784, 3, np.float32) == cal.fixed_rule(784, 3)


def test_a_large_first_problem_calibrates_its_dtype(fresh, monkeypatch):
    monkeypatch.setattr(cal, "AUTO_WORK", 10)
    cal.strategy(784, 3, np.float32, work=10)
    assert "float32" in json.loads(cal.wisdom_path().read_text())


@pytest.mark.parametrize("forced", ["rows", "gemm"])
def test_the_environment_overrides(fresh, monkeypatch, forced):
    monkeypatch.setenv("FASTSOFTMAX_STRATEGY", forced)
    assert {cal.strategy(n, k, np.float64, work=1 << 40)
            for n, k in [(5, 2), (784, 10), (3000, 1000)]} == {forced}
    monkeypatch.setenv("FASTSOFTMAX_STRATEGY", "fixed")
    assert cal.strategy(5, 2, np.float64, work=1 << 40) == cal.fixed_rule(5, 2)
    assert not list(fresh.iterdir())


def test_an_unwritable_cache_keeps_the_wisdom_in_memory(fresh, monkeypatch):
    blocked = fresh / "file"
    blocked.write_text("")
    monkeypatch.setenv("FASTSOFTMAX_CACHE_DIR", str(blocked / "sub"))  # not a folder
    table = cal.calibrate(("float64",))["float64"]
    assert cal.strategy(16, 3, np.float64) == table["winner"][0][0]


def test_wisdom_of_another_grid_is_read_on_its_own_axes(fresh):
    """A wisdom file written with a different grid (another version) is
    looked up along the n and k it records, not the current grid's."""
    table = {"n": [16, 100, 1000], "k": [2, 50],
             "winner": [["gemm", "rows"], ["rows", "gemm"], ["gemm", "gemm"]],
             "rows_s": [[1.0, 1.0]] * 3, "gemm_s": [[1.0, 1.0]] * 3}
    cal.wisdom_path().write_text(json.dumps({"float64": table}))
    cal.forget()
    assert cal.strategy(110, 2, np.float64) == "rows"   # cell (100, 2)
    assert cal.strategy(110, 40, np.float64) == "gemm"  # cell (100, 50)
    assert cal.strategy(20, 45, np.float64) == "rows"   # cell (16, 50)


def test_narrow_block_bytes_calibrated_and_used(fresh, monkeypatch):
    """The GEMM blocks' budget for narrow rows: the default without wisdom
    or under the "fixed" override, else what the calibration chose among its
    candidates, which a new engine then sizes its blocks by."""
    from fastsoftmax._data import make_dataset
    from fastsoftmax._dense import DenseEngine, gemm_block_rows

    assert cal.narrow_block_bytes(np.float32) == cal.NARROW_BLOCK_BYTES
    table = cal.calibrate(("float32",))["float32"]
    assert table["narrow_block_bytes"] in cal.NARROW_CANDIDATES
    assert sorted(table["narrow_s"]) == sorted(str(c) for c in cal.NARROW_CANDIDATES)
    assert all(len(t) == 1 and t[0] > 0 for t in table["narrow_s"].values())
    cal.forget()  # read back from the file
    assert cal.narrow_block_bytes(np.float32) == table["narrow_block_bytes"]
    assert cal.narrow_block_bytes(np.float64) == cal.NARROW_BLOCK_BYTES  # no wisdom

    wisdom = dict(cal._load())
    wisdom["float32"] = dict(wisdom["float32"], narrow_block_bytes=1 << 17)
    monkeypatch.setattr(cal, "_wisdom", wisdom)
    X = np.zeros((5000, 20), np.float32)
    data = make_dataset(X, np.arange(5000) % 100, None, None, 100)
    eng = DenseEngine(data, "gemm")
    assert eng._rows == min(gemm_block_rows(20, 4, 100, 5000, 1 << 17), 5000) == 256
    monkeypatch.setenv("FASTSOFTMAX_STRATEGY", "fixed")
    assert cal.narrow_block_bytes(np.float32) == cal.NARROW_BLOCK_BYTES
    assert DenseEngine(data, "gemm")._rows == 128


def test_block_winner_is_the_least_relative_time():
    # 64K is never the fastest on its own but the best over both shapes.
    times = {1 << 15: [1.0, 2.0], 1 << 16: [1.1, 1.1], 1 << 17: [2.0, 1.0]}
    assert cal._block_winner(times) == 1 << 16
