"""The public API: what ``lightning_sfl`` exports, and that importing it loads nothing heavy (the README's Python
example: ``tests/studies/test_public_api_documented.py``)."""

from __future__ import annotations

import subprocess
import sys

import lightning_sfl


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
