"""The documentation's code runs, and its placeholders go when their feature lands.

Every ``.. code-block:: python`` of the pages in ``docs/`` runs, page by
page in document order, in one namespace per page and a temporary working
folder; the ``$ fastsoftmax ...`` lines of its ``.. code-block:: console``
blocks run through ``fastsoftmax.cli.main`` in between, as in
``test_readme.py``. The gallery's examples run in ``make docs``.
"""

from __future__ import annotations

import re
import shlex
import socket
import warnings
from pathlib import Path

import numpy as np
import pytest

import fastsoftmax
from fastsoftmax import cli

DOCS = Path(__file__).resolve().parent.parent / "docs"
DIRECTIVE = re.compile(r"^(?P<indent>[ \t]*)\.\. code-block:: (?P<lang>\w+)[ \t]*$")


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, dedented code) of every ``.. code-block::`` of an rst text, in order."""
    lines = text.splitlines()
    found = []
    i = 0
    while i < len(lines):
        match = DIRECTIVE.match(lines[i])
        i += 1
        if not match:
            continue
        outer = len(match["indent"])
        while i < len(lines) and re.match(r"^\s+:\w[\w-]*:", lines[i]):  # options
            i += 1
        body = []
        while i < len(lines) and (not lines[i].strip()
                                  or len(lines[i]) - len(lines[i].lstrip()) > outer):
            body.append(lines[i])
            i += 1
        while body and not body[-1].strip():
            body.pop()
        while body and not body[0].strip():
            body.pop(0)
        indents = [len(line) - len(line.lstrip()) for line in body if line.strip()]
        cut = min(indents, default=0)
        found.append((match["lang"], "\n".join(line[cut:] for line in body) + "\n"))
    return found


def commands(code: str) -> list[list[str]]:
    """The arguments of every ``$ fastsoftmax ...`` line of a console block."""
    found = []
    for line in code.splitlines():
        line = line.strip()
        if line.startswith("$ fastsoftmax "):
            argv = shlex.split(line.removeprefix("$ "), comments=True)
            assert not {"|", ">", "<", "&&", ";"} & set(argv), f"not a plain command: {line}"
            found.append(argv[1:])
    return found


def pages_with_code() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.rst")
                  if "_build" not in p.parts and "auto_examples" not in p.parts
                  and "api" not in p.parts and "_templates" not in p.parts
                  and any(lang in ("python", "console") for lang, _ in
                          code_blocks(p.read_text(encoding="utf-8"))))


def test_code_block_extraction():
    text = ("Intro\n\n.. code-block:: python\n   :caption: x\n\n   x = 1\n   if x:\n"
            "       y = 2\n\nText\n\n.. code-block:: console\n\n   $ fastsoftmax train "
            "'a b.csv' -o m.npz  # comment\n   $ ls\n\n- item\n\n  .. code-block:: python\n\n"
            "     z = 3\n")
    found = code_blocks(text)
    assert found == [("python", "x = 1\nif x:\n    y = 2\n"),
                     ("console", "$ fastsoftmax train 'a b.csv' -o m.npz  # comment\n$ ls\n"),
                     ("python", "z = 3\n")]
    assert commands(found[1][1]) == [["train", "a b.csv", "-o", "m.npz"]]


def test_the_guide_has_code():
    names = {p.relative_to(DOCS).as_posix() for p in pages_with_code()}
    assert {"getting_started.rst", "user_guide/functions.rst", "user_guide/estimator.rst",
            "user_guide/dask.rst", "user_guide/cli.rst"} <= names


@pytest.fixture
def dashboard_port_taken():
    """Hold distributed's default dashboard port, 8787, as a cluster may elsewhere.

    A page's cluster that asks for that port gets another with a
    UserWarning (an error here): under ``make test`` a Dask test in another
    worker may hold it, so the pages must not ask for it.
    """
    sock = socket.socket()
    try:
        sock.bind(("", 8787))
        sock.listen()
    except OSError:  # already taken: the same condition
        pass
    yield
    sock.close()


@pytest.mark.slow
@pytest.mark.parametrize("page", pages_with_code(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_page_code_runs(page, tmp_path, monkeypatch, capsys, dashboard_port_taken):
    monkeypatch.chdir(tmp_path)  # the pages write toy.csv, toy.npz, PNGs...
    namespace: dict = {"__name__": "__docs__"}
    for i, (lang, code) in enumerate(code_blocks(page.read_text(encoding="utf-8"))):
        if lang == "python":
            exec(compile(code, f"{page.name} code block {i + 1}", "exec"), namespace)
        elif lang == "console":
            for argv in commands(code):
                capsys.readouterr()
                status = cli.main(argv)
                assert status == 0, (argv, capsys.readouterr().err)


# ---------------------------------------------------------------- placeholders
# The guide marks where coming work slots in with rst comments
# "PLACEHOLDER(topic)". Once the feature is in the package, its placeholders
# must be replaced by documentation: these tests say so.

def placeholders(topic: str) -> list[str]:
    return sorted(f"{p.relative_to(DOCS)}:{n}"
                  for p in DOCS.rglob("*.rst") if "_build" not in p.parts
                  for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                  if f"PLACEHOLDER({topic})" in line)


def sparse_fit_works() -> bool:
    import scipy.sparse

    X = scipy.sparse.csr_matrix(np.eye(6))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # two iterations: not converged, on purpose
            fastsoftmax.SoftmaxRegression(max_iter=2).fit(X, np.arange(6) % 2)
    except TypeError:
        return False
    return True


def _solvers() -> tuple[str, ...]:
    from fastsoftmax._params import SOLVERS

    return tuple(SOLVERS)


def test_newton_placeholders_filled_once_newton_exists():
    if "newton" in _solvers():
        assert not placeholders("newton"), "document solver='newton' and 'auto' there"
    else:
        assert placeholders("newton")


def test_hessp_placeholders_filled_once_hessp_exists():
    if hasattr(fastsoftmax, "hessp"):
        assert not placeholders("hessp"), "document fastsoftmax.hessp there"
    else:
        assert placeholders("hessp")


def test_sparse_placeholders_filled_once_sparse_fit_works():
    pending = DOCS / "pending" / "plot_sparse_text.py"
    if sparse_fit_works():
        assert not placeholders("sparse"), "document sparse input there"
        assert not pending.exists(), "move docs/pending/plot_sparse_text.py into examples/"
    else:
        assert placeholders("sparse") and pending.exists()


def test_cli_placeholders_filled_once_cli_is_a_package():
    if hasattr(cli, "__path__"):  # fastsoftmax/cli/ is a package
        assert not placeholders("cli"), "update the command line's pages there"
    else:
        assert placeholders("cli")
