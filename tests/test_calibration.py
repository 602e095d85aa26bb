"""The per-host kernel strategy ("wisdom"): calibration, lookup, overrides."""

import functools
import json

import numpy as np
import pytest

from fastsoftmax import _calibration as cal


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """No override, an empty cache folder of our own, a small grid."""
    monkeypatch.delenv("FASTSOFTMAX_STRATEGY", raising=False)
    monkeypatch.delenv("FASTSOFTMAX_BLAS", raising=False)
    monkeypatch.setenv("FASTSOFTMAX_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cal, "GRID_N", (16, 784))
    monkeypatch.setattr(cal, "GRID_K", (3, 10))
    monkeypatch.setattr(cal, "CELL_WORK", 1 << 16)
    monkeypatch.setattr(cal, "COLD_X_BYTES", 1 << 20)
    monkeypatch.setattr(cal, "ROUNDS", 1)
    monkeypatch.setattr(cal, "NARROW_SHAPES", ((20, 100),))
    monkeypatch.setattr(cal, "NARROW_WORK", 1 << 16)
    cal.forget()
    yield tmp_path
    cal.forget()


def test_without_wisdom_small_problems_use_the_fixed_rule(fresh):
    for n, k in [(784, 10), (16, 10), (784, 100), (5, 2)]:
        assert cal.strategy(n, k, np.float64, work=1000) == cal.fixed_rule(n, k, 1000, 8)
    assert not list(fresh.iterdir()), "nothing is written without a calibration"


def test_calibration_is_written_and_looked_up(fresh):
    result = cal.calibrate(("float64",))
    table = result["float64"]
    # 784 features: the cells' own X (2048 rows) is not read ahead, one of
    # 16 MiB is, so they are timed on that too; 16 features never are
    assert sorted(table["cells"]) == ["16,10", "16,3", "784,10", "784,10,ahead", "784,3",
                                      "784,3,ahead"]
    assert all(c["winner"] in ("rows", "gemm") and c["rows_s"] > 0 and c["gemm_s"] > 0
               for c in table["cells"].values())
    path = cal.wisdom_path()
    assert path.parent == fresh and json.loads(path.read_text())["float64"] == table
    cal.forget()  # read back from the file
    grid = cal.winner_grid(cal._load()["float64"])
    for i, n in enumerate((16, 784)):
        for j, k in enumerate((3, 10)):
            winner = table["cells"][f"{n},{k}"]["winner"]
            assert cal.strategy(n, k, np.float64) == grid[i][j] == winner
    # off the grid: the nearest cell in log n, log k, its times interpolated
    # with those of the cells around (test_between_cells_the_ratio_is_interpolated);
    # above SMALL_K, GEMM
    assert cal.grid_cell(700, 4) == (784, 3)
    assert cal.strategy(700, 4, np.float64) in ("rows", "gemm")
    assert cal.strategy(784, 1000, np.float64) == "gemm"
    # another dtype has no wisdom yet: the fixed rule
    assert cal.strategy(784, 3, np.float32) == cal.fixed_rule(784, 3, 0, 4)


def test_a_large_problem_times_the_cells_around_it_once(fresh, monkeypatch):
    """Lazily: the first large problem of a cell times that cell and the
    others around it that are not timed yet (no narrow blocks); a second
    problem there, large or not, reads them; a small problem of another
    cell times nothing."""
    timed = []
    time_cell = cal._time_cell
    monkeypatch.setattr(cal, "_time_cell",
                        lambda n, k, *a: timed.append((n, k)) or time_cell(n, k, *a))
    monkeypatch.setattr(cal, "AUTO_WORK", 10)
    f32 = np.dtype(np.float32)
    choice = cal.strategy(900, 3, f32, work=10)  # beyond the last column: its cell alone
    on_disk = json.loads(cal.wisdom_path().read_text())
    assert list(on_disk) == ["float32"] and list(on_disk["float32"]["cells"]) == ["784,3"]
    assert "narrow_block_bytes" not in on_disk["float32"]
    assert choice == on_disk["float32"]["cells"]["784,3"]["winner"]
    assert cal.strategy(784, 3, f32, work=10) == choice
    assert cal.strategy(16, 3, f32, work=1) == cal.fixed_rule(16, 3, 1, 4)
    assert cal.strategy(16, 1000, f32, work=10) == "gemm"  # above SMALL_K: never timed
    assert timed == [(784, 3)]
    # between the columns and the rows of the grid: the four cells, the one
    # timed already not again
    cal.strategy(700, 4, f32, work=10)
    assert sorted(timed) == [(16, 3), (16, 10), (784, 3), (784, 10)]
    assert timed.count((784, 3)) == 1
    cal.strategy(20, 5, f32, work=10)
    cal.strategy(300, 10, f32, work=1000)
    assert len(timed) == 4
    cells = json.loads(cal.wisdom_path().read_text())["float32"]["cells"]
    assert sorted(cells) == ["16,10", "16,3", "784,10", "784,3"]


def test_cold_copies_add_up_to_the_bytes_asked(monkeypatch):
    monkeypatch.setattr(cal, "COLD_X_BYTES", 1000)
    X = np.arange(30.0).reshape(10, 3)  # 240 bytes: 5 arrays
    copies = cal.cold_copies(X)
    assert len(copies) == 5 and copies[0] is X
    assert len(cal.cold_copies(X[:8])) == 7  # 192 bytes: 6 arrays, made odd
    assert all(np.array_equal(c, X) for c in copies)
    assert not any(np.shares_memory(a, b) for i, a in enumerate(copies) for b in copies[i + 1:])
    # from half of COLD_X_BYTES: alone
    assert len(cal.cold_copies(np.zeros((21, 3)))) == 1  # 504 bytes
    assert len(cal.cold_copies(np.zeros((20, 3)))) == 3  # 480 bytes


def test_a_cell_is_timed_on_its_x_and_then_on_each_copy_in_turn(fresh, monkeypatch):
    """Back to back on X itself, then every call on the copy least recently
    read (from memory on a real host); both timings are in the entry."""
    from fastsoftmax._objective import Objective

    read = []
    loss_grad = Objective.loss_grad
    monkeypatch.setattr(Objective, "loss_grad",
                        lambda self, *a: read.append(id(self.data.X)) or loss_grad(self, *a))
    monkeypatch.setattr(cal, "ROUNDS", 4)
    # (16, 3) float64: 2,048 rows, 262,144 bytes of X; five copies (odd) in 1 MiB
    entry = cal._time_cell(16, 3, "float64", np.random.default_rng(0))
    timed = read[2 * (cal.WARMUP_CALLS + 4):]  # warm-up: copy 0 thrice, the others once
    first = timed.index(next(x for x in timed if x != timed[0]))
    warm, cold = timed[:first], timed[first:]
    assert len(warm) in (8, 16)  # 16: timed again, a ratio beyond OUTLIER
    assert len(cold) in (10, 20)  # a round per copy
    assert len(set(cold)) == 5 and cold[:10] == cold[:5] * 2 and cold[4] == timed[0]
    # alternating calls: each strategy reads every copy
    assert set(cold[0:10:2]) == set(cold[1:10:2]) == set(cold)
    assert entry["x_bytes"] == 2048 * 16 * 8
    for kind in ("", "_cold"):
        assert entry["winner" + kind] in ("rows", "gemm")
        assert entry[f"rows{kind}_s"] > 0 and entry[f"gemm{kind}_s"] > 0
    # an X of half of COLD_X_BYTES alone is read back to back only: one timing
    monkeypatch.setattr(cal, "COLD_X_BYTES", 2 * 2048 * 16 * 8)
    assert "rows_cold_s" not in cal._time_cell(16, 3, "float64", np.random.default_rng(0))


def test_the_size_of_x_weighs_a_cells_two_timings(fresh):
    """Back to back up to the cell's X; from memory from COLD_X_BYTES;
    between, the log ratio interpolated in log bytes."""
    cold_bytes = cal.COLD_X_BYTES  # 1 MiB here
    entry = {"winner": "gemm", "rows_s": 2.0, "gemm_s": 1.0, "winner_cold": "rows",
             "rows_cold_s": 1.0, "gemm_cold_s": 2.0, "x_bytes": cold_bytes // 16}
    cells = {"784,3": entry}
    ratio = functools.partial(cal._ratio, cells, (784, 3, False))
    assert ratio(0) == ratio(cold_bytes // 16) == 2.0
    assert ratio(cold_bytes // 4) == pytest.approx(1.0)  # half way in log bytes
    assert ratio(cold_bytes) == ratio(1 << 40) == 0.5
    # one timing (an X of COLD_X_BYTES, or a hand-written entry): for every X
    assert cal._ratio({"784,3": {"rows_s": 2.0, "gemm_s": 1.0}}, (784, 3, False), 1 << 40) == 2.0
    entry["x_bytes"] = cold_bytes
    assert ratio(0) == 0.5


def test_a_shape_goes_by_the_timing_of_its_x_size(fresh):
    """The same (n, k): a small X by the cell's back-to-back timing, a large
    one by its timing from memory (remembered per size, not per shape)."""
    cell = {"winner": "gemm", "rows_s": 2.0, "gemm_s": 1.0, "winner_cold": "rows",
            "rows_cold_s": 1.0, "gemm_cold_s": 2.0, "x_bytes": cal.COLD_X_BYTES // 16}
    cal.wisdom_path().write_text(json.dumps({"float64": {"cells": {"784,3": cell}}}))
    cal.forget()
    f64 = np.dtype(np.float64)
    small, large = 10 * 784 * 3, 1000 * 784 * 3  # X of 61 KiB and 6 MiB; 1 MiB here
    assert cal.strategy(784, 3, f64, work=small) == "gemm"
    assert cal.strategy(784, 3, f64, work=large) == "rows"
    assert cal.strategy(784, 3, f64, work=small) == "gemm"


def test_cells_another_process_wrote_are_kept(fresh):
    cal.calibrate(("float64",), cells=[(16, 3)], blocks=False)
    # Another process times another cell of the same file meanwhile.
    other = json.loads(cal.wisdom_path().read_text())
    other["float64"]["cells"]["784,10"] = {"winner": "gemm", "rows_s": 2.0, "gemm_s": 1.0}
    cal.wisdom_path().write_text(json.dumps(other))
    cal.calibrate(("float64",), cells=[(784, 3)], blocks=False)
    assert sorted(json.loads(cal.wisdom_path().read_text())["float64"]["cells"]) == [
        "16,3", "784,10", "784,3"]
    assert cal.strategy(784, 10, np.float64) == "gemm"


def test_a_shape_not_read_ahead_avoids_a_column_read_ahead(tmp_path, monkeypatch):
    """Between two columns, a shape whose rows are not read ahead goes by the
    farther column when only the nearer one's cell reads ahead: 120 float32
    features, 10 classes, on the real grid (112 and 128 around it)."""
    monkeypatch.delenv("FASTSOFTMAX_STRATEGY", raising=False)
    monkeypatch.setenv("FASTSOFTMAX_CACHE_DIR", str(tmp_path))
    assert 112 in cal.GRID_N and 128 in cal.GRID_N and 10 in cal.GRID_K
    assert not any(112 < n < 128 for n in cal.GRID_N)
    ahead = cal.rows_read_ahead

    def cell_ahead(n, k, itemsize):
        return ahead(cal.cell_rows(n, k), n, itemsize)

    assert cell_ahead(128, 10, 4) and not cell_ahead(112, 10, 4)
    assert cal.grid_cell(120, 10) == (128, 10) == cal.grid_cell(120, 10, 4, True)
    assert cal.grid_cell(120, 10, 4, False) == (112, 10)
    # both columns read ahead (k = 2): the nearer; on a column itself, that one
    assert cell_ahead(112, 2, 4) and cell_ahead(128, 2, 4)
    assert cal.grid_cell(120, 2, 4, False) == (128, 2)
    assert cal.grid_cell(128, 10, 4, False) == (128, 10)
    # a shape read ahead keeps the nearer column, read ahead or not
    assert cal.grid_cell(116, 10, 4, True) == (112, 10) == cal.grid_cell(116, 10, 4, False)
    # the farther column is the nearest on the other side: 76 float64
    # features go by 48 (never read ahead), not by 112 (nearer than 48)
    assert 48 in cal.GRID_N and not any(48 < n < 96 for n in cal.GRID_N)
    assert cell_ahead(96, 2, 8) and cell_ahead(112, 2, 8) and not cell_ahead(48, 2, 8)
    assert cal.grid_cell(76, 2, 8, False) == (48, 2)
    assert cal.grid_cell(76, 2, 8, True) == (96, 2) == cal.grid_cell(76, 2)
    cells = {"112,10": {"winner": "gemm"}, "128,10": {"winner": "rows"}}
    cal.wisdom_path().write_text(json.dumps({"float32": {"cells": cells}}))
    cal.forget()
    try:
        f32 = np.dtype(np.float32)
        small, large = 80000, 300000  # X of 38 MB, not read ahead, and 144 MB, read ahead
        assert not ahead(small, 120, 4) and ahead(large, 120, 4)
        for _ in range(2):  # looked up, then remembered
            assert cal.strategy(120, 10, f32, work=small * 120 * 10) == "gemm"
            assert cal.strategy(120, 10, f32, work=large * 120 * 10) == "rows"
    finally:
        cal.forget()


@pytest.mark.parametrize("itemsize", [4, 8])
@pytest.mark.parametrize("n", [16, 48, 96, 100, 112, 128, 784, 3072])
def test_the_fewest_rows_read_ahead(n, itemsize):
    """By bisection on the kernels' rule: read ahead from there on, not below."""
    least = cal._least_rows_ahead(n, itemsize)
    if least is None:  # rows never read ahead (or only from X beyond AHEAD_X_BYTES)
        assert not cal.rows_read_ahead(cal.AHEAD_X_BYTES // (n * itemsize), n, itemsize)
        assert not any(cal.ahead_cell(n, k, itemsize) for k in cal.GRID_K)
        return
    assert cal.rows_read_ahead(least, n, itemsize)
    assert not cal.rows_read_ahead(least - 1, n, itemsize)
    for k in cal.GRID_K:
        rows = cal.cell_rows(n, k)
        ahead_rows = cal.cell_rows(n, k, itemsize, ahead=True)
        assert cal.rows_read_ahead(ahead_rows, n, itemsize) and ahead_rows >= rows
        # a second timing only where the cell's own rows are not read ahead
        assert cal.ahead_cell(n, k, itemsize) == (not cal.rows_read_ahead(rows, n, itemsize))
        assert ahead_rows == (max(rows, least) if cal.ahead_cell(n, k, itemsize) else rows)


def test_a_shape_read_ahead_goes_by_cells_timed_read_ahead(fresh, monkeypatch):
    """A shape whose rows are read ahead goes by the cells' timings on an X
    read ahead (where their own is not), and a large one times them; a
    shape of the same cells not read ahead goes by the cells' own timings."""
    f32 = np.dtype(np.float32)
    assert cal.ahead_cell(784, 10, 4) and cal.ahead_cell(784, 3, 4)
    assert not cal.ahead_cell(16, 10, 4)  # 64-byte rows are never read ahead
    small, large = 1000, 6000  # X of 3 MB and 19 MB
    assert not cal.rows_read_ahead(small, 784, 4) and cal.rows_read_ahead(large, 784, 4)
    timed = []
    time_cell = cal._time_cell
    monkeypatch.setattr(cal, "_time_cell",
                        lambda n, k, dtype, rng, ahead=False, *a: timed.append((n, k, ahead))
                        or time_cell(n, k, dtype, rng, ahead, *a))
    monkeypatch.setattr(cal, "AUTO_WORK", 10)
    cal.strategy(784, 10, f32, work=large * 784 * 10)
    assert timed == [(784, 10, True)]
    cells = json.loads(cal.wisdom_path().read_text())["float32"]["cells"]
    assert list(cells) == ["784,10,ahead"]
    cal.strategy(784, 10, f32, work=small * 784 * 10)
    assert timed == [(784, 10, True), (784, 10, False)]
    # off the grid: the cells around, each in the shape's regime
    cal.strategy(700, 4, f32, work=large * 700 * 4)
    assert sorted(timed[2:]) == [(16, 3, False), (16, 10, False), (784, 3, True)]
    # the two timings of one cell decide apart
    cal.wisdom_path().write_text(json.dumps({"float32": {"cells": {
        "784,10": {"winner": "gemm", "rows_s": 2.0, "gemm_s": 1.0},
        "784,10,ahead": {"winner": "rows", "rows_s": 1.0, "gemm_s": 2.0}}}}))
    cal.forget()
    assert cal.strategy(784, 10, f32, work=small * 784 * 10) == "gemm"
    assert cal.strategy(784, 10, f32, work=large * 784 * 10) == "rows"
    assert cal.winner_grid(cal._load()["float32"], ahead=True)[1] == [None, "rows"]
    assert len(timed) == 5


@pytest.mark.parametrize("wide", [True, False], ids=["avx512", "avx2"])
def test_the_fixed_rule_narrows_without_avx512(fresh, monkeypatch, wide):
    """Without AVX-512 the rows kernels' bound is FIXED_K_AVX2's per dtype:
    below 12 float32 classes, 6 float64, and on rows of at most 64
    features below 8 float32 classes; with it FIXED_K for both. The
    calibration's cells keep the rule's choice within the margin."""
    monkeypatch.setattr(cal, "WIDE_REGISTERS", wide)
    cal.forget()
    f32, f64 = (cal.FIXED_K, cal.FIXED_K) if wide else (12, 6)
    assert (cal.fixed_classes(4, 784), cal.fixed_classes(8, 784)) == (f32, f64)
    assert (cal.fixed_classes(4, 65), cal.fixed_classes(8, 65)) == (f32, f64)
    assert cal.FIXED_NARROW_FEATURES == 64
    narrow = cal.FIXED_K if wide else 8
    assert (cal.fixed_classes(4, 64), cal.fixed_classes(8, 64)) == (narrow, f64)
    big = cal.FIXED_WORK
    assert cal.fixed_rule(64, 7, big, 4) == "rows"
    assert cal.fixed_rule(64, 8, big, 4) == ("rows" if wide else "gemm")
    assert cal.fixed_rule(65, 8, big, 4) == "rows"
    words = cal._rule_words(np.dtype(np.float32), 64)
    assert words == ("the fixed rule (the rows kernels below 32 float32 classes)" if wide else
                     "the fixed rule (the rows kernels below 8 float32 classes on rows of at "
                     "most 64 features, on a CPU without AVX-512)")
    for itemsize, bound in ((4, f32), (8, f64)):
        assert cal.fixed_rule(784, bound - 1, big, itemsize) == "rows"
        assert cal.fixed_rule(784, bound, big, itemsize) == "gemm"
        assert cal.fixed_rule(784, bound - 1, big - 1, itemsize) == "gemm"  # small: GEMM
        # a timed cell: the rule's choice unless the other is clearly faster
        default = "rows" if 10 < bound else "gemm"
        assert cal._winner(784, 10, itemsize, 1.0, 1.0) == default
        assert cal._winner(784, 10, itemsize, 0.5, 1.0) == "rows"
        assert cal._winner(784, 10, itemsize, 1.0, 0.5) == "gemm"
    # without wisdom a call goes by it, per dtype
    assert cal.strategy(784, 10, np.float32, work=big) == "rows"
    assert cal.strategy(784, 10, np.float64, work=big) == ("rows" if wide else "gemm")


def test_between_cells_the_ratio_is_interpolated(tmp_path, monkeypatch):
    """The rows / GEMM time ratio of the cells around a shape, interpolated
    in log n and log k, decides it as a cell's is decided; without both
    times in every such cell, the nearest cell's winner. Never across
    LANES_FROM classes: a shape on one side goes by the columns on its side."""
    monkeypatch.delenv("FASTSOFTMAX_STRATEGY", raising=False)
    monkeypatch.setenv("FASTSOFTMAX_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cal, "GRID_N", (96, 112))
    monkeypatch.setattr(cal, "GRID_K", (20, 30, 48))
    # An AVX-512 host's fixed rule, the rows kernels below FIXED_K (= 32)
    # classes (test_the_fixed_rule_narrows_without_avx512: another host's)
    monkeypatch.setattr(cal, "WIDE_REGISTERS", True)
    assert cal.LANES_FROM == 32 == cal.fixed_classes(4, 96)

    def cell(ratio, winner):
        return {"winner": winner, "rows_s": ratio * 0.01, "gemm_s": 0.01}

    # the k = 20 cells chose rows (rows / GEMM 0.9), the k = 30 and 48 cells
    # GEMM (1.5)
    cells = {"96,20": cell(0.9, "rows"), "112,20": cell(0.9, "rows"),
             "96,30": cell(1.5, "gemm"), "112,30": cell(1.5, "gemm"),
             "96,48": cell(1.5, "gemm"), "112,48": cell(1.5, "gemm")}

    def with_wisdom(cells):
        cal.wisdom_path().write_text(json.dumps({"float32": {"cells": cells}}))
        cal.forget()

    f32 = np.dtype(np.float32)
    try:
        with_wisdom(cells)
        assert cal.grid_cell(100, 26) == (96, 30)
        # at k = 26 the interpolated ratio is 0.9 ** 0.35 * 1.5 ** 0.65 = 1.25: GEMM
        assert cal._bracket((20, 30), 26)[1][1] == pytest.approx(0.647, abs=1e-3)
        assert cal.strategy(100, 26, f32, work=1) == "gemm"
        # at k = 22, 1.01: rows (the fixed rule's below FIXED_K classes; GEMM
        # only from a ratio of 1 / 0.95 = 1.05)
        assert cal.fixed_rule(100, 22, 1, 4) == cal.fixed_rule(100, 36, 1 << 30, 4) == "gemm"
        assert cal.fixed_rule(100, 22, 1 << 30, 4) == "rows"  # as _winner takes it
        assert cal.strategy(100, 22, f32, work=1) == "rows"
        # below LANES_FROM the columns below it, the last one alone beyond
        # them: k = 31 by k = 30; from it, the columns from it: k = 36 by 48
        assert cal._k_columns(31) == (20, 30) and cal._k_columns(36) == (48,)
        around = cal._around(100, 31, 4, False)
        assert around == [((96, 30, False), pytest.approx(0.735, abs=1e-3)),
                          ((112, 30, False), pytest.approx(0.265, abs=1e-3))]
        cells["96,48"] = cells["112,48"] = cell(1.0, "gemm")
        with_wisdom(cells)
        assert cal.strategy(100, 36, f32, work=1) == "gemm"  # 1.0 alone: the fixed rule's
        cells["96,48"] = cells["112,48"] = cell(0.5, "rows")
        with_wisdom(cells)
        assert cal.strategy(100, 36, f32, work=1) == "rows"  # 0.5, not 0.5 with 1.5 at k = 30
        assert cal.strategy(100, 31, f32, work=1) == "gemm"  # 1.5, not with 0.5 at k = 48
        # on a cell: that cell alone
        assert cal._bracket(cal.GRID_N, 96) == [(96, 1.0)] and cal._bracket((48,), 60) == [
            (48, 1.0)]
        assert cal.strategy(96, 20, f32, work=1) == "rows"
        # a cell around it without its times: the nearest cell's winner
        cells["96,30"] = {"winner": "gemm"}
        with_wisdom(cells)
        assert cal.grid_cell(100, 22) == (96, 20)
        assert cal.strategy(100, 22, f32, work=1) == "rows"
        cells["96,30"] = cell(1.5, "gemm") | {"rows_s": "0.015"}
        with_wisdom(cells)
        assert cal.strategy(100, 22, f32, work=1) == "rows"
        assert cal.strategy(100, 26, f32, work=1) == "gemm"  # the nearest, (96, 30)
    finally:
        cal.forget()


def test_many_classes_go_by_the_cells_up_to_the_last_column(tmp_path, monkeypatch):
    """Above 48 classes the columns at 100 and 200 decide on rows of 384
    features or more (the rows kernels win some of those cells on some
    hosts); above the last column, and on narrower rows, GEMM without a
    timing."""
    monkeypatch.delenv("FASTSOFTMAX_STRATEGY", raising=False)
    monkeypatch.setenv("FASTSOFTMAX_CACHE_DIR", str(tmp_path))
    assert cal.SMALL_K == cal.GRID_K[-1] == 200 and 100 in cal.GRID_K
    assert cal._k_columns(70) == (48, 100, 200)

    def cell(ratio):
        return {"winner": "rows" if ratio < 1 else "gemm", "rows_s": ratio * 0.01,
                "gemm_s": 0.01}

    # rows / GEMM 0.8 at 784 features (the rows kernels' cells), 1.3 at 384
    cells = {f"{n},{k}": cell(0.8 if n == 784 else 1.3) for n in (384, 784)
             for k in (48, 100, 200)}
    cal.wisdom_path().write_text(json.dumps({"float64": {"cells": cells}}))
    cal.forget()
    f64 = np.dtype(np.float64)
    try:
        for k in (49, 70, 100, 150, 200):
            assert cal.strategy(784, k, f64, work=1) == "rows"
            assert cal.strategy(384, k, f64, work=1) == "gemm"
        # between the two columns of features: 0.8 ** 0.63 * 1.3 ** 0.37 = 0.96,
        # not below the margin (0.95): the fixed rule's GEMM
        assert cal.strategy(600, 100, f64, work=1) == "gemm"
        assert cal.strategy(700, 100, f64, work=1) == "rows"
        for k in (201, 1000):
            assert cal.strategy(784, k, f64, work=1 << 40) == "gemm"
            assert cal.explain(784, k, f64, work=1 << 40)["source"] == (
                "the fixed rule: GEMM blocks above 200 classes")
        # nor on rows of fewer than 384 features above 48 classes
        assert cal.MANY_K == 48 and cal.MANY_K_FEATURES == 384
        assert cal.strategy(383, 49, f64, work=1 << 40) == "gemm"
        assert cal.explain(128, 100, f64, work=1 << 40)["source"] == (
            "the fixed rule: GEMM blocks above 48 classes on rows of fewer than 384 features")
        assert cal.timed_shape(128, 48) and cal.timed_shape(384, 200)
        assert not cal.timed_shape(383, 49) and not cal.timed_shape(3072, 201)
        with pytest.raises(ValueError, match=r"\(128, 100\) is not timed: above 48 classes"):
            cal.calibrate(("float64",), cells=[(128, 100)], write=False)
        assert not (set(json.loads(cal.wisdom_path().read_text())["float64"]["cells"])
                    - set(cells)), "nothing timed above the last column"
    finally:
        cal.forget()


def test_a_cell_off_the_grid_is_refused(fresh, monkeypatch):
    with pytest.raises(ValueError, match=r"\(100, 3\) is not a cell"):
        cal.calibrate(("float64",), cells=[(100, 3)])
    # a timing read ahead where the cell has none in one of the dtypes: rows
    # of 80 features are read ahead in float64 (640 bytes), not in float32
    monkeypatch.setattr(cal, "GRID_N", (16, 80, 784))
    with pytest.raises(ValueError, match=r"\(80, 3\) is not timed on an X read ahead in float32"):
        cal.calibrate(("float64", "float32"), cells=[(784, 3, True), (80, 3, True)])
    assert not list(fresh.iterdir())
    table = cal.calibrate(("float64",), cells=[(784, 3, True)], blocks=False)["float64"]
    assert list(table["cells"]) == ["784,3,ahead"]


@pytest.mark.parametrize("forced", ["rows", "gemm"])
def test_the_environment_overrides(fresh, monkeypatch, forced):
    monkeypatch.setenv("FASTSOFTMAX_STRATEGY", forced)
    assert {cal.strategy(n, k, np.float64, work=1 << 40)
            for n, k in [(5, 2), (784, 10), (3000, 1000)]} == {forced}
    monkeypatch.setenv("FASTSOFTMAX_STRATEGY", "fixed")
    assert cal.strategy(5, 2, np.float64, work=1 << 40) == cal.fixed_rule(5, 2, 1 << 40, 8)
    assert cal.narrow_block_bytes(np.float64, work=1 << 40) == cal.NARROW_BLOCK_BYTES
    assert not list(fresh.iterdir())


def test_an_unwritable_cache_keeps_the_wisdom_in_memory(fresh, monkeypatch):
    blocked = fresh / "file"
    blocked.write_text("")
    monkeypatch.setenv("FASTSOFTMAX_CACHE_DIR", str(blocked / "sub"))  # not a folder
    table = cal.calibrate(("float64",))["float64"]
    assert cal.strategy(16, 3, np.float64) == table["cells"]["16,3"]["winner"]


def test_a_damaged_or_foreign_file_gives_the_fixed_rule(fresh):
    """Cells of another grid (another version) are not looked up; an entry
    without a valid winner, or a file that is not JSON, is ignored."""
    cells = {"100,2": {"winner": "gemm"}, "784,3": {"winner": "fast"}, "16,3": "rows"}
    cal.wisdom_path().write_text(json.dumps({"float64": {"cells": cells,
                                                         "narrow_block_bytes": -1}}))
    cal.forget()
    for n, k in [(100, 2), (784, 3), (16, 3)]:
        assert cal.strategy(n, k, np.float64) == cal.fixed_rule(n, k, 0, 8)
    assert cal.narrow_block_bytes(np.float64) == cal.NARROW_BLOCK_BYTES
    for text in ["{not json", '{"float64": [1, 2]}', '{"float64": {"cells": []}}', "[]"]:
        cal.wisdom_path().write_text(text)
        cal.forget()
        assert cal.strategy(784, 3, np.float64) == cal.fixed_rule(784, 3, 0, 8)
        assert cal.narrow_block_bytes(np.float64) == cal.NARROW_BLOCK_BYTES
    # ...and a calibration replaces the damage.
    cal.calibrate(("float64",), cells=[(784, 3)], blocks=False)
    assert list(json.loads(cal.wisdom_path().read_text())["float64"]["cells"]) == ["784,3"]


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


def test_a_large_problem_on_narrow_blocks_times_them_once(fresh, monkeypatch):
    """The GEMM engine of a large problem times the blocks' budget (with the
    BLAS library, tests/test_blas_choice.py) first, and no strategy cell;
    the rows strategy does not; a later narrow engine sizes its blocks by
    what was timed, without timing again."""
    from fastsoftmax._data import make_dataset
    from fastsoftmax._dense import DenseEngine, gemm_block_rows

    timed = []
    time_blocks = cal._time_blocks
    monkeypatch.setattr(cal, "_time_blocks", lambda *a: timed.append(a[0]) or time_blocks(*a))
    monkeypatch.setattr(cal, "BLAS_SHAPES", ((20, 100),))
    monkeypatch.setattr(cal, "AUTO_WORK", 10)

    def engine(n, k, strategy):
        X = np.zeros((600, n), np.float32)
        return DenseEngine(make_dataset(X, np.arange(600) % k, None, None, k), strategy)

    engine(20, 100, "rows")
    assert timed == [] and not list(fresh.iterdir())
    engine(784, 100, "gemm")  # wide rows: blocks sized by L2 alone, but the BLAS timed
    on_disk = json.loads(cal.wisdom_path().read_text())["float32"]
    assert timed == ["float32"] and on_disk["cells"] == {}
    chosen = on_disk["narrow_block_bytes"]
    assert chosen in cal.NARROW_CANDIDATES
    eng = engine(20, 100, "gemm")
    assert eng._rows == min(gemm_block_rows(20, 4, 100, 600, chosen), 600)
    assert timed == ["float32"]


def test_what_the_wisdom_gave_is_remembered_until_it_changes(fresh, monkeypatch):
    """Every call of the function API asks for its strategy and block budget:
    an answer found in the wisdom is kept, and asked again once the wisdom
    (a calibration, forget(), another object) or the override changes."""
    cal.calibrate(("float64",), cells=[(16, 3)], blocks=True)
    entries = []
    entry = cal._entry
    monkeypatch.setattr(cal, "_entry", lambda *a: entries.append(a) or entry(*a))
    f64 = np.dtype(np.float64)
    winner = cal._load()["float64"]["cells"]["16,3"]["winner"]
    assert [cal.strategy(16, 3, f64) for _ in range(3)] == [winner] * 3
    assert len(entries) == 1
    budget = cal.narrow_block_bytes(f64)
    other = "gemm" if winner == "rows" else "rows"
    wisdom = {"float64": {"cells": {"16,3": {"winner": other}},
                          "narrow_block_bytes": budget * 2}}
    monkeypatch.setattr(cal, "_wisdom", wisdom)
    assert cal.strategy(16, 3, f64) == other and len(entries) == 2
    assert cal.narrow_block_bytes(f64) == budget * 2
    monkeypatch.setenv("FASTSOFTMAX_STRATEGY", winner)
    assert cal.strategy(16, 3, f64) == winner
    monkeypatch.setenv("FASTSOFTMAX_STRATEGY", "fixed")
    assert cal.narrow_block_bytes(f64) == cal.NARROW_BLOCK_BYTES
    monkeypatch.delenv("FASTSOFTMAX_STRATEGY")
    assert cal.strategy(16, 3, f64) == other and cal.narrow_block_bytes(f64) == budget * 2
    cal.forget()  # the file again
    assert cal.strategy(16, 3, f64) == winner and cal.narrow_block_bytes(f64) == budget
    # A cell without wisdom is remembered as such for small problems (the
    # wisdom is not searched again), and a large problem still times it.
    chosen = [cal.strategy(784, 10, f64, work=0) for _ in range(3)]
    assert chosen == [cal.fixed_rule(784, 10, 0, 8)] * 3
    assert len(entries) == 4
    timed = []
    monkeypatch.setattr(cal, "AUTO_WORK", 10)
    calibrate = cal.calibrate
    monkeypatch.setattr(cal, "calibrate", lambda *a, **kw: timed.append(kw) or calibrate(*a, **kw))
    winner = cal.strategy(784, 10, f64, work=10)
    assert winner in ("rows", "gemm") and timed == [{"cells": [(784, 10, False)],
                                                      "blocks": False, "aside": None}]
    assert cal._load()["float64"]["cells"]["784,10"]["winner"] == winner
    assert cal.strategy(784, 10, f64, work=0) == winner  # the new wisdom, not the old None


def test_candidates_of_the_same_blocks_share_one_timing(fresh, monkeypatch):
    """At 4 KB a row every candidate budget gives (20, 1000) the 32-row
    minimum: one timing serves them all, so that noise between identical
    blocks cannot decide the calibration."""
    from fastsoftmax._dense import gemm_block_rows

    monkeypatch.setattr(cal, "NARROW_SHAPES", ((20, 1000), (20, 100)))
    assert len({gemm_block_rows(20, 8, 1000, 1 << 20, c) for c in cal.NARROW_CANDIDATES}) == 1
    assert len({gemm_block_rows(20, 8, 100, 1 << 20, c) for c in cal.NARROW_CANDIDATES}) == 3
    table = cal.calibrate(("float64",), cells=[], blocks=True)["float64"]
    first = {c: t[0] for c, t in table["narrow_s"].items()}
    assert len(set(first.values())) == 1 and all(t > 0 for t in first.values())
    assert table["narrow_block_bytes"] in cal.NARROW_CANDIDATES
