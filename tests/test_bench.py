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
