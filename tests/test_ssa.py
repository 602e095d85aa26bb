"""Numba's SSA reconstruction on the blocks naming each variable (``fastsoftmax._kernels._ssa``).

The change must leave the IR exactly as Numba's own reconstruction makes it:
the same statements, the same fresh names in the same order, the same phi
nodes. Checked on the IR of every kernel and helper of the package as
written, and on the largest one once its helpers are inlined (the float32
rows chunk, compiled up to that pass in a process of its own).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import fresh_process_env
from numba.core import ir, ssa
from numba.core.compiler import run_frontend
from numba.core.registry import CPUDispatcher

from fastsoftmax import _kernels
from fastsoftmax._kernels import _ssa

KERNEL_DIR = Path(_kernels.__file__).resolve().parent


def _dump(blocks):
    """Every statement of every block as text, and the scope's names in their order."""
    scope = next(iter(blocks.values())).scope
    return ([(label, [str(stmt) for stmt in block.body]) for label, block in blocks.items()],
            list(scope.localvars._con))


def _both(blocks):
    """Numba's reconstruction and this package's, each on its own copy of ``blocks``."""
    return _ssa._numba_run_ssa(copy.deepcopy(blocks)), _ssa._run_ssa(copy.deepcopy(blocks))


def _package_functions():
    """Every ``@njit`` function of the kernel modules, by qualified name."""
    found = {}
    for path in sorted(KERNEL_DIR.glob("_*.py")):
        module = __import__(f"fastsoftmax._kernels.{path.stem}", fromlist=["_"])
        for name, obj in vars(module).items():
            if isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == module.__name__:
                found[f"{path.stem}.{name}"] = obj.py_func
    return found


FUNCTIONS = _package_functions()


def test_installed_with_this_numba():
    # The Numba the package is tested with has what _ssa calls; should a new
    # one not, this fails here rather than the kernels compiling more slowly.
    assert _ssa._numba_as_expected()
    assert _ssa.installed()
    assert ssa._run_ssa is _ssa._run_ssa


def test_every_kernel_and_helper_as_written_gets_numbas_ssa():
    assert len(FUNCTIONS) > 100
    renamed = 0
    for name, func in FUNCTIONS.items():
        blocks = run_frontend(func).blocks
        assert _ssa._ours(blocks), name
        numba, ours = _both(blocks)
        assert _dump(ours) == _dump(numba), name
        renamed += _dump(numba)[0] != _dump(blocks)[0]
    assert renamed > 50  # most of them had variables to rename


def test_new_blocks_as_numba_makes_them():
    blocks = run_frontend(FUNCTIONS["_common._exp_loop"]).blocks
    before = _dump(blocks)
    out = _ssa._run_ssa(blocks)
    assert out is not blocks and list(out) == list(blocks)
    assert all(out[label] is not blocks[label] for label in blocks)
    assert _dump(out) != before  # it had something to rename


def test_a_function_without_anything_to_rename_comes_back_as_it_is():
    def one_assignment(a):
        return a + 1

    blocks = run_frontend(one_assignment).blocks
    # Not this package's code: handed to Numba's own reconstruction.
    assert not _ssa._ours(blocks)
    ours = _moved(blocks, KERNEL_DIR / "_common.py")
    assert _ssa._ours(ours)
    assert _ssa._run_ssa(ours) is ours


def _moved(blocks, filename):
    """``blocks`` as if from the source file ``filename``."""
    moved = {}
    for label, block in blocks.items():
        moved[label] = ir.Block(scope=block.scope, loc=ir.Loc(str(filename), block.loc.line))
        moved[label].body = list(block.body)
    return moved


@pytest.mark.parametrize("where", ["numba", "user"])
def test_other_code_gets_numbas_own_reconstruction(monkeypatch, where):
    def accumulate(a):
        s = 0.0
        for x in a:
            s += x
        return s

    blocks = run_frontend(accumulate).blocks
    if where == "numba":
        blocks = _moved(blocks, ssa.__file__)
    calls = []
    monkeypatch.setattr(_ssa, "_numba_run_ssa", lambda b: calls.append(b) or b)
    assert _ssa._run_ssa(blocks) is blocks
    assert calls == [blocks]


# The float32 rows chunk (the largest kernel once its helpers are inlined),
# compiled on an empty cache up to its SSA reconstruction, which runs both
# ways; the compile stops there.
INLINED = r"""
import copy, inspect, json
import numpy as np
from numba.core import ssa
import fastsoftmax as fs
from fastsoftmax._kernels import _fused, _ssa


class Stop(BaseException):
    pass


def dump(blocks):
    scope = next(iter(blocks.values())).scope
    return ([(label, [str(s) for s in b.body]) for label, b in blocks.items()],
            list(scope.localvars._con))


source, start = inspect.getsourcelines(_fused._rows_chunk.py_func)
lines = range(start, start + len(source))
filename = _fused._rows_chunk.py_func.__code__.co_filename
seen = []


def checking(blocks):
    if not blocks or not _ssa._ours(blocks):
        return _ssa._numba_run_ssa(blocks)
    numba = dump(_ssa._numba_run_ssa(copy.deepcopy(blocks)))
    ours = dump(_ssa._run_ssa(copy.deepcopy(blocks)))
    first = next(iter(blocks.values())).loc
    chunk = first.filename == filename and first.line in lines
    phis = sum(s.count("phi(") for _, body in numba[0] for s in body)
    seen.append({"chunk": chunk, "same": numba == ours, "phis": phis,
                 "statements": sum(len(b.body) for b in blocks.values())})
    if chunk:
        raise Stop
    return _ssa._run_ssa(blocks)


ssa._run_ssa = checking
rng = np.random.default_rng(0)
X = rng.standard_normal((300, 40)).astype(np.float32)
try:
    fs.loss_and_grad(X, np.arange(300) % 3, np.zeros((40, 3), np.float32),
                     np.zeros(3, np.float32))
except Stop:
    pass
print(json.dumps(seen))
"""


@pytest.mark.slow
def test_the_inlined_rows_chunk_gets_numbas_ssa(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    env = fresh_process_env(NUMBA_CACHE_DIR=str(cache), FASTSOFTMAX_STRATEGY="rows")
    proc = subprocess.run([sys.executable, "-c", INLINED],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen and all(s["same"] for s in seen), seen
    chunk = [s for s in seen if s["chunk"]]
    assert len(chunk) == 1, seen
    # Its helpers inlined: thousands of statements, hundreds of phi nodes.
    assert chunk[0]["statements"] > 3000 and chunk[0]["phis"] > 100, chunk

