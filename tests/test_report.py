"""``fastsoftmax.show_config`` and ``fastsoftmax info``: what runs on this machine, and why."""

import json

import numpy as np
import pytest

import fastsoftmax as fs
from fastsoftmax import _calibration as cal
from fastsoftmax import _dense, _report
from fastsoftmax._blas_choice import candidates
from fastsoftmax._data import loss_data
from fastsoftmax._kernels._common import reads_ahead
from fastsoftmax._objective import Objective
from fastsoftmax.cli import main


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """No overrides, an empty cache folder of our own, a small grid; nothing may time a cell."""
    for name in ("FASTSOFTMAX_STRATEGY", "FASTSOFTMAX_BLAS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FASTSOFTMAX_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cal, "GRID_N", (16, 784))
    monkeypatch.setattr(cal, "GRID_K", (3, 10))
    # cells of small X, not read ahead (test_calibration's fresh)
    monkeypatch.setattr(cal, "CELL_WORK", 1 << 16)

    def no_calibration(*args, **kwargs):
        raise AssertionError("a report timed something")

    monkeypatch.setattr(cal, "calibrate", no_calibration)
    cal.forget()
    yield tmp_path
    cal.forget()


def _write_wisdom(dtype, cells, **extra):
    cal.wisdom_path().write_text(json.dumps({dtype: {"cells": cells, **extra}}))
    cal.forget()


def _cell(rows_s, gemm_s):
    return {"winner": "rows" if rows_s < gemm_s else "gemm", "rows_s": rows_s, "gemm_s": gemm_s}


def test_the_report_names_versions_settings_threads_and_blas(fresh, monkeypatch):
    import numba
    import scipy

    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "4")
    report = fs.show_config(mode="dicts")
    assert report["fastsoftmax"]["version"] == fs.__version__
    assert report["dependencies"]["numpy"] == np.__version__
    assert report["dependencies"]["scipy"] == scipy.__version__
    assert report["dependencies"]["numba"] == numba.__version__
    assert report["settings"]["OPENBLAS_THREAD_TIMEOUT"] == "4"
    assert report["settings"]["FASTSOFTMAX_CACHE_DIR"] == str(fresh)
    assert "FASTSOFTMAX_STRATEGY" not in report["settings"]
    assert report["threads"]["numba_threads"] == numba.get_num_threads()
    assert report["machine"]["cpus"] >= 1 and report["machine"]["cpu"] == cal.cpu_model()
    blas = report["blas"]
    assert blas["gemm_candidates"] == list(candidates()) and blas["gemm_candidates"][0] == "scipy"
    assert any(lib["internal_api"] for lib in blas["loaded"])
    calib = report["calibration"]
    assert calib["wisdom"] == str(cal.wisdom_path()) and calib["exists"] is False
    grid = len(cal._cells_to_time(("float32",), None)["float32"])  # with timings read ahead
    assert grid >= 4
    assert calib["float32"] == {"cells": 0, "grid": grid, "blas": None,
                                "narrow_block_bytes": None}
    assert "shape" not in report
    assert not list(fresh.iterdir()), "a report writes no wisdom"


def test_the_calibration_counts_timed_cells_and_choices(fresh):
    _write_wisdom("float64", {"784,10": _cell(1.0, 2.0), "16,3": {"winner": "gemm"}},
                  blas="scipy", narrow_block_bytes=1 << 16)
    calib = fs.show_config(mode="dicts")["calibration"]
    # a cell without both times decides nothing, so it is not counted
    grid = len(cal._cells_to_time(("float64",), None)["float64"])
    assert calib["float64"] == {"cells": 1, "grid": grid, "blas": "scipy",
                                "narrow_block_bytes": 1 << 16}
    assert calib["exists"] is True and calib["float32"]["cells"] == 0


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(3000, 784, 10), (3000, 20, 100), (300, 700, 5),
                                   (50, 3000, 200), (6000, 784, 3)])
def test_a_shapes_plan_is_what_a_fit_runs(fresh, dtype, shape):
    """The report's plan for a shape is what a solver's objective on such data runs."""
    m, n, k = shape
    plan = fs.show_config(shape=shape, dtype=dtype, mode="dicts")["shape"]
    assert set(plan) == {"n_samples", "n_features", "n_classes", dtype}
    assert (plan["n_samples"], plan["n_features"], plan["n_classes"]) == shape
    plan = plan[dtype]
    rng = np.random.default_rng(0)
    X = rng.standard_normal((m, n)).astype(dtype)
    y = np.arange(m) % k
    engine = Objective(loss_data(X, y, k, None), warm=True).engine
    assert {key: plan[key] for key in engine.describe()} == engine.describe()
    assert plan["strategy"] == cal.strategy(n, k, np.dtype(dtype), m * n * k)
    if plan["strategy"] == "rows":
        assert plan["reads_ahead"] == reads_ahead.py_func(m, n, np.dtype(dtype).itemsize)
    else:
        assert plan["blas"] in candidates() and plan["block_rows"] >= 1
        assert "not timed" in plan["blas_why"]
    assert "fixed rule" in plan["why"]


def test_the_overrides_are_named(fresh, monkeypatch):
    monkeypatch.setenv("FASTSOFTMAX_STRATEGY", "gemm")
    monkeypatch.setenv("FASTSOFTMAX_BLAS", "scipy")
    report = fs.show_config(shape=(2000, 784, 10), dtype=np.float64, mode="dicts")
    plan = report["shape"]["float64"]
    assert plan["strategy"] == "gemm" and plan["why"] == "FASTSOFTMAX_STRATEGY=gemm"
    # (the block products on the tiles of _kernels._outer where the host takes them)
    kernel = "gemm_tiles" if _dense.outer_tiles(784, 10, 8) else "gemm"
    assert plan["kernel"] == kernel and plan["blas"] == "scipy"
    assert plan["blas_why"] == "FASTSOFTMAX_BLAS"
    assert report["settings"]["FASTSOFTMAX_BLAS"] == "scipy"
    monkeypatch.setenv("FASTSOFTMAX_STRATEGY", "fixed")
    plan = fs.show_config(shape=(2000, 784, 10), dtype="float64", mode="dicts")["shape"]["float64"]
    assert plan["strategy"] == cal.fixed_rule(784, 10, 2000 * 784 * 10, 8)
    bound = cal.fixed_classes(8, 784)
    cpu = "" if cal.WIDE_REGISTERS else " on a CPU without AVX-512"
    assert plan["why"] == (f"the fixed rule (the rows kernels below {bound} float64 classes{cpu})"
                           " (FASTSOFTMAX_STRATEGY=fixed)")


def test_a_shape_goes_by_the_wisdom_without_timing(fresh, monkeypatch):
    """Timed cells decide and are named; a large shape whose cells are not
    timed is reported undecided, with the cells its call would time, and
    nothing is timed (the fixture's calibrate raises)."""
    monkeypatch.setattr(cal, "AUTO_WORK", 1 << 20)
    f32 = np.dtype(np.float32)
    # (784, 3) and (784, 10): rows faster at both
    _write_wisdom("float32", {"784,3": _cell(1.0, 3.0), "784,10": _cell(1.0, 3.0)})
    small = cal.explain(784, 5, f32, work=1000)
    assert small == {"strategy": "rows", "untimed": [], "times_first": False,
                     "source": "this host's wisdom, the cells 784,3; 784,10"}
    # the cells on the other side not timed: a small call goes by the nearest alone
    small = cal.explain(700, 3, f32, work=1000)
    assert small["strategy"] == "rows" and small["untimed"] == ["16,3"]
    assert small["source"] == "this host's wisdom, the nearest cell 784,3 alone"
    assert not small["times_first"]
    # a large call would time (16, 3) first
    large = cal.explain(700, 3, f32, work=1 << 21)
    assert large["strategy"] is None and large["times_first"] and large["untimed"] == ["16,3"]
    assert "times the cells 16,3 first" in large["source"]
    plan = fs.show_config(shape=(1000, 700, 3), dtype="float32", mode="dicts")["shape"]["float32"]
    assert plan["strategy"] is None and "16,3" in plan["why"] and "kernel" not in plan
    # and what was not decided was not remembered as decided: with the cell
    # timed, the same large shape goes by the wisdom
    _write_wisdom("float32", {"784,3": _cell(1.0, 3.0), "16,3": _cell(3.0, 1.0)})
    assert cal.explain(700, 3, f32, work=1 << 21)["untimed"] == []
    assert cal.strategy(700, 3, f32, work=1 << 21) == cal.explain(700, 3, f32, 1 << 21)["strategy"]


@pytest.mark.parametrize("wide", [True, False], ids=["avx512", "avx2"])
def test_a_small_shapes_untimed_cell_gives_the_fixed_rule(fresh, monkeypatch, wide):
    # named with its bound for the dtype on this host's registers
    monkeypatch.setattr(cal, "WIDE_REGISTERS", wide)
    out = cal.explain(784, 10, np.float64, work=1000)
    assert out["strategy"] == cal.fixed_rule(784, 10, 1000, 8)
    rule = ("the fixed rule (the rows kernels below 32 float64 classes)" if wide else
            "the fixed rule (the rows kernels below 6 float64 classes on a CPU without AVX-512)")
    assert out["source"] == rule + ": the shape's cell is not timed on this host"
    assert out["untimed"] and not out["times_first"]
    assert cal.explain(784, 10, np.float32, work=1000)["source"].startswith(
        "the fixed rule (the rows kernels below " + ("32" if wide else "12") + " float32 classes")
    assert cal.explain(784, 1000, np.float64, work=1 << 40)["source"] == (
        f"the fixed rule: GEMM blocks above {cal.SMALL_K} classes")


def test_printed_as_text_and_json(fresh, capsys):
    assert fs.show_config(shape=(1000, 20, 3), dtype="float32") is None
    text = capsys.readouterr().out
    assert text.startswith("fastsoftmax:\n  version: ")
    assert "\nshape:\n" in text and "\n  float32:\n    strategy: " in text
    assert "float64:\n    strategy" not in text
    assert main(["info", "--shape", "1000x20x3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["shape"]["n_features"] == 20 and set(report["shape"]) >= {"float32", "float64"}
    assert main(["info"]) == 0
    assert "calibration:" in capsys.readouterr().out


@pytest.mark.parametrize("kwargs, message", [
    ({"shape": (10, 5)}, "shape must be"),
    ({"shape": (10, 5, 1)}, "n_classes of at least 2"),
    ({"shape": (0, 5, 3)}, "n_samples and n_features of at least 1"),
    ({"shape": "big"}, "shape must be"),
    ({"shape": (1.5, 20, 3)}, "three whole numbers"),
    ({"shape": (100, True, 3)}, "three whole numbers"),
    ({"shape": (100, 20, 3, 1)}, "three whole numbers"),
    ({"dtype": np.int32}, "dtype must be float32, float64"),
    ({"dtype": "float16"}, "dtype must be float32, float64"),
    ({"mode": "json"}, "mode must be"),
])
def test_bad_arguments_are_named(fresh, kwargs, message):
    with pytest.raises(ValueError, match=message):
        fs.show_config(**kwargs)


def test_integer_types_of_numpy_are_whole_numbers(fresh):
    shape = (np.int64(1000), np.int32(20), 3)
    report = fs.show_config(shape=shape, dtype="float32", mode="dicts")["shape"]
    assert (report["n_samples"], report["n_features"], report["n_classes"]) == (1000, 20, 3)


@pytest.mark.parametrize("shape", ["20x3", "axbxc", "10x5x1", "0x5x3", "10x-5x3"])
def test_the_command_refuses_a_bad_shape(fresh, shape, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["info", "--shape", shape])
    assert exc.value.code == 2
    assert "--shape" in capsys.readouterr().err


def test_nested_values_are_printed_one_a_line():
    assert _report.format_report({"a": {"b": None, "c": [1, 2]}}) == "a:\n  b: -\n  c: 1, 2"


def test_a_lookup_that_only_looks_leaves_the_timing_to_the_next_call(fresh, monkeypatch):
    """What a report found untimed is not remembered: the next large call times its cells."""
    monkeypatch.setattr(cal, "AUTO_WORK", 1 << 20)
    f64 = np.dtype(np.float64)
    assert cal.explain(784, 10, f64, work=1 << 21)["times_first"]
    with cal.looking_only():
        assert cal.strategy(784, 10, f64, work=1 << 21) == cal.fixed_rule(784, 10, 1 << 21, 8)
        assert cal.blas_library(f64, work=1 << 21) == "scipy"
    timed = []
    monkeypatch.setattr(cal, "calibrate", lambda dtypes, **kw: timed.append((dtypes, kw)))
    cal.strategy(784, 10, f64, work=1 << 21)
    cal.blas_library(f64, work=1 << 21)
    assert [(dtypes, kw.get("blocks")) for dtypes, kw in timed] == [(("float64",), False),
                                                                    (("float64",), True)]
