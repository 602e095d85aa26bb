"""Model files: a fitted SoftmaxRegression as an ``.npz`` of plain arrays.

No pickle anywhere: the constructor parameters are stored as JSON text,
the fitted attributes as numeric or string arrays, and :func:`load` checks
every array before it builds a model, so a foreign or edited file gives a
ValueError naming the problem. Callers may store extra arrays beside the
model in the same file (the command line keeps its scaler and column names
there); :func:`load` returns those it is asked for.

Format (version 1): ``format`` = "fastsoftmax-model", ``format_version``,
``params`` (JSON), ``coef`` (k, n), ``intercept`` (k,), ``classes`` (k,),
``n_iter``, ``loss_curve``, and ``feature_names_in`` when the model has
feature names.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

import numpy as np

FORMAT = "fastsoftmax-model"
FORMAT_VERSION = 1
_REQUIRED = ("format", "format_version", "params", "coef", "intercept", "classes", "n_iter",
             "loss_curve")
_PLAIN = (bool, int, float, str, type(None))


def one_line(text: str) -> str:
    """``text`` with every run of white space (newlines included) made one space."""
    return " ".join(text.split())


def _plain(name: str, value: Any) -> Any:
    """``value`` as a JSON-safe Python scalar, or a TypeError naming ``name``."""
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, _PLAIN):
        raise TypeError(
            f"{name}={value!r} cannot be stored in a model file (only None, bool, int, "
            "float and str values can)"
            + ("; set_params(random_state=<int or None>) before saving -- a NumPy "
               "Generator or RandomState is not a plain value"
               if name == "random_state" else "")
        )
    return value


def _encode_params(params: dict) -> dict:
    """Encode constructor parameters as JSON-safe values.

    ``class_weight`` dicts become a list of [label, weight] pairs: JSON
    object keys are always strings, and a pair keeps the label's type (int,
    float or str).
    """
    out = {}
    for name, value in params.items():
        if name == "class_weight" and isinstance(value, dict):
            out[name] = [[_plain("class_weight label", k), _plain("class_weight value", v)]
                         for k, v in value.items()]
        else:
            out[name] = _plain(name, value)
    return out


def _decode_params(params: dict, classes: np.ndarray) -> dict:
    """Inverse of :func:`_encode_params`; a ValueError for malformed values."""
    params = dict(params)
    cw = params.get("class_weight")
    if isinstance(cw, list):
        if not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], _PLAIN)
                   and p[0] is not None for p in cw):
            raise ValueError("class_weight must be a list of [label, weight] pairs")
        params["class_weight"] = {key: value for key, value in cw}
    elif isinstance(cw, dict):
        # Files written before the pairs encoding: JSON turned every label
        # into a string; map each back to the class it names.
        by_text = {str(c): c for c in classes.tolist()}
        params["class_weight"] = {by_text.get(key, key): value for key, value in cw.items()}
    return params


def model_arrays(model: Any) -> dict[str, np.ndarray]:
    """Return the arrays that represent a fitted ``model`` in a file.

    Raises TypeError, before anything is written, for class labels or
    parameters that have no plain-value form.
    """
    classes = model.classes_
    if classes.dtype.kind == "O":
        if not all(isinstance(c, str) for c in classes):
            raise TypeError("only numeric or string class labels can be saved")
        classes = classes.astype(str)
    arrays = {
        "format": np.array(FORMAT),
        "format_version": np.array(FORMAT_VERSION),
        "params": np.array(json.dumps(_encode_params(model.get_params()), allow_nan=True)),
        "coef": model.coef_,
        "intercept": model.intercept_,
        "classes": classes,
        "n_iter": np.array(model.n_iter_),
        "loss_curve": np.asarray(model.loss_curve_, dtype=np.float64),
    }
    if hasattr(model, "feature_names_in_"):
        arrays["feature_names_in"] = np.asarray(model.feature_names_in_, dtype=str)
    return arrays


def save(model: Any, path: str | os.PathLike, extras: dict[str, np.ndarray] | None = None,
         ) -> None:
    """Write ``model`` (and ``extras``, arrays whose names the model does not use) to ``path``."""
    arrays = model_arrays(model)
    extras = extras or {}
    clash = sorted(set(arrays) & set(extras))
    if clash:
        raise ValueError(f"extra arrays {clash} would overwrite the model's own")
    everything: dict[str, Any] = {**arrays, **extras}
    with open(path, "wb") as fh:
        np.savez(fh, **everything)


def load(cls: type, path: str | os.PathLike,
         extra_keys: Iterable[str] = ()) -> tuple[Any, dict[str, np.ndarray]]:
    """Read a model of class ``cls`` and the extra arrays named in ``extra_keys`` present."""
    try:
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except ValueError as exc:
        raise ValueError(f"{path}: not a fastsoftmax model file ({exc})") from None
    except Exception as exc:  # zipfile/OSError/EOF on truncated or foreign files
        raise ValueError(f"{path}: not a readable .npz model file ({exc})") from None
    extras = {key: arrays[key] for key in extra_keys if key in arrays}
    return _from_arrays(cls, arrays, path), extras


def _from_arrays(cls: type, arrays: dict[str, np.ndarray], path: Any) -> Any:
    def fail(why: str):
        raise ValueError(f"{path}: not a valid fastsoftmax model file: {why}")

    missing = [key for key in _REQUIRED if key not in arrays]
    if missing:
        fail(f"missing arrays {missing}")

    def scalar(key: str, kind: str) -> Any:
        # A 0-d array of the expected kind; anything else in a foreign or
        # edited file must not surface as a TypeError from int()/str().
        a = arrays[key]
        if a.shape != () or a.dtype.kind not in kind:
            fail(f"{key} must be a single {'integer' if kind == 'iu' else 'string'}, "
                 f"got dtype {a.dtype} and shape {a.shape}")
        return a.item()

    if scalar("format", "U") != FORMAT:
        fail(f"format is {str(arrays['format'])!r}, expected {FORMAT!r}")
    if scalar("format_version", "iu") != FORMAT_VERSION:
        fail(f"format_version {int(arrays['format_version'])} is not supported")
    n_iter = scalar("n_iter", "iu")
    params_text = scalar("params", "U")
    loss_curve = arrays["loss_curve"]
    if loss_curve.ndim != 1 or loss_curve.dtype.kind not in "iuf":
        fail(f"loss_curve must be a 1-D float array, got {loss_curve.dtype} {loss_curve.shape}")
    coef, intercept, classes = arrays["coef"], arrays["intercept"], arrays["classes"]
    if coef.ndim != 2 or coef.dtype not in (np.float32, np.float64):
        fail(f"coef must be a 2-D float array, got {coef.dtype} {coef.shape}")
    k, n = coef.shape
    if n == 0:
        fail("coef has 0 columns (features)")
    if intercept.shape != (k,) or intercept.dtype != coef.dtype:
        fail(f"intercept must have shape ({k},) and dtype {coef.dtype}")
    if classes.shape != (k,) or k < 2:
        fail(f"classes must have shape ({k},) with k >= 2, got {classes.shape}")
    if classes.dtype.kind not in "biufU":
        fail(f"classes must be numbers or strings, got dtype {classes.dtype}")
    if len(np.unique(classes)) != k or np.any(classes[1:] < classes[:-1]):
        fail("classes must be sorted and distinct")
    if not (np.all(np.isfinite(coef)) and np.all(np.isfinite(intercept))):
        fail("coef or intercept holds NaN or inf")
    from ._params import check_params

    try:
        params = json.loads(params_text)
        if not isinstance(params, dict):
            raise TypeError(f"a JSON object is needed, got {type(params).__name__}")
        model = cls(**_decode_params(params, classes))
        check_params(model)
    except (TypeError, ValueError) as exc:
        fail(f"bad params ({one_line(str(exc))})")
    model.coef_ = np.ascontiguousarray(coef)
    model.intercept_ = np.ascontiguousarray(intercept)
    model.classes_ = classes
    model.n_features_in_ = n
    if "feature_names_in" in arrays:
        names = arrays["feature_names_in"]
        if names.shape != (n,) or names.dtype.kind != "U":
            fail(f"feature_names_in must be strings of shape ({n},)")
        model.feature_names_in_ = names.astype(object)
    model.n_iter_ = int(n_iter)
    model.loss_curve_ = [float(v) for v in loss_curve]
    model.validation_loss_curve_ = []
    return model
