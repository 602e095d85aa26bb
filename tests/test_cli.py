"""The fastsoftmax command: train/predict round trips, errors, help, progress, demo."""

from __future__ import annotations

import csv
import importlib.machinery
import io
import os
import subprocess
import sys
import types

os.environ["MPLBACKEND"] = "Agg"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from _cli_helpers import SPECIES, assert_one_line_error, run, three_species  # noqa: E402
from sklearn.datasets import dump_svmlight_file  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402

from fastsoftmax import SoftmaxRegression, cli  # noqa: E402


@pytest.fixture(scope="module")
def data():
    return three_species()


@pytest.fixture
def csv_file(tmp_path, data):
    """Features a, b, c with the string target 'species' in the middle."""
    X, codes = data
    path = tmp_path / "train.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["a", "species", "b", "c"])
        for x, c in zip(X, codes, strict=True):
            w.writerow([repr(float(x[0])), SPECIES[c], repr(float(x[1])), repr(float(x[2]))])
    return path


def read_csv(text):
    rows = list(csv.reader(io.StringIO(text)))
    return rows[0], rows[1:]


# ------------------------------------------------------------ round trips
def test_csv_standardize_round_trip(capsys, tmp_path, csv_file, data):
    X, codes = data
    model_path = tmp_path / "m.npz"
    code, out, err = run(capsys, "train", csv_file, "--target", "species", "-o", model_path,
                         "--standardize", "--test-size", "0.25", "--random-state", "0")
    assert code == 0, err
    assert "training accuracy: " in out and "test accuracy: " in out
    assert f"model written to {model_path}" in out
    assert err == ""  # no progress bar: stderr is not a terminal

    # The plain estimator loads the file and ignores the CLI's extra arrays.
    model = SoftmaxRegression.load(model_path)
    assert model.classes_.tolist() == SPECIES.tolist()
    with np.load(model_path) as z:
        mean, scale = z["scaler_mean"], z["scaler_scale"]
        assert z["feature_names"].tolist() == ["a", "b", "c"]
        assert str(z["target_name"]) == "species"
    assert np.all(np.abs(mean - X.mean(axis=0)) < [0.3, 3, 0.03])  # from the training rows

    code, out, err = run(capsys, "predict", model_path, csv_file)
    assert code == 0, err
    header, rows = read_csv(out)
    assert header == ["species"]
    expected = model.predict((X - mean) / scale)
    assert [r[0] for r in rows] == expected.tolist()
    assert np.mean(expected == SPECIES[codes]) > 0.9

    # Columns are matched by name; the target column may be absent.
    shuffled = tmp_path / "shuffled.csv"
    with open(shuffled, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["c", "a", "b"])
        w.writerows([[repr(float(x[2])), repr(float(x[0])), repr(float(x[1]))] for x in X])
    code, out2, err = run(capsys, "predict", model_path, shuffled)
    assert code == 0, err
    assert out2 == out


def test_predict_proba_sums_to_one(capsys, tmp_path, csv_file):
    model_path = tmp_path / "m.npz"
    assert run(capsys, "train", csv_file, "--target", "species", "-o", model_path,
               "--dtype", "float32", "--standardize")[0] == 0
    out_csv = tmp_path / "p.csv"
    code, out, err = run(capsys, "predict", model_path, csv_file, "--proba", "-o", out_csv)
    assert code == 0 and out == ""
    assert "written to" in err
    header, rows = read_csv(out_csv.read_text())
    assert header == SPECIES.tolist()
    P = np.array(rows, dtype=float)
    assert P.shape == (240, 3)
    np.testing.assert_allclose(P.sum(axis=1), 1, atol=1e-6)
    model = SoftmaxRegression.load(model_path)
    assert model.coef_.dtype == np.float32


def test_npz_input_with_sgd(capsys, tmp_path, data):
    X, codes = data
    np.savez(tmp_path / "d.npz", X=X, y=codes)
    np.savez(tmp_path / "unlabelled.npz", X=X[:10])
    model_path = tmp_path / "m.npz"
    code, out, err = run(capsys, "train", tmp_path / "d.npz", "-o", model_path,
                         "--solver", "sgd", "--max-iter", "3", "--batch-size", "16",
                         "--eta0", "0.05", "--momentum", "0.5", "--random-state", "1",
                         "--standardize", "--n-threads", "1")
    assert code == 0, err
    assert "3 epochs" in out
    assert "fastsoftmax: warning: sgd did not converge" in err  # one line, not a traceback
    code, out, err = run(capsys, "predict", model_path, tmp_path / "unlabelled.npz")
    assert code == 0, err
    header, rows = read_csv(out)
    assert header == ["label"] and len(rows) == 10
    assert {r[0] for r in rows} <= {"0", "1", "2"}


def test_svmlight_input_one_based(capsys, tmp_path, data):
    X, codes = data
    Xs = np.where(np.abs(X - X.mean(axis=0)) > 0.2 * X.std(axis=0), X, 0)
    dump_svmlight_file(Xs, codes, str(tmp_path / "train.svm"), zero_based=False)
    # A prediction file in which the first feature is always 0 (never written).
    Xp = Xs[:20].copy()
    Xp[:, 0] = 0
    dump_svmlight_file(Xp, np.zeros(20), str(tmp_path / "test.svm"), zero_based=False)
    model_path = tmp_path / "m.npz"
    code, out, err = run(capsys, "train", tmp_path / "train.svm", "-o", model_path,
                         "--solver", "bgd", "--standardize", "--early-stopping",
                         "--random-state", "0")
    assert code == 0, err
    assert "x 3 features" in out
    code, out, err = run(capsys, "predict", model_path, tmp_path / "test.svm")
    assert code == 0, err
    model = SoftmaxRegression.load(model_path)
    with np.load(model_path) as z:
        expected = model.predict((Xp - z["scaler_mean"]) / z["scaler_scale"])
    assert [int(r[0]) for r in read_csv(out)[1]] == expected.tolist()


# ----------------------------------------------------------------- errors
def _bad_csv(tmp_path, text, name="bad.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_user_errors_are_one_line(capsys, tmp_path, csv_file, data):
    X, codes = data
    model_path = tmp_path / "m.npz"
    assert run(capsys, "train", csv_file, "--target", "species", "-o", model_path)[0] == 0
    np.savez(tmp_path / "two.npz", X=X[:, :2], y=codes)
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip file at all")
    stranger = tmp_path / "stranger.npz"
    np.savez(stranger, coef=np.zeros((2, 2)))
    cases = [
        (["train", tmp_path / "missing.csv", "-o", model_path], ["missing.csv"]),
        (["train", csv_file, "--target", "colour", "-o", model_path],
         ["train.csv", "'colour'", "--target"]),
        (["train", _bad_csv(tmp_path, "a,b,y\n1,2,x\n3,oops,y\n"), "-o", model_path],
         ["bad.csv", "line 3", "'b'", "'oops'"]),
        (["train", _bad_csv(tmp_path, "a,b,y\n1,2,x\n3,4\n", "ragged.csv"), "-o", model_path],
         ["ragged.csv", "line 3", "2 fields"]),
        (["train", csv_file, "-o", model_path],  # default target: the last column, so
         ["'species'", "'setosa'", "is not a number"]),  # 'species' is a feature
        (["train", csv_file, "--target", "species", "--alpha", "-1", "-o", model_path],
         ["--alpha", "alpha must be >= 0"]),
        (["train", csv_file, "--target", "species", "--solver", "sgd", "--momentum", "1",
          "-o", model_path], ["--momentum"]),
        (["train", csv_file, "--target", "species", "-o", tmp_path / "no" / "m.npz"],
         ["m.npz", "does not exist"]),
        (["predict", model_path, tmp_path / "two.npz"], ["two.npz", "2 features", "3"]),
        (["predict", model_path, _bad_csv(tmp_path, "a,b\n1,2\n", "ab.csv")],
         ["ab.csv", "missing feature columns ['c']"]),
        (["predict", junk, csv_file], ["junk.npz"]),
        (["predict", stranger, csv_file], ["stranger.npz", "missing arrays"]),
        (["predict", tmp_path / "nomodel.npz", csv_file], ["nomodel.npz"]),
    ]
    for argv, needles in cases:
        code, out, err = run(capsys, *argv)
        assert code == 1, (argv, err)
        assert_one_line_error(err, *needles)


def test_predict_error_from_the_model_is_one_line(capsys, tmp_path, data):
    X, codes = data
    np.savez(tmp_path / "d.npz", X=X, y=codes)
    model_path = tmp_path / "m.npz"
    assert run(capsys, "train", tmp_path / "d.npz", "-o", model_path)[0] == 0
    # Weights so large that the logits of ordinary-looking data overflow float64.
    with np.load(model_path) as z:
        arrays = {key: z[key] for key in z.files}
    arrays["coef"] = arrays["coef"] * 1e300
    np.savez(model_path, **arrays)
    np.savez(tmp_path / "huge.npz", X=X[:5] * 1e10)
    code, out, err = run(capsys, "predict", model_path, tmp_path / "huge.npz", "--proba")
    assert code == 1 and out == ""
    assert_one_line_error(err, "huge.npz", "m.npz", "overflow")


def test_predict_missing_output_folder_fails_before_reading(capsys, tmp_path, monkeypatch):
    def must_not_run(*args, **kwargs):
        raise AssertionError("the model was loaded before the output folder was checked")

    monkeypatch.setattr(cli._io, "load_model", must_not_run)
    code, out, err = run(capsys, "predict", tmp_path / "m.npz", tmp_path / "d.csv",
                         "-o", tmp_path / "no" / "p.csv")
    assert code == 1 and out == ""
    assert_one_line_error(err, "p.csv", "does not exist")


def test_csv_target_defaults_to_last_column(capsys, tmp_path, data):
    X, codes = data
    path = tmp_path / "last.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["a", "b", "c", "kind"])
        w.writerows([[repr(float(v)) for v in x] + [SPECIES[c]]
                     for x, c in zip(X, codes, strict=True)])
    model_path = tmp_path / "m.npz"
    code, out, err = run(capsys, "train", path, "-o", model_path, "--standardize")
    assert code == 0, err
    assert "x 3 features" in out
    with np.load(model_path) as z:
        assert z["feature_names"].tolist() == ["a", "b", "c"]
        assert str(z["target_name"]) == "kind"
    assert SoftmaxRegression.load(model_path).classes_.tolist() == SPECIES.tolist()
    code, out, err = run(capsys, "predict", model_path, path)  # 'kind' is ignored
    assert code == 0, err
    header, rows = read_csv(out)
    assert header == ["kind"] and len(rows) == len(codes)
    assert np.mean(np.array([r[0] for r in rows]) == SPECIES[codes]) > 0.9


def test_target_option_needs_csv(capsys, tmp_path, data):
    X, codes = data
    np.savez(tmp_path / "d.npz", X=X, y=codes)
    dump_svmlight_file(X, codes, str(tmp_path / "d.svm"))
    for name in ("d.npz", "d.svm"):
        code, out, err = run(capsys, "train", tmp_path / name, "--target", "species",
                             "-o", tmp_path / "m.npz")
        assert code == 1, err
        assert_one_line_error(err, "--target", "CSV, Parquet and Feather input only", name)
    assert not (tmp_path / "m.npz").exists()


def test_usage_errors_exit_2(capsys):
    for argv in (["train"], ["frobnicate"], ["train", "x.csv", "-o", "m.npz", "--solver", "adam"],
                 ["train", "x.csv", "-o", "m.npz", "--alpha", "lots"], []):
        with pytest.raises(SystemExit) as info:
            cli.main(argv)
        assert info.value.code == 2
        assert "usage: fastsoftmax" in capsys.readouterr().err


def test_help_describes_every_option(capsys):
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) == {"demo", "train", "predict", "bench", "info"}
    for name in ("demo", "train", "predict", "info"):
        with pytest.raises(SystemExit) as info:
            cli.main([name, "--help"])
        assert info.value.code == 0
        out = capsys.readouterr().out
        for action in sub.choices[name]._actions:
            assert action.help, (name, action.dest)
            for flag in action.option_strings:
                assert flag in out, (name, flag)
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert all(c in out for c in ("demo", "train", "predict", "bench", "info"))


# ------------------------------------------------------------------ bench
def test_bench_help_describes_its_options(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["bench", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: fastsoftmax bench")
    for flag in ("--quick", "--rounds", "--threads"):
        assert flag in out, flag
    # The top-level help and the parser's description speak of the real command.
    bench = next(a for a in cli.build_parser()._actions if a.dest == "command").choices["bench"]
    assert "not available" not in bench.description
    assert all(flag in bench.description for flag in ("--quick", "--rounds", "--threads"))


def test_bench_delegates_to_module(capsys, monkeypatch):
    seen = []
    fake = types.ModuleType("fastsoftmax.bench")
    fake.__spec__ = importlib.machinery.ModuleSpec("fastsoftmax.bench", None)
    fake.main = lambda argv: seen.append(argv) or 3
    monkeypatch.setitem(sys.modules, "fastsoftmax.bench", fake)
    code, _, _ = run(capsys, "bench", "--size", "small", "--help")
    assert code == 3 and seen == [["--size", "small", "--help"]]


# --------------------------------------------------------------- progress
def test_progress_bar_with_verbose(capsys, data):
    X, codes = data
    SoftmaxRegression(verbose=1, max_iter=500).fit(X, codes)
    out, err = capsys.readouterr()
    assert "newton" in err and "loss=" in err and "/200" not in err and "/500" in err
    assert out == ""
    with pytest.warns(ConvergenceWarning):
        SoftmaxRegression("sgd", verbose=2, max_iter=3, random_state=0).fit(
            (X - X.mean(axis=0)) / X.std(axis=0), codes)
    out, err = capsys.readouterr()
    assert "sgd iteration 3: loss" in out and "3/3" in err and "epoch" in err, (out, err)
    SoftmaxRegression(max_iter=500).fit(X, codes)
    assert capsys.readouterr() == ("", "")


def test_cli_progress_option(capsys, tmp_path, csv_file):
    args = ["train", csv_file, "--target", "species", "-o", tmp_path / "m.npz", "--standardize"]
    code, _, err = run(capsys, *args, "--progress")
    assert code == 0 and "loss=" in err
    code, _, err = run(capsys, *args)  # stderr is not a terminal here: no bar
    assert code == 0 and err == ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs a Linux pseudo-terminal")
def test_progress_bar_on_by_default_on_a_terminal(tmp_path, csv_file):
    """No --progress: the bar appears because stderr is a (pseudo-)terminal."""
    import fcntl
    import struct
    import termios

    master, slave = os.openpty()
    # A new pseudo-terminal is 0 columns wide; give it a real terminal's size.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "fastsoftmax", "train", str(csv_file), "--target", "species",
             "-o", str(tmp_path / "m.npz"), "--standardize"],
            stdout=subprocess.PIPE, stderr=slave, text=True, timeout=300,
            env=dict(os.environ, MPLBACKEND="Agg"))
    finally:
        os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other end is closed and drained
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.returncode == 0
    assert "loss=" in b"".join(chunks).decode("utf-8", "replace")


# -------------------------------------------------------------- processes
def _python_m(*argv, cwd=None):
    env = dict(os.environ, MPLBACKEND="Agg")
    return subprocess.run([sys.executable, "-m", "fastsoftmax", *map(str, argv)],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def test_subprocess_exit_codes_and_messages(tmp_path, csv_file):
    proc = _python_m("train", tmp_path / "nothing.csv", "-o", tmp_path / "m.npz")
    assert proc.returncode == 1
    assert_one_line_error(proc.stderr, "nothing.csv")
    proc = _python_m("predict", tmp_path / "m.npz")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "usage: fastsoftmax predict" in proc.stderr
    proc = _python_m("train", csv_file, "--target", "species", "-o", tmp_path / "m.npz",
                     "--max-iter", "20", "--tol", "1e-2")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "model written to" in proc.stdout
    proc = _python_m("predict", tmp_path / "m.npz", csv_file, "--proba")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "setosa,versicolor,virginica"


def test_demo_quick_writes_plots(capsys, tmp_path):
    out_dir = tmp_path / "demo"
    code, out, err = run(capsys, "demo", "--quick", "--out", out_dir)
    assert code == 0, err
    for solver in ("newton", "lbfgs", "sgd", "bgd"):
        assert out.count(f"  {solver} ") == 3  # digits, toy and sparse text tables
    assert "sparse text-like data" in out and "scipy.sparse CSR" in out
    assert "MNIST-shaped" in out and "digits-sized" in out and "x" in out
    pngs = sorted(p.name for p in out_dir.iterdir())
    assert pngs == sorted(["digits_loss_curves.png", "digits_confusion_matrix.png",
                           "digits_class_weights.png", "toy_decision_regions.png",
                           "toy_loss_curves.png", "text_loss_curves.png"])
    for name in pngs:
        assert (out_dir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_predict_and_version_do_not_load_numba(csv_file, tmp_path):
    """``predict`` (labels) of dense data is BLAS and NumPy alone: a process
    that only predicts, or asks for ``--version``, imports neither Numba
    (about 0.2 s) nor, through it, SciPy, and never pays Numba's one-time
    set-up before its first kernel (about 0.45 s); nor pandas where pyarrow
    reads the CSV."""
    model, out = tmp_path / "m.npz", tmp_path / "p.csv"
    from fastsoftmax.cli import main

    assert main(["train", str(csv_file), "-o", str(model), "--target", "species"]) == 0
    code = (
        "import sys, contextlib, io\n"
        "from fastsoftmax.cli import main\n"
        f"argv = ['predict', {str(model)!r}, {str(csv_file)!r}, '-o', {str(out)!r}]\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['--version']) == 0\n"
        "    assert 'numba' not in sys.modules and 'scipy' not in sys.modules\n"
        "    assert main(argv) == 0\n"
        "assert 'numba' not in sys.modules and 'scipy' not in sys.modules\n"
        "import importlib.util\n"
        "assert importlib.util.find_spec('pyarrow') is None or 'pandas' not in sys.modules\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_commands_do_not_load_scikit_learn(csv_file, tmp_path):
    """``import fastsoftmax`` (the functions), ``--version``, ``--help``, and
    ``train`` (whole file and ``--chunksize``) and ``predict`` on a CSV leave
    scikit-learn (about a second of start-up), scipy.optimize and
    scipy.sparse unimported:
    the command line trains SoftmaxModel, the estimator without scikit-learn.
    The estimator loads scikit-learn on first use."""
    model, out = tmp_path / "m.npz", tmp_path / "p.csv"
    runs = [["--version"], ["predict", "--help"], ["--help"], ["train", "--help"],
            ["train", str(csv_file), "-o", str(model), "--target", "species"],
            ["predict", str(model), str(csv_file), "-o", str(out)],
            ["predict", str(model), str(csv_file), "-o", str(out), "--proba"],
            ["train", str(csv_file), "-o", str(model), "--target", "species",
             "--chunksize", "50", "--standardize"]]
    code = (
        "import sys, contextlib, io\n"
        "import fastsoftmax\n"
        "assert 'sklearn' not in sys.modules, 'import fastsoftmax'\n"
        "from fastsoftmax.cli import main\n"
        f"for argv in {runs!r}:\n"
        "    code = 0\n"
        "    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "        code = main(argv)\n"
        "    assert code == 0, (argv, code)\n"
        "    assert 'sklearn' not in sys.modules, argv\n"
        "    assert 'scipy.optimize' not in sys.modules, argv\n"
        "    assert 'scipy.sparse' not in sys.modules, argv\n"
        "fastsoftmax.SoftmaxRegression\n"
        "assert 'sklearn' in sys.modules\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
