"""Every ```python block of README.md runs, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks(text: str) -> list[str]:
    return BLOCK.findall(text)


def test_block_extraction():
    text = "a\n```python\nx = 1\n```\nb\n```\nnot python\n```\n```python\ny = x\n```\n"
    assert python_blocks(text) == ["x = 1\n", "y = x\n"]


def test_readme_python_blocks_run(capsys):
    if not README.exists():
        pytest.fail("README.md is missing")
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 3, "expected the README's example blocks"
    namespace: dict = {"__name__": "__readme__"}
    for i, code in enumerate(blocks):
        exec(compile(code, f"README.md block {i + 1}", "exec"), namespace)
    # the blocks' own checks ran; the error example printed its message
    assert "Z row 0 contains NaN" in capsys.readouterr().out
    assert namespace["P"][1, 2] == 0
