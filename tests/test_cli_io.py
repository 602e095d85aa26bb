"""The command line's readers: CSV (pandas' C parser, gzip, string labels), Parquet and
Feather, sparse files (svmlight, scipy.sparse .npz), and a one-line error naming the line
and column for every kind of bad input."""

from __future__ import annotations

import gzip
import sys

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
    write_svmlight,
)

from fastsoftmax import SoftmaxRegression
from fastsoftmax.cli import _common, _io, _sparse_io, _tables


@pytest.fixture(scope="module")
def frame():
    """Features a, b, c and the string label 'species' (last), rows shuffled."""
    X, codes = three_species(shuffle=True)
    return pd.DataFrame({"a": X[:, 0], "b": X[:, 1], "c": X[:, 2], "species": SPECIES[codes]})


@pytest.fixture(params=["pyarrow", "pandas"])
def csv_engine(request, monkeypatch):
    """Each CSV test with both parsers: pyarrow's (where installed) and pandas'."""
    if request.param == "pyarrow":
        pytest.importorskip("pyarrow")
        monkeypatch.setattr(_tables, "_ARROW", None)  # found again on first use
    else:
        monkeypatch.setattr(_tables, "_ARROW", False)
    return request.param


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def coefficients(path):
    model = SoftmaxRegression.load(path)
    return model.classes_.tolist(), model.coef_


# --------------------------------------------------------------------- CSV
def test_csv_gzip_and_string_labels(capsys, tmp_path, frame, csv_engine):
    plain, packed = tmp_path / "d.csv", tmp_path / "d.csv.gz"
    frame.to_csv(plain, index=False)
    frame.to_csv(packed, index=False)  # gzip, by the extension
    assert packed.read_bytes()[:2] == b"\x1f\x8b"
    for path in (plain, packed):
        code, out, err = run(capsys, "train", path, "-o", tmp_path / f"{path.name}.npz")
        assert code == 0, err
        assert "x 3 features, 3 classes" in out
    classes, coef = coefficients(tmp_path / "d.csv.npz")
    assert classes == SPECIES.tolist()
    np.testing.assert_array_equal(coef, coefficients(tmp_path / "d.csv.gz.npz")[1])
    # A gzip file without the extension is recognised by its content.
    anonymous = write(tmp_path, "data", packed.read_bytes())
    code, out, err = run(capsys, "predict", tmp_path / "d.csv.npz", anonymous)
    assert code == 0, err
    assert out.splitlines()[0] == "species" and len(out.splitlines()) == len(frame) + 1


def test_csv_values_parsed_exactly_and_labels_typed(tmp_path, csv_engine):
    rng = np.random.default_rng(1)
    values = rng.standard_normal(500) * 10.0 ** rng.integers(-30, 30, 500)
    text = "x,y\n" + "".join(f" {float(v)!r} ,{i % 3}\n" for i, v in enumerate(values))
    table = _io.read(str(write(tmp_path, "d.csv", text)), "auto", need_target=True)
    np.testing.assert_array_equal(table.X[:, 0], values)  # as Python's float() reads them
    assert table.y.dtype == np.int64 and table.y.tolist() == [i % 3 for i in range(500)]
    # A byte-order mark (Excel writes one) is not part of the first name.
    table = _io.read(str(write(tmp_path, "bom.csv", "\ufeffx,y\n1,a\n2,b\n")), "auto",
                     need_target=True)
    assert table.feature_names == ["x"] and table.X.tolist() == [[1.0], [2.0]]
    # Labels that are not all integers stay the text they are.
    table = _io.read(str(write(tmp_path, "e.csv", "x,y\n1,1.0\n2,2\n3, NA \n")), "auto",
                     need_target=True)
    assert table.y.tolist() == ["1.0", "2", "NA"]


def test_csv_read_in_blocks_grows_its_buffer(tmp_path, monkeypatch, csv_engine):
    # Short rows first: the estimate from the first block falls short and
    # the buffer must grow (several times, with blocks of 7 rows).
    short = [f"{i},{i % 2}" for i in range(100)]
    long = [f"{i}.{'1' * 40},{i % 2}" for i in range(100, 400)]
    path = write(tmp_path, "d.csv", "x,y\n" + "\n".join(short + long) + "\n")
    monkeypatch.setattr(_tables, "block_rows", lambda n: 7)
    source = _io.open_source(str(path), "csv")
    X, y = _io.read_rows(source, ["x"], "y", np.float64)
    expected = pd.read_csv(path)
    np.testing.assert_array_equal(X[:, 0], expected["x"].to_numpy())
    assert X.flags.c_contiguous and y.tolist() == expected["y"].astype(str).tolist()


BAD_CSV = [
    ("not a number", "a,b,y\n1,2,x\n3,oops,y\n", ["line 3", "column 'b'", "'oops'",
                                                  "is not a number"]),
    ("empty field", "a,b,y\n1,2,x\n3,,y\n", ["line 3", "column 'b'", "''", "not a number"]),
    ("NaN", "a,b,y\n1,2,x\n3,nan,y\n", ["line 3", "'b'", "'nan'", "not a finite number"]),
    ("overflow", "a,b,y\n1,2,x\n3,1e999,y\n", ["line 3", "'1e999'", "not a finite number"]),
    ("true/false", "a,b,y\n1,True,x\n3,False,y\n", ["line 2", "'b'", "'True'"]),
    ("short row", "a,b,y\n1,2,x\n3,4\n", ["line 3 has 2 fields, the header has 3"]),
    ("short row, feature", "a,b,y\n1,2,x\n3\n", ["line 3 has 1 fields"]),
    ("long row", "a,b,y\n1,2,x\n3,4,y,5\n", ["line 3 has 4 fields, the header has 3"]),
    ("empty target", "a,b,y\n1,2,x\n3,4, \n", ["line 3", "empty target 'y'"]),
    ("blank lines and quoted newlines count", 'a,b,y\n\n1,2,"x\ny"\n\n3,oops,z\n',
     ["line 6", "'oops'"]),
    ("empty file", "", ["empty file", "header"]),
    ("blank file", "\n\n  \n", ["empty file"]),
    ("header only", "a,b,y\n", ["no data rows"]),
    ("one column", "y\nx\nz\n", ["at least one feature column"]),
    ("duplicate names", "a,a,y\n1,2,x\n", ["duplicate column names ['a']"]),
    ("not UTF-8", b"a,b,y\n1,\xff,x\n", ["not a UTF-8 text CSV file"]),
]


@pytest.mark.parametrize("text, needles", [case[1:] for case in BAD_CSV],
                         ids=[case[0] for case in BAD_CSV])
def test_bad_csv_is_one_line_naming_line_and_column(capsys, tmp_path, text, needles, csv_engine):
    path = write(tmp_path, "bad.csv", text)
    for extra in ([], ["--chunksize", "1"]):  # read whole, and streamed
        code, out, err = run(capsys, "train", path, "-o", tmp_path / "m.npz", *extra)
        assert code == 1, (extra, err)
        assert_one_line_error(err, "bad.csv", *needles)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv"]  # nothing written


def test_bad_row_far_into_the_file(capsys, tmp_path, frame, csv_engine):
    """The line is counted from the file's start, in a later block or chunk as in the first."""
    lines = frame.to_csv(index=False).splitlines()
    lines[201] = lines[201].replace(",", ",,", 1)  # data row 201 at line 202: a field too many
    path = write(tmp_path, "bad.csv", "\n".join(lines) + "\n")
    for extra in ([], ["--chunksize", "16"], ["--chunksize", "16", "--classes",
                                              ",".join(SPECIES)]):
        code, _, err = run(capsys, "train", path, "-o", tmp_path / "m.npz", *extra)
        assert code == 1, err
        assert_one_line_error(err, "line 202 has 5 fields, the header has 4")
    code, _, err = run(capsys, "train", path, "--target", "nope", "-o", tmp_path / "m.npz")
    assert_one_line_error(err, "no column named 'nope' for --target", "a, b, c, species")
    packed = tmp_path / "cut.csv.gz"
    packed.write_bytes(gzip.compress(path.read_bytes())[:-40])
    code, _, err = run(capsys, "train", packed, "-o", tmp_path / "m.npz")
    assert code == 1
    assert_one_line_error(err, "cut.csv.gz", "not a readable gzip file")
    assert not (tmp_path / "m.npz").exists()


def test_predict_on_bad_csv_writes_nothing(capsys, tmp_path, frame, csv_engine):
    frame.to_csv(tmp_path / "d.csv", index=False)
    assert run(capsys, "train", tmp_path / "d.csv", "-o", tmp_path / "m.npz")[0] == 0
    lines = (tmp_path / "d.csv").read_text().splitlines()
    lines[150] = lines[150].replace(",", ",x", 1)
    bad = write(tmp_path, "bad.csv", "\n".join(lines) + "\n")
    old = write(tmp_path, "old.csv", "an older file\n")
    for extra in ([], ["--chunksize", "10"], ["--proba", "--chunksize", "100"]):
        for target in ("p.csv", "old.csv"):
            code, out, err = run(capsys, "predict", tmp_path / "m.npz", bad,
                                 "-o", tmp_path / target, *extra)
            assert code == 1 and out == ""
            assert_one_line_error(err, "bad.csv", "line 151", "column 'b'", "is not a number")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv", "d.csv", "m.npz",
                                                          "old.csv"]
    assert old.read_text() == "an older file\n"


def test_what_pyarrow_refuses_is_read_by_the_other_readers(tmp_path, monkeypatch):
    """A line of spaces and a number written 1_000 are data to pandas and Python's
    float(): pyarrow's refusal hands them over (pandas in the first block, the csv
    module after it) and the rows come out as pandas alone reads them."""
    pytest.importorskip("pyarrow")
    monkeypatch.setattr(_tables, "ARROW_BLOCK_BYTES", 1024)
    rows = [f"{i},{(i * 7) % 11},{'ab'[i % 2]}" for i in range(600)]
    for where in (3, 450):  # in the first block, and far after it
        lines = list(rows)
        lines[where] = "1_000,2,a"
        lines.insert(where + 1, "   ")
        path = write(tmp_path, f"odd{where}.csv", "a,b,y\n" + "\n".join(lines) + "\n")
        monkeypatch.setattr(_tables, "_ARROW", None)
        got = _io.read(str(path), "auto", need_target=True)
        monkeypatch.setattr(_tables, "_ARROW", False)
        want = _io.read(str(path), "auto", need_target=True)
        np.testing.assert_array_equal(got.X, want.X)
        assert got.X[where, 0] == 1000.0 and got.X.shape == (600, 2)
        assert got.y.tolist() == want.y.tolist()
        for extra in (7, 100):  # streamed, with chunks ending before and after the odd rows
            monkeypatch.setattr(_tables, "_ARROW", None)
            source = _io.open_source(str(path), "csv")
            chunks = list(source.chunks(extra, ["a", "b"], "y"))
            np.testing.assert_array_equal(np.concatenate([c.X for c in chunks]), want.X)
            assert [c.start for c in chunks] == list(range(0, 600, extra))


# ------------------------------------------------------------ Parquet, Feather
def test_parquet_and_feather_round_trip(capsys, tmp_path, frame):
    pytest.importorskip("pyarrow")
    frame.to_csv(tmp_path / "d.csv", index=False)
    frame.to_parquet(tmp_path / "d.parquet")
    frame.to_feather(tmp_path / "d.feather")
    expected = None
    for name in ("d.csv", "d.parquet", "d.feather"):
        code, out, err = run(capsys, "train", tmp_path / name, "-o", tmp_path / f"{name}.npz",
                             "--standardize")
        assert code == 0, err
        classes, coef = coefficients(tmp_path / f"{name}.npz")
        assert classes == SPECIES.tolist()
        if expected is None:
            expected = coef
        np.testing.assert_array_equal(coef, expected)  # the same numbers, whatever the format
        with np.load(tmp_path / f"{name}.npz") as z:
            assert z["feature_names"].tolist() == ["a", "b", "c"]
            assert str(z["target_name"]) == "species"
    # Predict from Parquet with the columns in another order and no target column.
    frame[["c", "a", "b"]].to_parquet(tmp_path / "new.parquet")
    outputs = []
    for data in ("d.csv", "new.parquet", "d.feather"):
        code, out, err = run(capsys, "predict", tmp_path / "d.parquet.npz", tmp_path / data)
        assert code == 0, err
        outputs.append(out)
    assert outputs[0] == outputs[1] == outputs[2]
    assert np.mean(np.array(outputs[0].splitlines()[1:]) == frame["species"]) > 0.9


def test_parquet_errors_name_the_row_and_column(capsys, tmp_path, frame):
    pytest.importorskip("pyarrow")
    import pyarrow as pa
    import pyarrow.parquet as pq

    b = frame["b"].to_numpy().copy()
    b[17] = np.nan  # a NaN, not a null: pyarrow keeps it as it is
    pq.write_table(pa.table({"a": frame["a"], "b": b, "species": frame["species"]}),
                   tmp_path / "nan.parquet")
    cases = {
        "nan.parquet": (None, ["row 18", "column 'b'", "nan is not a finite number"]),
        "null.parquet": (frame.astype({"b": "Float64"}).assign(
            b=lambda f: f["b"].mask(f.index == 5)), ["row 6", "column 'b'", "missing value"]),
        "text.parquet": (frame.assign(b="x"), ["column 'b'", "not numbers"]),
        "label.parquet": (frame.assign(species=frame["species"].mask(frame.index == 9)),
                          ["row 10", "missing target 'species'"]),
    }
    for name, (table, needles) in cases.items():
        if table is not None:
            table.to_parquet(tmp_path / name)
        for extra in ([], ["--chunksize", "7"]):
            code, out, err = run(capsys, "train", tmp_path / name, "-o", tmp_path / "m.npz",
                                 *extra)
            assert code == 1, (name, err)
            assert_one_line_error(err, name, *needles)
    write(tmp_path, "junk.parquet", b"PAR1 and nothing else")
    code, out, err = run(capsys, "train", tmp_path / "junk.parquet", "-o", tmp_path / "m.npz")
    assert_one_line_error(err, "junk.parquet", "not a readable Parquet file")
    assert not (tmp_path / "m.npz").exists()


def test_missing_pyarrow_says_how_to_install(capsys, tmp_path, frame, monkeypatch):
    path = write(tmp_path, "d.parquet", b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now fails
    for argv in (["train", path, "-o", tmp_path / "m.npz"],
                 ["train", tmp_path / "d.feather", "--format", "feather", "-o",
                  tmp_path / "m.npz"]):
        write(tmp_path, "d.feather", b"ARROW1")
        code, out, err = run(capsys, *argv)
        assert code == 1
        assert_one_line_error(err, "needs pyarrow", "pip install fastsoftmax[parquet]")


# ------------------------------------------------------------ sparse files
def test_sparse_npz_round_trip(capsys, tmp_path):
    X, codes = sparse_species()
    Xs = scipy.sparse.csr_matrix(X)
    np.savez(tmp_path / "d.npz", data=Xs.data, indices=Xs.indices, indptr=Xs.indptr,
             shape=Xs.shape, format=Xs.format, y=codes)
    # Prediction files as scipy writes them, in two formats (converted to CSR once).
    scipy.sparse.save_npz(tmp_path / "p.npz", Xs[:50])
    scipy.sparse.save_npz(tmp_path / "c.npz", scipy.sparse.csc_matrix(Xs[:50]))
    table = _io.read(str(tmp_path / "d.npz"), "auto", need_target=True)
    assert scipy.sparse.isspmatrix_csr(table.X) and table.X.nnz == Xs.nnz
    assert table.y.tolist() == codes.tolist()
    model = tmp_path / "m.npz"
    code, out, err = run(capsys, "train", tmp_path / "d.npz", "-o", model)
    assert code == 0, err
    assert f"x {X.shape[1]} features, sparse, nnz={Xs.nnz}" in out
    expected = SoftmaxRegression.load(model).predict(X[:50]).tolist()
    for name in ("p.npz", "c.npz"):
        code, out, err = run(capsys, "predict", model, tmp_path / name)
        assert code == 0, err
        assert [int(v) for v in out.splitlines()[1:]] == expected
    # Labels missing for training, and a file that is neither dense nor sparse.
    code, out, err = run(capsys, "train", tmp_path / "p.npz", "-o", tmp_path / "n.npz")
    assert code == 1
    assert_one_line_error(err, "p.npz", "no array named 'y'", "np.savez(path, data=X.data")
    np.savez(tmp_path / "other.npz", values=np.zeros((3, 2)))
    code, out, err = run(capsys, "predict", model, tmp_path / "other.npz")
    assert code == 1
    assert_one_line_error(err, "other.npz", "neither a dense array named 'X' nor a "
                          "scipy.sparse matrix", "['values']")
    assert not (tmp_path / "n.npz").exists()


def test_n_features_for_trailing_empty_svmlight_columns(capsys, tmp_path):
    X, codes = sparse_species()  # its last two columns are empty: the file never says so
    path = write_svmlight(tmp_path / "d.svm", X, codes)
    table = _io.read(str(path), "auto", need_target=True)
    assert table.X.shape == (len(codes), X.shape[1] - 2) and table.zero_based is False
    model = tmp_path / "m.npz"
    code, out, err = run(capsys, "train", path, "-o", model, "--n-features", X.shape[1])
    assert code == 0, err
    assert SoftmaxRegression.load(model).n_features_in_ == X.shape[1]
    code, out, err = run(capsys, "predict", model, path)  # read as wide as the model
    assert code == 0, err
    code, out, err = run(capsys, "train", path, "-o", tmp_path / "n.npz", "--n-features", 2)
    assert code == 1
    assert_one_line_error(err, "d.svm", "--n-features 2 is less than the 3 features",
                          "largest feature index 3, one-based")
    zero = write_svmlight(tmp_path / "z.svm", X, codes, zero_based=True)
    code, out, err = run(capsys, "train", zero, "-o", tmp_path / "n.npz", "--n-features", 2)
    assert_one_line_error(err, "z.svm", "largest feature index 2, zero-based")
    code, out, err = run(capsys, "train", path, "-o", tmp_path / "n.npz",
                         "--n-features", 5, "--format", "csv")
    assert_one_line_error(err, "--n-features", "svmlight", "d.svm is csv")
    assert not (tmp_path / "n.npz").exists()


def test_sparse_predict_input_checked_by_row(capsys, tmp_path):
    X, codes = sparse_species()
    model = tmp_path / "m.npz"
    path = write_svmlight(tmp_path / "d.svm", X, codes)
    assert run(capsys, "train", path, "-o", model, "--n-features", X.shape[1])[0] == 0
    bad = write(tmp_path, "bad.svm", "0 1:1.5\n1 2:2.5\n0 1:0.5 3:nan\n1 2:1\n")
    code, out, err = run(capsys, "predict", model, bad)
    assert code == 1 and out == ""
    assert_one_line_error(err, "bad.svm", "row 3 has a NaN or infinite feature")
    wide = write(tmp_path, "wide.svm", f"0 1:1.5 {X.shape[1] + 1}:2\n")
    code, out, err = run(capsys, "predict", model, wide)
    assert_one_line_error(err, "wide.svm", f"{X.shape[1] + 1} features, but the model",
                          f"was trained on {X.shape[1]}")
    code, out, err = run(capsys, "train", bad, "-o", tmp_path / "n.npz")
    assert_one_line_error(err, "bad.svm", "row 3 has a NaN or infinite feature")
    code, out, err = run(capsys, "train", path, "-o", tmp_path / "n.npz", "--chunksize", 10)
    assert_one_line_error(err, "--chunksize reads CSV, Parquet and Feather", "is svmlight")
    assert not (tmp_path / "n.npz").exists()


def test_centring_model_predicts_svmlight(capsys, tmp_path):
    # A model whose scaler centres (trained on a table) still predicts a
    # sparse file, which it must then densify, exactly as the table.
    X, codes = sparse_species()
    table = tmp_path / "d.csv"
    pd.DataFrame(np.column_stack([X, codes])).to_csv(table, index=False)
    model = tmp_path / "m.npz"
    assert run(capsys, "train", table, "-o", model, "--standardize")[0] == 0
    with np.load(model) as z:
        assert z["scaler_mean"].any()
    write_svmlight(tmp_path / "d.svm", X, codes)
    outputs = [run(capsys, "predict", model, tmp_path / name, "--proba")
               for name in ("d.svm", "d.csv")]
    assert outputs[0][0] == outputs[1][0] == 0
    assert outputs[0][1].splitlines()[1:] == outputs[1][1].splitlines()[1:]


def test_sparse_scaler_matches_numpy():
    rng = np.random.default_rng(2)
    X = np.where(rng.random((300, 6)) < 0.3, 1e6 + rng.standard_normal((300, 6)), 0.0)
    X[:, 4] = 0.0  # empty
    X[:, 5] = 0.25  # constant, every entry stored
    mean, scale = _sparse_io.sparse_scaler(scipy.sparse.csr_matrix(X))
    expected = X.std(axis=0)
    expected[4:] = 1.0
    np.testing.assert_array_equal(mean, 0.0)
    np.testing.assert_allclose(scale, expected, rtol=1e-12)
    scaled = _sparse_io.scale_rows(scipy.sparse.csr_matrix(X), scale)
    np.testing.assert_array_equal(scaled.toarray(), X / scale)


def test_format_detection():
    detect = _io.detect_format
    assert [detect(p, "auto") for p in ("a.CSV", "a.csv.gz", "a.parquet", "a.pq", "a.feather",
                                         "a.arrow", "a.npz", "a.libsvm.gz")] == [
        "csv", "csv", "parquet", "parquet", "feather", "feather", "npz", "svmlight"]
    assert detect("a.csv", "parquet") == "parquet"


def test_moments_match_numpy_and_resist_cancellation():
    rng = np.random.default_rng(0)
    X = 1e8 + rng.standard_normal((1000, 4)) * [1e-3, 1.0, 0.0, 1e3]
    moments = _common.Moments(4)
    for start, stop in ((0, 1), (1, 333), (333, 334), (334, 1000)):  # uneven blocks
        moments.add(X[start:stop])
    mean, scale = moments.scaler()
    np.testing.assert_allclose(mean, X.mean(axis=0), rtol=1e-14)
    expected = X.std(axis=0)  # two passes over all of X
    expected[2] = 1.0  # a constant column is only centred
    # Column 0 holds 1e8 + 1e-3 z: its values carry about 8 significant
    # digits of the spread, which is what is left.
    np.testing.assert_allclose(scale, expected, rtol=1e-6)
    np.testing.assert_allclose(_common.standardize(X)[1], expected, rtol=1e-6)
    # The textbook one-pass formula, E[x^2] - E[x]^2, loses column 0 entirely.
    naive = np.sqrt(np.maximum((X**2).mean(axis=0) - X.mean(axis=0) ** 2, 0))
    assert not np.allclose(naive[:2], expected[:2], rtol=0.1)


@pytest.mark.parametrize("writer", ["pyarrow", "numpy"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_probabilities_read_back_exactly(writer, dtype, monkeypatch):
    """Probabilities are written (pyarrow, or NumPy without it) so that every
    value reads back as the same number, in blocks of rows, after one header."""
    import io

    rng = np.random.default_rng(7)
    P = rng.dirichlet(np.ones(3), size=1000).astype(dtype)
    P[0] = [1.0, 0.0, 0.0]
    P[1, :2] = [np.finfo(dtype).tiny, np.finfo(dtype).eps]
    monkeypatch.setattr(_io, "_WRITE_ROWS", 300)  # four blocks
    if writer == "numpy":
        monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow fails
    fh = io.StringIO()
    _io.write_predictions(fh, P, classes=np.array(["a", "b", "c"]), name="label",
                          proba=True, header=True)
    lines = fh.getvalue().splitlines()
    assert lines[0] == "a,b,c" and len(lines) == 1001
    back = np.array([[dtype(v) for v in line.split(",")] for line in lines[1:]])
    np.testing.assert_array_equal(back, P)
