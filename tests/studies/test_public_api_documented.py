"""The README's Python example, executed as written, and the same example on the documentation's "Get started" page
(what ``lightning_sfl`` exports: ``tests/unit/test_public_api.py``)."""

from __future__ import annotations

import re

from _helpers import REPO


def python_example(path, heading: str) -> str:
    """The one Python block under ``heading`` of the Markdown file ``path``."""
    section = path.read_text().split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return code


def test_readme_python_example_runs(capsys):
    code = python_example(REPO / "README.md", "In Python")
    assert code == python_example(REPO / "docs" / "get-started.md", "The Python API")
    assert len(code.strip().splitlines()) <= 15  # the README's "15 lines"
    exec(compile(code, "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert re.search(r"round 3: test accuracy 0\.\d{3}, \d+\.\d MB sent", printed), printed
