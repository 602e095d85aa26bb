"""fastsoftmax bench in quick mode: runs, prints one row per case, asserts no timings."""

import re

import pytest

from fastsoftmax import bench, cli


def test_quick_mode_prints_a_table(capsys):
    assert bench.main(["--quick", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "x** |" in line]
    assert len(rows) == 5, out
    for task in ("loss_and_grad", "softmax", "SGD epoch, batch 1", "SGD epoch, batch 64"):
        assert any(task in r for r in rows), out
    for r in rows:
        assert re.search(r"\*\*\d+\.\dx\*\* \|$", r), r


def test_through_the_command_line(capsys):
    assert cli.main(["bench", "--quick", "--rounds", "1", "--threads", "1"]) == 0
    assert "Numba threads" in capsys.readouterr().out


def test_bad_arguments_exit_with_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--rounds", "0"])
    assert exc.value.code == 2
    assert "--rounds must be at least 1" in capsys.readouterr().err


def test_calibrate_prints_every_cell_and_writes_them(capsys, tmp_path, monkeypatch):
    """--calibrate times the whole grid of both dtypes ahead of time, prints
    the winners and writes them. The timings are stand-ins here (rows faster
    at n = 784, GEMM at n = 16 with X read back to back, rows everywhere
    with X from memory; the middle block size fastest): the timing itself
    is tests/test_calibration.py's, and compiling every variant of both
    strategies would cost this test a minute."""
    import json

    from fastsoftmax import _calibration as cal

    monkeypatch.delenv("FASTSOFTMAX_STRATEGY", raising=False)
    monkeypatch.setenv("FASTSOFTMAX_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cal, "GRID_N", (16, 784))
    monkeypatch.setattr(cal, "GRID_K", (3, 48))
    timed = []
    monkeypatch.setattr(cal, "_time_cell", lambda n, k, dtype, rng, ahead=False, *a: timed.append(
        (n, k, dtype, ahead)) or {"winner": "rows" if n == 784 else "gemm", "rows_s": 1.0,
                                  "gemm_s": 2.0 if n == 784 else 0.5, "winner_cold": "rows",
                                  "rows_cold_s": 1.0, "gemm_cold_s": 2.0, "x_bytes": 1 << 20})
    monkeypatch.setattr(cal, "_time_blocks", lambda dtype, rng: {
        c: [1.0 if c == cal.NARROW_CANDIDATES[1] else 2.0] for c in cal.NARROW_CANDIDATES})
    monkeypatch.setattr(cal, "_time_blas", lambda dtype, rng: {"scipy": [0.001, 0.002, 0.003]})
    cal.forget()
    try:
        assert bench.main(["--calibrate", "--threads", "1"]) == 0
        out = capsys.readouterr().out
        wisdom = json.loads(cal.wisdom_path().read_text())
    finally:
        cal.forget()
    # (784, 48): its cell's X (2048 rows) is not read ahead, so it is timed
    # again on one that is
    assert sorted(timed) == sorted([(n, k, d, False) for n in (16, 784) for k in (3, 48)
                                    for d in ("float32", "float64")]
                                   + [(784, 48, d, True) for d in ("float32", "float64")])
    for dtype in ("float32", "float64"):
        assert cal.winner_grid(wisdom[dtype]) == [["gemm", "gemm"], ["rows", "rows"]]
        assert cal.winner_grid(wisdom[dtype], cold=True) == [["rows", "rows"], ["rows", "rows"]]
        assert wisdom[dtype]["narrow_block_bytes"] == cal.NARROW_CANDIDATES[1]
        assert f"{dtype}: GEMM blocks for narrow rows of many classes within " \
               f"{cal.NARROW_CANDIDATES[1] // 1024} KiB" in out
        assert wisdom[dtype]["blas"] == "scipy"
        assert f"{dtype}: the GEMM kernels multiply with scipy's BLAS " \
               "(summed over 3 shapes: scipy 6.0 ms)" in out
    assert out.count("| 16 | gemm | gemm |") == 2 and out.count("| 16 | rows | rows |") == 2
    assert out.count("| 784 | rows | rows |") == 4
    assert out.count("| 16 | - | - |") == 2 and out.count("| 784 | - | rows |") == 2
    assert out.count("the same, X from memory (large problems)") == 2
    assert out.count("timed again on an X the rows kernels read ahead") == 2
    assert str(cal.wisdom_path()) in out
