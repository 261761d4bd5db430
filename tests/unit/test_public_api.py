"""The public API: what ``lightning_sfl`` exports, and the README's Python example, executed as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import lightning_sfl

REPO = Path(__file__).resolve().parents[1]


def test_every_export_resolves_and_callbacks_are_the_same_objects():
    import lightning_sfl.callbacks as callbacks
    from lightning_sfl.algorithms import ALGORITHMS

    for name in lightning_sfl.__all__:
        assert getattr(lightning_sfl, name) is not None, name
    assert {cls.__name__ for cls in ALGORITHMS.values()} <= set(lightning_sfl.__all__)
    assert set(callbacks.__all__) <= set(lightning_sfl.__all__)
    assert lightning_sfl.CommunicationBytes is callbacks.CommunicationBytes
    assert "FederatedDataModule" in dir(lightning_sfl)


def test_importing_the_package_loads_nothing_heavy():
    code = "import sys, lightning_sfl; print('lightning' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_readme_python_example_runs(capsys):
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Python API", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    exec(compile(code, "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert re.search(r"round 3: test accuracy 0\.\d{3}, \d+\.\d MB sent", printed), printed
