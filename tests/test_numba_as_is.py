"""``FASTSOFTMAX_NUMBA_AS_IS``: this package's adjustments to Numba's compiler, and the bits.

The five adjustments (``_kernels._inline``, ``_ssa``, ``_copies``,
``_wrappers``, ``_locks``) must leave the compiled kernels as Numba makes
them: kernels compiled with all of them and with none give the same bits,
and so does each loaded again from the cache by a later process. The
variable names those to leave as Numba has them; anything else in it is an
error naming it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from _helpers import fresh_process_env
from numba.core import inline_closurecall, ir_utils, ssa
from numba.core.dispatcher import Dispatcher

from fastsoftmax import _settings
from fastsoftmax._kernels import _copies, _inline, _locks, _ssa, _wrappers

MODULES = {"inline": _inline, "ssa": _ssa, "copies": _copies, "wrappers": _wrappers,
           "locks": _locks}


@pytest.mark.parametrize("value, names", [
    ("", set()), (" ", set()), ("inline", {"inline"}), ("SSA, wrappers", {"ssa", "wrappers"}),
    ("all", set(_settings.ADJUSTMENTS)), ("Locks", {"locks"}), ("copies ", {"copies"}),
    ("inline,all", set(_settings.ADJUSTMENTS)), ("ssa,", {"ssa"}),
])
def test_the_names_read(monkeypatch, value, names):
    monkeypatch.setenv("FASTSOFTMAX_NUMBA_AS_IS", value)
    assert _settings.left_to_numba() == names


@pytest.mark.parametrize("value, bad", [("numba", "'numba'"), ("ssa,inlne", "'inlne'"),
                                        ("off", "'off'"), ("shared", "'shared'")])
@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_bad_value_is_an_error_naming_it_before_anything_changes(monkeypatch, value, bad, name):
    monkeypatch.setenv("FASTSOFTMAX_NUMBA_AS_IS", value)
    before = (inline_closurecall.copy, ssa._run_ssa, ir_utils.copy_propagate, Dispatcher.compile)
    with pytest.raises(ValueError, match=f"FASTSOFTMAX_NUMBA_AS_IS='{value}': {bad} is not one"):
        MODULES[name].install()
    assert (inline_closurecall.copy, ssa._run_ssa, ir_utils.copy_propagate,
            Dispatcher.compile) == before


def test_the_command_line_names_a_bad_value_in_one_line():
    env = fresh_process_env(FASTSOFTMAX_NUMBA_AS_IS="inline,fast")
    proc = subprocess.run([sys.executable, "-m", "fastsoftmax", "info"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "fastsoftmax: error: FASTSOFTMAX_NUMBA_AS_IS='inline,fast': 'fast' is not one of "
        "inline, ssa, copies, wrappers, locks or all (the adjustments to Numba's compiler to leave "
        "as Numba has them)"]


@pytest.mark.parametrize("value, expected", [
    ("", [True] * 5), ("inline", [False, True, True, True, True]),
    ("ssa", [True, False, True, True, True]), ("copies", [True, True, False, True, True]),
    ("wrappers", [True, True, True, False, True]), ("locks", [True, True, True, True, False]),
    ("all", [False] * 5),
])
def test_each_named_adjustment_is_left_out(value, expected):
    code = ("import json; import fastsoftmax._kernels as k; "
            "print(json.dumps([k._inline.installed(), k._ssa.installed(), "
            "k._copies.installed(), k._wrappers.installed(), k._locks.installed(), "
            "k._wrappers.install_reader()]))")
    env = fresh_process_env(FASTSOFTMAX_NUMBA_AS_IS=value)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    *installed, reading = json.loads(out.stdout.strip().splitlines()[-1])
    assert installed == expected
    assert reading  # the kernels' own cache entries stay readable, whatever is left out


# The float32 softmax, log-softmax and logsumexp kernels (parallel loops
# inlining the row helpers of _common) and a fused loss and gradient,
# compiled afresh in a process of their own (or loaded from its cache);
# the digests of their results' bytes.
COMPILE_AND_RUN = r"""
import hashlib, json
import numpy as np
import fastsoftmax as fs
from fastsoftmax._kernels import _copies, _inline, _locks, _ssa, _wrappers
rng = np.random.default_rng(7)
out = {"installed": [_inline.installed(), _ssa.installed(), _copies.installed(),
                     _wrappers.installed(), _locks.installed()]}
Z = (4 * rng.standard_normal((203, 37))).astype("float32")
Z[5, 3] = -np.inf
X = rng.standard_normal((3000, 37)).astype("float32")
y = rng.integers(0, 4, 3000)
W = (0.1 * rng.standard_normal((37, 4))).astype("float32")
loss, gW, gb = fs.loss_and_grad(X, y, W, np.zeros(4, "float32"))
parts = [fs.softmax(Z), fs.log_softmax(Z), fs.logsumexp(Z), np.float64(loss), gW, gb]
out["bytes"] = [hashlib.sha256(np.ascontiguousarray(p).tobytes()).hexdigest() for p in parts]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_kernels_compiled_with_and_without_give_the_same_bits(tmp_path):
    results = {}
    for setting, loaded in (("", False), ("all", False), ("", True)):
        cache = tmp_path / f"cache-{setting or 'adjusted'}"
        if not loaded:
            cache.mkdir()
        env = fresh_process_env(NUMBA_CACHE_DIR=str(cache), FASTSOFTMAX_NUMBA_AS_IS=setting)
        proc = subprocess.run([sys.executable, "-c", COMPILE_AND_RUN], env=env,
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
        results[setting, loaded] = json.loads(proc.stdout.strip().splitlines()[-1])
        assert list(cache.rglob("*.nbi")), "the kernels were not compiled into the new cache"
    assert results["", False].pop("installed") == [True] * 5
    assert results["all", False].pop("installed") == [False] * 5
    assert results["", True].pop("installed") == [True] * 5
    assert results["", False] == results["all", False] == results["", True]
    assert len(results["", False]["bytes"]) == 6
