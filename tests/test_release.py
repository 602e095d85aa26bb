"""The version is written once, and every place that shows it agrees.

``fastsoftmax.__version__`` (``fastsoftmax/__init__.py``) is the only place
the version is written: setuptools reads it (pyproject.toml, without
importing the package), ``fastsoftmax --version`` prints it, the docs show
it, and CHANGELOG.md's latest release heading must match it. ``make
wheel-test`` checks the built wheel and sdist.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fastsoftmax
from fastsoftmax import cli

ROOT = Path(__file__).resolve().parent.parent
# PEP 440 public versions: N(.N)*[{a|b|rc}N][.postN][.devN]
PEP440 = re.compile(r"^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")


def test_version_is_pep440():
    assert PEP440.match(fastsoftmax.__version__), fastsoftmax.__version__


def test_version_is_a_literal_setuptools_reads_without_importing():
    # setuptools' attr: reads a plain string assignment from the module's
    # source (no import, so building needs no numba); keep it a literal.
    tree = ast.parse((ROOT / "fastsoftmax" / "__init__.py").read_text(encoding="utf-8"))
    values = [node.value.value for node in tree.body
              if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
              and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)]
    assert values == [fastsoftmax.__version__]


def test_pyproject_reads_the_version_from_the_package():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" in meta["project"]["dynamic"]
    assert "version" not in meta["project"]
    assert meta["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "fastsoftmax.__version__"}


def test_changelog_latest_release_is_this_version():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## \[([^\]]+)\]", text, flags=re.MULTILINE)
    assert releases[0] == "Unreleased"
    assert releases[1] == fastsoftmax.__version__
    assert re.search(rf"^## \[{re.escape(fastsoftmax.__version__)}\] - \d{{4}}-\d\d-\d\d$",
                     text, flags=re.MULTILINE)


def test_cli_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"fastsoftmax {fastsoftmax.__version__}\n"


def test_python_m_fastsoftmax_version():
    done = subprocess.run([sys.executable, "-m", "fastsoftmax", "--version"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"fastsoftmax {fastsoftmax.__version__}\n"
