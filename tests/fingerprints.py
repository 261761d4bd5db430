"""Fingerprints of every registered method: 2 rounds on digits in float64, with each client bank, as
``test_algorithms.py::test_stacked_client_bank_equals_sequential`` trains them. A fingerprint holds the SHA-256 of
the method's whole ``state_dict`` (every tensor's bytes, keys sorted: client and server halves, per-client state,
server moments, decoders) and the exact final values of the traffic (``comm/cumulative_bytes``), the simulated clock
(``clock/elapsed_seconds``) and the test accuracy.

``tests/fingerprints.json`` holds those of the code before the "Version 4" restructuring (issue 55): a change of
structure must leave each of them bitwise equal, except where it changes the arithmetic on purpose (the test names
those cases). Write them anew, on the two-core CPU machine CI runs on, with::

    .venv/bin/python tests/fingerprints.py > tests/fingerprints.json
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch

#: Where the committed fingerprints are.
COMMITTED = Path(__file__).with_name("fingerprints.json")
#: The logged values a fingerprint keeps, exactly (``float.hex``).
KEYS = ("comm/cumulative_bytes", "clock/elapsed_seconds", "test/acc")


def state_digest(state: dict[str, torch.Tensor]) -> str:
    """SHA-256 of a ``state_dict``: each key, dtype, shape and the tensor's bytes, in key order.

    >>> a = {"w": torch.zeros(2, dtype=torch.float64)}
    >>> state_digest(a) == state_digest({"w": torch.zeros(2, dtype=torch.float64)})
    True
    >>> state_digest(a) == state_digest({"w": torch.tensor([0.0, 5e-324], dtype=torch.float64)})
    False
    """
    digest = hashlib.sha256()
    for key in sorted(state):
        value = state[key]
        if not isinstance(value, torch.Tensor):
            continue
        tensor = value.detach().cpu().contiguous()
        digest.update(f"{key}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def fingerprint(model, trainer) -> dict:
    """The fingerprint of a trained ``model`` (see the module docstring)."""
    metrics = trainer.callback_metrics
    logged = {key: float(metrics[key]).hex() for key in KEYS if key in metrics}
    return {"state": state_digest(model.state_dict()), **logged}


def committed() -> dict[str, dict]:
    """The committed fingerprints, by ``"<method>/<bank>"``."""
    return json.loads(COMMITTED.read_text())


def main() -> None:
    """Trains every registered method with both banks and prints the fingerprints as JSON; on one torch thread, as
    the tests run (``conftest.py``: a reduction split over two threads sums in another order)."""
    torch.set_num_threads(1)
    sys.path.insert(0, str(Path(__file__).parent))
    from test_algorithms import ALGORITHMS, bank_check_run

    found = {}
    for name in sorted(ALGORITHMS):
        for bank in ("sequential", "stacked"):
            model, trainer = bank_check_run(name, bank)
            found[f"{name}/{bank}"] = fingerprint(model, trainer)
    print(json.dumps(found, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
