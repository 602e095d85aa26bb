"""Where a test run's time goes: Numba's compiles, per kernel and per test file.

    COMPILE_CENSUS_DIR=DIR PYTHONPATH=benchmarks python -m pytest -p compile_census \\
        -n auto --durations=0 ... > LOG
    python benchmarks/compile_census.py DIR [--durations LOG] [--top 25]

As a pytest plugin (``-p compile_census``, with ``benchmarks/`` on the
import path; xdist's workers load it too) it records every compile in the
test processes (Numba's ``numba:compile`` events) with the test that was
running, and writes one JSON file per process into ``$COMPILE_CENSUS_DIR``
at the end. A compile's seconds exclude those of the functions compiled
inside it (a kernel's helpers, typed on first use, are their own lines).
Processes the tests start are not seen: their time is the rest of the
test's.

Run as a script, it sums a folder of those files: the kernels by seconds
compiling (and how many signatures each), the test files by seconds
compiling in the test processes, and with ``--durations`` (the log of the
same run with pytest's ``--durations=0``) each test file's seconds outside
those compiles: the processes its tests start, and running. Compiles under
0.3 s (loads from the disk cache, small helpers) are left out of the
tables. On a cold cache, the kernels' lines are what a fresh clone's
``make test`` pays to compile; asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import time
from pathlib import Path

SMALL = 0.3  # seconds: below this a compile is a cache load or a small helper


class Census:
    """Numba's compile events in this process: (test, kernel, signature, seconds)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str, str, float]] = []
        self.test = ""
        self._open: list[list[float]] = []  # [start, seconds of the compiles inside]

    def on_start(self, event) -> None:
        self._open.append([time.perf_counter(), 0.0])

    def on_end(self, event) -> None:
        start, inner = self._open.pop()
        seconds = time.perf_counter() - start
        if self._open:
            self._open[-1][1] += seconds
        func = getattr(event.data.get("dispatcher"), "py_func", None)
        name = f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', '?')}"
        self.records.append((self.test, name, str(event.data.get("args")), seconds - inner))

    def listen(self):
        from numba.core import event

        class Listener(event.Listener):
            def on_start(listener, ev):  # noqa: N805
                self.on_start(ev)

            def on_end(listener, ev):  # noqa: N805
                self.on_end(ev)

        listener = Listener()
        event.register("numba:compile", listener)
        return listener

    def write(self, folder: Path) -> Path:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        path = Path(folder) / f"census-{worker}-{os.getpid()}.json"
        path.write_text(json.dumps(self.records))
        return path


_census = Census()


def pytest_configure(config) -> None:
    if not os.environ.get("COMPILE_CENSUS_DIR"):
        import pytest

        raise pytest.UsageError("compile_census: set COMPILE_CENSUS_DIR to the folder for its "
                                "files")
    _census.listen()


def pytest_runtest_setup(item) -> None:
    _census.test = item.nodeid


def pytest_sessionfinish(session) -> None:
    _census.write(Path(os.environ["COMPILE_CENSUS_DIR"]))


def durations(log: str) -> dict[str, float]:
    """Seconds per test id (setup, call and teardown) from pytest's --durations output."""
    out: collections.Counter = collections.Counter()
    for line in log.splitlines():
        found = re.match(r"\s*([\d.]+)s (?:call|setup|teardown)\s+(\S+)", line)
        if found:
            out[found[2]] += float(found[1])
    return dict(out)


def tables(records, test_seconds: dict[str, float] | None, top: int) -> str:
    kernels: collections.Counter = collections.Counter()
    signatures: dict[str, set] = collections.defaultdict(set)
    per_test: collections.Counter = collections.Counter()
    for test, kernel, signature, seconds in records:
        per_test[test] += seconds
        if seconds >= SMALL:
            kernels[kernel] += seconds
            signatures[kernel].add(signature)
    total = sum(per_test.values())
    lines = [f"compiling in the test processes: {total:.0f} s, "
             f"{sum(kernels.values()):.0f} s of it in compiles of {SMALL} s or more", "",
             "| kernel | signatures | seconds |", "|---|---:|---:|"]
    lines += [f"| {name} | {len(signatures[name])} | {seconds:.1f} |"
              for name, seconds in kernels.most_common(top)]
    files: collections.Counter = collections.Counter()
    rest: collections.Counter = collections.Counter()
    for test, seconds in per_test.items():
        files[test.split("::")[0]] += seconds
    for test, seconds in (test_seconds or {}).items():
        rest[test.split("::")[0]] += seconds - per_test.get(test, 0.0)
    names = sorted(set(files) | set(rest), key=lambda f: -(files[f] + rest[f]))[:top]
    lines += ["", "| test file | compiling s | the rest s |" if test_seconds else
              "| test file | compiling s |", "|---|---:|---:|" if test_seconds else "|---|---:|"]
    for name in names:
        cells = f"| {name or '(outside tests)'} | {files[name]:.1f} |"
        lines.append(cells + (f" {rest[name]:.1f} |" if test_seconds else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    # Here, not at the top: the plugin is loaded before the tests and
    # needs nothing of the package.
    from _common import at_least_one  # benchmarks/ is on the path of a script run from it

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="the plugin's COMPILE_CENSUS_DIR")
    ap.add_argument("--durations", type=Path, help="the run's log with --durations=0")
    ap.add_argument("--top", type=at_least_one, default=25, help="rows per table")
    args = ap.parse_args(argv)
    files = sorted(args.folder.glob("census-*.json"))
    if not files:
        raise SystemExit(f"compile_census: no census-*.json in {args.folder}")
    records = [tuple(r) for path in files for r in json.loads(path.read_text())]
    seconds = durations(args.durations.read_text()) if args.durations else None
    print(tables(records, seconds, args.top))


if __name__ == "__main__":
    main()
