"""README.md runs: its ```python blocks and the `fastsoftmax` lines of its ```sh blocks.

They run in document order, in one namespace and one temporary working
folder, so a command can read a file that an earlier Python block wrote.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from fastsoftmax import cli

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"^```(python|sh|console)\n(.*?)^```", re.DOTALL | re.MULTILINE)


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of every fenced python, sh or console block, in order."""
    return BLOCK.findall(text)


def python_blocks(text: str) -> list[str]:
    return [code for lang, code in blocks(text) if lang == "python"]


def commands(code: str) -> list[list[str]]:
    """The arguments of every `fastsoftmax ...` line of a shell block ("$ " prompts allowed)."""
    found = []
    for line in code.splitlines():
        line = line.strip().removeprefix("$ ")
        if line.startswith("fastsoftmax "):
            argv = shlex.split(line, comments=True)
            assert not {"|", ">", "<", "&&", ";"} & set(argv), f"not a plain command: {line}"
            found.append(argv[1:])
    return found


def test_block_extraction():
    text = ("a\n```python\nx = 1\n```\nb\n```\nnot python\n```\n```sh\n"
            "$ fastsoftmax train 'my data.csv' -o m.npz  # comment\nls\n```\n"
            "```python\ny = x\n```\n")
    assert python_blocks(text) == ["x = 1\n", "y = x\n"]
    found = blocks(text)
    assert [lang for lang, _ in found] == ["python", "sh", "python"]
    assert commands(found[1][1]) == [["train", "my data.csv", "-o", "m.npz"]]


def test_readme_blocks_run(capsys, tmp_path, monkeypatch):
    if not README.exists():
        pytest.fail("README.md is missing")
    monkeypatch.chdir(tmp_path)  # the tour writes toy.csv, toy.npz, PNGs...
    found = blocks(README.read_text(encoding="utf-8"))
    assert sum(lang == "python" for lang, _ in found) >= 3, "expected the README's examples"
    namespace: dict = {"__name__": "__readme__"}
    ran, printed = [], []
    for i, (lang, code) in enumerate(found):
        if lang == "python":
            exec(compile(code, f"README.md block {i + 1}", "exec"), namespace)
            continue
        for argv in commands(code):
            printed.append(capsys.readouterr().out)
            status = cli.main(argv)
            out, err = capsys.readouterr()
            assert status == 0, (argv, err)
            printed.append(out)
            ran.append(argv[0])
    printed.append(capsys.readouterr().out)
    # the blocks' own checks ran; the error example printed its message
    assert "Z row 0 contains NaN" in "".join(printed)
    assert namespace["P"][1, 2] == 0
    # the tour's train and predict commands ran and wrote their files
    assert ran.count("train") >= 1 and ran.count("predict") >= 1
    assert (tmp_path / "toy.npz").is_file()
    header = (tmp_path / "labels.csv").read_text().splitlines()[0]
    assert header == "label"
    assert (tmp_path / "toy_regions.png").read_bytes()[:4] == b"\x89PNG"


def test_readme_links_point_to_files():
    """The README is the front page: every relative link must lead to a file."""
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#]+)\)", text)
    local = [link for link in links if "://" not in link]
    assert local, "expected links into the documentation"
    missing = [link for link in local if not (README.parent / link).exists()]
    assert missing == []
