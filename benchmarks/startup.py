"""Target 8: first-call latency in a fresh process, cold and warm cache.

Copies the package to a temporary directory, makes it read-only, and runs
three fresh interpreters on it with NUMBA_CACHE_DIR unset and HOME pointing
at an empty temporary directory (so Numba falls back to its user-wide cache
under $HOME/.cache, as for a read-only install):

1. cold: empty cache -- every kernel used is compiled and written;
2. warm: the same cache -- every kernel must load from disk;
3. warm again.

Each reports the seconds for ``import fastsoftmax``, the first
``loss_and_grad`` (both strategies), the first ``fit`` (lbfgs and sgd), and
the number of kernels Numba compiled in the process (its cache misses).

    python benchmarks/startup.py
"""

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import fastsoftmax

CHILD = r"""
import json, time
t0 = time.perf_counter()
import numpy as np
import fastsoftmax as fs
t_import = time.perf_counter() - t0
rng = np.random.default_rng(0)
X = rng.standard_normal((2000, 784)).astype(np.float32)
y = rng.integers(0, 10, 2000)
t0 = time.perf_counter()
fs.loss_and_grad(X, y, np.zeros((784, 10), np.float32), np.zeros(10, np.float32))
fs.loss_and_grad(X[:, :20], y, np.zeros((20, 10), np.float32))
t_lg = time.perf_counter() - t0
t0 = time.perf_counter()
fs.SoftmaxRegression(max_iter=5).fit(X, y)
fs.SoftmaxRegression("sgd", max_iter=2).fit(X, y)
t_fit = time.perf_counter() - t0
from numba.core.registry import CPUDispatcher
from fastsoftmax._kernels import _checks, _fused, _predict, _rowwise, _sgd
misses = hits = 0
for mod in (_checks, _fused, _predict, _rowwise, _sgd):
    for obj in vars(mod).values():
        if isinstance(obj, CPUDispatcher):
            misses += sum(obj.stats.cache_misses.values())
            hits += sum(obj.stats.cache_hits.values())
print(json.dumps({"import": t_import, "loss_and_grad": t_lg, "fit": t_fit,
                  "misses": misses, "hits": hits, "file": fs.__file__}))
"""


def _drop_root():
    """Run the child as 'nobody' when we are root: root ignores permission
    bits, so a read-only package would still receive Numba's cache files."""
    import pwd

    nobody = pwd.getpwnam("nobody")
    os.setgid(nobody.pw_gid)
    os.setuid(nobody.pw_uid)


def run_child(pkg_parent, home):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CACHE")}
    env["HOME"] = str(home)
    env["PYTHONPATH"] = str(pkg_parent)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("XDG_CACHE_HOME", None)
    argv = [sys.executable, "-W", "ignore", "-c", CHILD]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # 'nobody' may not reach this interpreter (e.g. it lives under /root):
        # the child then fails, or its exec does (PermissionError here).
        # Measure as root then, where the package is read-only in name only.
        try:
            out = subprocess.run(argv, env=env, capture_output=True, text=True,
                                 cwd=str(home), preexec_fn=_drop_root)
        except PermissionError as exc:
            why = str(exc)
        else:
            if out.returncode == 0:
                return json.loads(out.stdout.strip().splitlines()[-1]) | {"user": "nobody"}
            why = str(out.stderr.strip().splitlines()[-1:])
        print(f"(as nobody: {why}; running as root)", file=sys.stderr)
    out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True,
                         cwd=str(home))
    return json.loads(out.stdout.strip().splitlines()[-1]) | {"user": "self"}


def main():
    src = Path(fastsoftmax.__file__).resolve().parent
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        pkg_parent = tmp / "site"
        home = tmp / "home"
        home.mkdir()
        # The children may run as another user (see _drop_root): they must
        # reach the package and own nothing but their HOME.
        tmp.chmod(0o755)
        home.chmod(0o777)
        shutil.copytree(src, pkg_parent / "fastsoftmax",
                        ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))
        for p in [pkg_parent, *pkg_parent.rglob("*")]:
            mode = p.stat().st_mode
            p.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        try:
            print("| run | import s | first loss_and_grad s | first fit s | total s | "
                  "kernels compiled | kernels loaded |\n|---|---:|---:|---:|---:|---:|---:|")
            for name in ("cold (empty cache)", "warm", "warm again"):
                r = run_child(pkg_parent, home)
                assert str(pkg_parent) in r["file"], r
                total = r["import"] + r["loss_and_grad"] + r["fit"]
                print(f"| {name} ({r['user']}) | {r['import']:.2f} | {r['loss_and_grad']:.2f} | "
                      f"{r['fit']:.2f} | {total:.2f} | {r['misses']} | {r['hits']} |",
                      flush=True)
            caches = [p for p in home.rglob("*.nbi")]
            print(f"\n{len(caches)} cache index files under $HOME "
                  f"({caches[0].parent.parent if caches else 'none'}); "
                  f"none in the read-only package: "
                  f"{not any((pkg_parent / 'fastsoftmax').rglob('*.nbi'))}")
        finally:
            for p in [pkg_parent, *pkg_parent.rglob("*")]:
                p.chmod(p.stat().st_mode | stat.S_IWUSR)


if __name__ == "__main__":
    main()
