"""The estimator's parameters (fastsoftmax._params.check_params): a bad value
is rejected by fit with an error naming the parameter."""

import pytest
from _helpers import toy_data

from fastsoftmax import SoftmaxRegression


@pytest.mark.parametrize(
    "params, message",
    [
        (dict(solver="adam"), "solver must be one of"),
        (dict(alpha=-1), "alpha must be >= 0"),
        (dict(eta0=0), "eta0 must be > 0"),
        (dict(momentum=1.0), "momentum must be < 1"),
        (dict(batch_size=0), "batch_size must be >= 1"),
        (dict(learning_rate="optimal"), "learning_rate must be one of"),
        (dict(validation_fraction=1.5), "validation_fraction must be < 1"),
        (dict(class_weight="auto"), "class_weight must be"),
        (dict(n_threads=0), "n_threads must be between"),
    ],
)
def test_bad_parameters_are_named(params, message):
    X, y = toy_data()
    with pytest.raises(ValueError, match=message):
        SoftmaxRegression(**params).fit(X, y)
