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
    """--calibrate times the whole (here: a tiny) grid of both dtypes ahead of time."""
    import json

    from fastsoftmax import _calibration as cal

    monkeypatch.delenv("FASTSOFTMAX_STRATEGY", raising=False)
    monkeypatch.setenv("FASTSOFTMAX_CACHE_DIR", str(tmp_path))
    for name, value in [("GRID_N", (16, 784)), ("GRID_K", (3, 10)), ("CELL_WORK", 1 << 16),
                        ("ROUNDS", 1), ("NARROW_SHAPES", ((20, 100),)), ("NARROW_WORK", 1 << 16)]:
        monkeypatch.setattr(cal, name, value)
    cal.forget()
    try:
        assert bench.main(["--calibrate", "--threads", "1"]) == 0
        out = capsys.readouterr().out
        wisdom = json.loads(cal.wisdom_path().read_text())
    finally:
        cal.forget()
    for dtype in ("float32", "float64"):
        grid = cal.winner_grid(wisdom[dtype])
        for n, winners in zip((16, 784), grid, strict=True):
            assert f"| {n} | {winners[0]} | {winners[1]} |" in out
        assert all(w in ("rows", "gemm") for row in grid for w in row)
        assert f"within {wisdom[dtype]['narrow_block_bytes'] // 1024} KiB" in out
    assert str(cal.wisdom_path()) in out
