"""What the command-line tests share: running the command in-process, checking its errors."""

from __future__ import annotations

import numpy as np

from fastsoftmax import cli

SPECIES = np.array(["setosa", "versicolor", "virginica"])


def run(capsys, *argv):
    """cli.main in-process: (exit status, stdout, stderr)."""
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(err, *needles):
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("fastsoftmax: error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], (needle, err)


def three_species(m=240, seed=0, shuffle=False):
    """(X, codes): three well separated classes, features on very different scales."""
    rng = np.random.default_rng(seed)
    codes = np.repeat([0, 1, 2], m // 3)
    centres = np.array([[0.0, 0.0, 0.0], [4.0, 0.0, 1.0], [0.0, 4.0, -1.0]])
    X = (centres[codes] + rng.normal(size=(len(codes), 3))) * [1.0, 10.0, 0.1] \
        + [0.0, 50.0, -3.0]
    if shuffle:
        order = rng.permutation(len(codes))
        X, codes = X[order], codes[order]
    return X, codes


def sparse_species(m=240, seed=0):
    """(X, codes): three_species with the small entries of each column made 0, two empty
    columns appended (a sparse-looking table whose last columns no row mentions)."""
    X, codes = three_species(m=m, seed=seed, shuffle=True)
    X = np.where(np.abs(X - X.mean(axis=0)) > 0.3 * X.std(axis=0), X, 0.0)
    return np.hstack([X, np.zeros((len(codes), 2))]), codes


def write_svmlight(path, X, y, zero_based=False):
    """svmlight text with every value as repr writes it (read back exactly, unlike
    scikit-learn's dump with 16 digits); zero entries are left out."""
    base = 0 if zero_based else 1
    with open(path, "w") as fh:
        for row, label in zip(X, y, strict=True):
            entries = " ".join(f"{j + base}:{float(v)!r}" for j in np.flatnonzero(row)
                               for v in [row[j]])
            fh.write(f"{label} {entries}\n")
    return path


def write_csv(path, X, names=None):
    """X as CSV under the header ``names`` (default f0, f1, ...), values as repr writes them."""
    names = names or [f"f{j}" for j in range(X.shape[1])]
    with open(path, "w") as fh:
        fh.write(",".join(names) + "\n")
        for row in X:
            fh.write(",".join(repr(float(v)) for v in row) + "\n")
    return path
