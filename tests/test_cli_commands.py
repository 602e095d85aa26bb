"""train --chunksize (streaming with partial_fit), predict --chunksize, --classes, the
progress bar of a streamed pass, the option combinations that are usage errors, and sparse
files (svmlight) kept sparse through train and predict."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
import scipy.sparse
from _cli_helpers import (
    SPECIES,
    assert_one_line_error,
    run,
    sparse_species,
    three_species,
    write_csv,
    write_svmlight,
)

from fastsoftmax import SoftmaxRegression, cli
from fastsoftmax._model import SoftmaxModel  # what the command line trains
from fastsoftmax.cli import _io

FORMATS = ["csv", "parquet"]


@pytest.fixture(scope="module")
def frame():
    """Features a, b, c and the string label 'species' (last); 600 rows in random order."""
    X, codes = three_species(m=600, shuffle=True)
    return pd.DataFrame({"a": X[:, 0], "b": X[:, 1], "c": X[:, 2], "species": SPECIES[codes]})


def table_file(tmp_path, frame, fmt):
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    path = tmp_path / f"d.{fmt}"
    getattr(frame, f"to_{fmt}")(path, index=False)
    return path


@pytest.mark.parametrize("fmt", FORMATS)
def test_chunked_training_matches_a_full_read(capsys, tmp_path, frame, fmt):
    path = table_file(tmp_path, frame, fmt)
    full, streamed = tmp_path / "full.npz", tmp_path / "streamed.npz"
    code, out, err = run(capsys, "train", path, "-o", full, "--standardize")
    assert code == 0, err
    assert "trained auto (newton) on 600 rows x 3 features" in out  # the solver that ran
    code, out, err = run(capsys, "train", path, "-o", streamed, "--standardize",
                         "--chunksize", "64", "--epochs", "3", "--random-state", "0")
    assert code == 0, err
    assert "trained sgd on 600 rows x 3 features, 3 classes (float64)" in out
    assert "3 epochs in chunks of 64 rows" in out
    accuracy = re.search(r"progressive accuracy ([0-9.]+) on 600 rows", out)
    assert accuracy and float(accuracy.group(1)) > 0.9, out
    with np.load(full) as a, np.load(streamed) as b:
        for key in ("classes", "feature_names", "target_name"):
            np.testing.assert_array_equal(a[key], b[key])
        # Statistics merged over 10 chunks: the full read's to rounding.
        np.testing.assert_allclose(b["scaler_mean"], a["scaler_mean"], rtol=1e-13)
        np.testing.assert_allclose(b["scaler_scale"], a["scaler_scale"], rtol=1e-13)
    model = SoftmaxRegression.load(streamed)
    assert model.solver == "sgd" and model.n_iter_ == 3 * 10  # one partial_fit per chunk
    code, out, err = run(capsys, "predict", streamed, path)
    assert code == 0, err
    assert np.mean(np.array(out.splitlines()[1:]) == frame["species"]) > 0.95


def test_chunked_training_holds_one_chunk_at_a_time(capsys, tmp_path, frame, monkeypatch):
    path = table_file(tmp_path, frame, "csv")
    seen = []
    original = SoftmaxModel.partial_fit

    def spy(self, X, y, classes=None, sample_weight=None):
        seen.append(X.shape[0])
        return original(self, X, y, classes=classes, sample_weight=sample_weight)

    def whole_file(*args, **kwargs):
        raise AssertionError("--chunksize read the whole file")

    monkeypatch.setattr(SoftmaxModel, "partial_fit", spy)
    monkeypatch.setattr(_io, "read", whole_file)
    monkeypatch.setattr(_io, "read_rows", whole_file)
    code, out, err = run(capsys, "train", path, "-o", tmp_path / "m.npz", "--chunksize", "250",
                         "--dtype", "float32", "--epochs", "2")
    assert code == 0, err
    assert seen == [250, 250, 100] * 2
    assert SoftmaxRegression.load(tmp_path / "m.npz").coef_.dtype == np.float32


@pytest.mark.parametrize("fmt", FORMATS)
def test_chunked_predict_equals_unchunked(capsys, tmp_path, frame, fmt):
    path = table_file(tmp_path, frame, fmt)
    model = tmp_path / "m.npz"
    assert run(capsys, "train", path, "-o", model, "--standardize")[0] == 0
    for extra in ([], ["--proba"]):
        code, whole, err = run(capsys, "predict", model, path, *extra)
        assert code == 0, err
        for rows in ("7", "600", "10000"):
            code, out, err = run(capsys, "predict", model, path, *extra, "--chunksize", rows)
            assert code == 0, err
            assert out == whole, (extra, rows)
        code, out, err = run(capsys, "predict", model, path, *extra, "--chunksize", "64",
                             "-o", tmp_path / "p.csv")
        assert code == 0 and out == "" and "600 " in err
        assert (tmp_path / "p.csv").read_text() == whole
    header = whole.splitlines()[0]
    assert header == ",".join(SPECIES)
    P = np.loadtxt(tmp_path / "p.csv", delimiter=",", skiprows=1)
    np.testing.assert_allclose(P.sum(axis=1), 1, rtol=1e-12)


def test_classes_option(capsys, tmp_path, frame):
    path = table_file(tmp_path, frame, "csv")
    # A class that never occurs is kept: the model knows it, predicts it nowhere.
    code, out, err = run(capsys, "train", path, "-o", tmp_path / "m.npz", "--chunksize", "100",
                         "--classes", "virginica,setosa,versicolor,unseen")
    assert code == 0, err
    model = SoftmaxRegression.load(tmp_path / "m.npz")
    assert model.classes_.tolist() == sorted([*SPECIES, "unseen"])
    # A label outside --classes: the line and column are named, nothing is written.
    code, out, err = run(capsys, "train", path, "-o", tmp_path / "n.npz", "--chunksize", "100",
                         "--classes", "setosa,versicolor")
    assert code == 1
    first = 2 + int(np.flatnonzero(frame["species"] == "virginica")[0])
    assert_one_line_error(err, "d.csv", f"line {first}", "column 'species'", "'virginica'",
                          "not one of the classes ['setosa', 'versicolor']")
    assert not (tmp_path / "n.npz").exists()
    # With --standardize the first pass runs anyway and checks the labels first.
    code, out, err = run(capsys, "train", path, "-o", tmp_path / "n.npz", "--chunksize", "100",
                         "--classes", "setosa,versicolor", "--standardize")
    assert_one_line_error(err, "label 'virginica'", "not one of --classes")
    # Integer labels: --classes is read as integers too.
    numbers = frame.assign(species=pd.Categorical(frame["species"]).codes)
    numbers.to_csv(tmp_path / "n.csv", index=False)
    code, out, err = run(capsys, "train", tmp_path / "n.csv", "-o", tmp_path / "n.npz",
                         "--chunksize", "100", "--classes", "0, 1, 2")
    assert code == 0, err
    assert SoftmaxRegression.load(tmp_path / "n.npz").classes_.tolist() == [0, 1, 2]
    for bad in ("setosa", "a,,b"):
        code, out, err = run(capsys, "train", path, "-o", tmp_path / "n.npz", "--chunksize",
                             "100", "--classes", bad)
        assert_one_line_error(err, "--classes", "comma-separated")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.csv", "m.npz", "n.csv", "n.npz"]


def test_balanced_class_weight_counts_the_whole_file(capsys, tmp_path, frame):
    skewed = pd.concat([frame, frame[frame["species"] == "setosa"]] * 2, ignore_index=True)
    path = table_file(tmp_path, skewed, "csv")
    code, out, err = run(capsys, "train", path, "-o", tmp_path / "m.npz", "--chunksize", "100",
                         "--class-weight", "balanced")
    assert code == 0, err
    counts = skewed["species"].value_counts()
    expected = {c: len(skewed) / (3 * counts[c]) for c in SPECIES}
    weights = SoftmaxRegression.load(tmp_path / "m.npz").class_weight
    assert weights.keys() == expected.keys()
    assert all(weights[c] == pytest.approx(expected[c]) for c in SPECIES)


def test_progress_bar_of_a_streamed_pass(capsys, tmp_path, frame):
    for fmt, unit in (("csv", "B/s"), ("parquet", "rows/s")):
        path = table_file(tmp_path, frame, fmt)
        args = ["train", path, "-o", tmp_path / "m.npz", "--chunksize", "200", "--epochs", "2"]
        code, out, err = run(capsys, *args, "--progress", "--standardize")
        assert code == 0, err
        for part in ("pass 1: classes", "epoch 1/2", "epoch 2/2", "loss=", unit, "100%"):
            assert part in err, (part, err)
        code, out, err = run(capsys, *args)  # stderr is not a terminal: no bar
        assert code == 0 and err == ""


def test_chunked_errors(capsys, tmp_path, frame):
    np.savez(tmp_path / "d.npz", X=frame[["a", "b", "c"]].to_numpy(), y=np.arange(600) % 3)
    code, out, err = run(capsys, "train", tmp_path / "d.npz", "-o", tmp_path / "m.npz",
                         "--chunksize", "10")
    assert_one_line_error(err, "--chunksize reads CSV, Parquet and Feather", "d.npz is npz")
    assert run(capsys, "train", tmp_path / "d.npz", "-o", tmp_path / "m.npz")[0] == 0
    code, out, err = run(capsys, "predict", tmp_path / "m.npz", tmp_path / "d.npz",
                         "--chunksize", "10")
    assert_one_line_error(err, "--chunksize reads CSV, Parquet and Feather", "d.npz is npz")
    one = frame.assign(species="setosa")
    code, out, err = run(capsys, "train", table_file(tmp_path, one, "csv"), "-o",
                         tmp_path / "n.npz", "--chunksize", "10")
    assert_one_line_error(err, "needs at least 2 classes, found ['setosa']")
    assert not (tmp_path / "n.npz").exists()


@pytest.mark.parametrize("argv, needle", [
    (["--epochs", "2"], "--epochs applies to --chunksize training only"),
    (["--classes", "a,b"], "--classes applies to --chunksize training only"),
    (["--chunksize", "10", "--solver", "lbfgs"], "--chunksize trains with sgd"),
    (["--chunksize", "10", "--test-size", "0.2"], "--test-size cannot be used"),
    (["--chunksize", "10", "--early-stopping"], "--early-stopping cannot be used"),
    (["--chunksize", "0"], "argument --chunksize: '0' is not a whole number >= 1"),
    (["--chunksize", "10", "--epochs", "x"], "argument --epochs"),
])
def test_option_combinations_are_usage_errors(capsys, argv, needle):
    with pytest.raises(SystemExit) as info:
        cli.main(["train", "x.csv", "-o", "m.npz", *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "usage: fastsoftmax train" in err and needle in err, err


def test_option_defaults_are_the_estimators():
    train = next(a for a in cli.build_parser()._actions
                 if a.dest == "command").choices["train"]
    defaults = SoftmaxRegression().get_params()
    options = {a.dest: a for a in train._actions}
    for param in cli._common.PARAM_OPTIONS:
        if param == "solver":
            assert f"default: {defaults['solver']}" in options[param].help
        else:
            assert options[param].default == defaults[param], param


def test_adaptive_step_over_a_stream(capsys, tmp_path, frame, monkeypatch):
    """partial_fit keeps its step; the command divides eta0 by 5 when chunks stop improving."""
    path = table_file(tmp_path, frame, "csv")
    etas = []
    original = SoftmaxModel.partial_fit

    def spy(self, X, y, classes=None, sample_weight=None):
        etas.append(self.eta0)
        return original(self, X, y, classes=classes, sample_weight=sample_weight)

    monkeypatch.setattr(SoftmaxModel, "partial_fit", spy)
    args = ["train", path, "-o", tmp_path / "m.npz", "--chunksize", "20", "--epochs", "3",
            "--standardize", "--random-state", "0", "--eta0", "0.5"]
    code, out, err = run(capsys, *args)
    assert code == 0, err
    cuts = int(re.search(r"step divided by 5 (\d+) times \(adaptive\)", out).group(1))
    assert cuts >= 1 and len(etas) == 90
    assert etas[0] == 0.5 and sorted(set(etas), reverse=True) == pytest.approx(
        [0.5 / 5**i for i in range(cuts + 1)])
    assert etas == sorted(etas, reverse=True)  # only ever divided
    assert SoftmaxRegression.load(tmp_path / "m.npz").eta0 == 0.5  # the option, as given
    etas.clear()
    code, out, err = run(capsys, *args, "--learning-rate", "constant")
    assert code == 0 and "divided" not in out and set(etas) == {0.5}


# ------------------------------------------------------------ sparse files
def _no_densifying(monkeypatch):
    """Make every CSR/CSC densification fail, so that a sparse path that densifies shows."""
    def refuse(self, *args, **kwargs):
        raise AssertionError("a sparse matrix was densified")

    for cls in (scipy.sparse.csr_matrix, scipy.sparse.csc_matrix):
        monkeypatch.setattr(cls, "toarray", refuse)
        monkeypatch.setattr(cls, "todense", refuse)


def _read_proba(text):
    lines = text.strip().splitlines()
    return np.array([[float(v) for v in line.split(",")] for line in lines[1:]])


def test_svmlight_stays_sparse_and_predicts_as_dense_csv(capsys, tmp_path, monkeypatch):
    X, codes = sparse_species()
    svm = write_svmlight(tmp_path / "d.svm", X, codes)
    dense = write_csv(tmp_path / "d.csv", X)
    model = tmp_path / "m.npz"
    seen = []
    for method in ("fit", "predict", "predict_proba"):
        original = getattr(SoftmaxModel, method)

        def record(self, X, *args, _original=original, _name=method, **kwargs):
            seen.append((_name, type(X)))
            return _original(self, X, *args, **kwargs)

        monkeypatch.setattr(SoftmaxModel, method, record)
    _no_densifying(monkeypatch)
    code, out, err = run(capsys, "train", svm, "-o", model, "--n-features", X.shape[1],
                         "--test-size", "0.25", "--random-state", "0")
    assert code == 0, err
    assert f"on 180 rows x {X.shape[1]} features, sparse, nnz=" in out
    assert "test accuracy" in out
    code, sparse_out, err = run(capsys, "predict", model, svm, "--proba")
    assert code == 0, err
    assert seen and all(issubclass(t, scipy.sparse.csr_matrix) for _, t in seen), seen
    assert {name for name, _ in seen} == {"fit", "predict", "predict_proba"}
    monkeypatch.undo()
    code, dense_out, err = run(capsys, "predict", model, dense, "--proba")
    assert code == 0, err
    assert sparse_out.splitlines()[0] == dense_out.splitlines()[0] == "0,1,2"
    np.testing.assert_allclose(_read_proba(sparse_out), _read_proba(dense_out),
                               rtol=0, atol=1e-12)
    labels = [run(capsys, "predict", model, path)[1] for path in (svm, dense)]
    assert labels[0] == labels[1]


def test_wide_svmlight_trains_without_densifying(capsys, tmp_path, monkeypatch):
    # 200 x 2,000,000 would be 3.2 GB dense; its 2,000 entries are what is held.
    n, rows = 2_000_000, 200
    rng = np.random.default_rng(0)
    path = tmp_path / "wide.svm"
    with open(path, "w") as fh:
        for i in range(rows):
            columns = np.sort(rng.choice(n - 1000, size=10, replace=False)) + 1
            columns[0] = 1 + i % 3  # one column that says the class
            fh.write(f"{i % 3} " + " ".join(f"{c}:{rng.random() + 0.5:.3f}"
                                            for c in np.unique(columns)) + "\n")
    _no_densifying(monkeypatch)
    model = tmp_path / "m.npz"
    code, out, err = run(capsys, "train", path, "-o", model, "--n-features", n,
                         "--max-iter", "5")
    assert code == 0, err
    assert f"x {n} features, sparse, nnz=" in out
    assert SoftmaxRegression.load(model).n_features_in_ == n
    code, out, err = run(capsys, "predict", model, path)
    assert code == 0, err
    assert len(out.splitlines()) == rows + 1


def test_standardize_sparse_scales_without_centring(capsys, tmp_path):
    X, codes = sparse_species()
    svm = write_svmlight(tmp_path / "d.svm", X, codes)
    model = tmp_path / "m.npz"
    code, out, err = run(capsys, "train", svm, "-o", model, "--standardize",
                         "--n-features", X.shape[1])
    assert code == 0, err
    assert "not centred" in out
    with np.load(model) as z:
        mean, scale = z["scaler_mean"], z["scaler_scale"]
    expected = X.std(axis=0)
    expected[expected == 0] = 1.0  # the two empty columns
    np.testing.assert_array_equal(mean, 0.0)
    np.testing.assert_allclose(scale, expected, rtol=1e-13)
    code, out, err = run(capsys, "predict", model, svm, "--proba")
    assert code == 0, err
    fitted = SoftmaxRegression.load(model)
    np.testing.assert_allclose(_read_proba(out), fitted.predict_proba(X / scale),
                               rtol=0, atol=1e-12)
