"""The README's Python example, executed as written (what ``lightning_sfl`` exports:
``tests/unit/test_public_api.py``)."""

from __future__ import annotations

import re

from _helpers import REPO


def test_readme_python_example_runs(capsys):
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Python API", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    exec(compile(code, "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert re.search(r"round 3: test accuracy 0\.\d{3}, \d+\.\d MB sent", printed), printed
