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
