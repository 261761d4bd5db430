"""Fingerprints of every registered method: 2 rounds on digits in float64, with each client bank, as
``test_algorithms.py::test_stacked_client_bank_equals_sequential`` trains them. A fingerprint holds the SHA-256 of
the method's whole ``state_dict`` (every tensor's bytes, keys sorted: client and server halves, per-client state,
server moments, decoders), the state's norm and the exact final values of the traffic (``comm/cumulative_bytes``),
the simulated clock (``clock/elapsed_seconds``) and the test accuracy. The defences' tensors (SCALA-PE's decoders),
saved under ``defences.<key>.`` since defences became parts, are digested under the keys they had before
(:func:`~lightning_sfl.defences.renamed_legacy_state`): their values are compared bitwise all the same.

``tests/fingerprints.json`` holds those of the code before the "Version 4" restructuring (issue 55): a change of
structure must leave each of them bitwise equal, except where it changes the arithmetic on purpose (the test names
those cases). Bitwise on the machine that wrote them (``"machine"``: torch and CPU); on another, whose kernels may
round otherwise, the norm and the logged values to a relative 1e-9. Write them anew, on the two-core CPU machine CI
runs on, with::

    .venv/bin/python tests/fingerprints.py > tests/fingerprints.json
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch

from lightning_sfl.defences import renamed_legacy_state
from lightning_sfl.runtime.state import dense_client_states

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


def state_norm(state: dict[str, torch.Tensor]) -> float:
    """The Euclidean norm of every floating-point tensor of a ``state_dict`` together, in float64: what is compared,
    to 1e-9, on a machine other than the one that wrote the fingerprints (whose kernels may round otherwise). Summed in
    key order, as the digest, so that where a tensor is held (a buffer, a per-client store) does not change it."""
    floats = [state[k] for k in sorted(state) if torch.is_tensor(state[k]) and state[k].is_floating_point()]
    squares = [v.detach().double().square().sum() for v in floats]
    return float(torch.stack(squares).sum().sqrt()) if squares else 0.0


def machine() -> str:
    """The torch version and CPU that fingerprints are bitwise for."""
    fields = dict(line.split(":", 1) for line in _cpuinfo() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    cpu = fields.get("model name", "unknown")
    if "cpu family" in fields:  # CPUs of one name differ in their kernels' rounding (vector widths): family and model
        cpu += f" (family {fields['cpu family']}, model {fields.get('model', '?')})"
    return f"torch {torch.__version__} on {cpu}"


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


#: Tensors a fingerprint leaves out: Semi-SFL's projection heads and queue, which its baselines held unused (trained
#: by nothing, read by nothing) until they got a base of their own (:mod:`~lightning_sfl.algorithms.semi_supervised`).
UNUSED = {
    name: ("projection.", "teacher_projection.", "queue_")
    for name in ("FedSwitchSL", "FedSwitch", "SemiFL", "FedMatch", "SupervisedOnly")
}


def fingerprint(model, trainer) -> dict:
    """The fingerprint of a trained ``model`` (see the module docstring; without its :data:`UNUSED` tensors)."""
    metrics = trainer.callback_metrics
    logged = {key: float(metrics[key]).hex() for key in KEYS if key in metrics}
    state = {**model.state_dict(), **dense_client_states(model)}  # per-client stores as the [K, ...] they stand for
    state = renamed_legacy_state(state, reverse=True)  # the defences' tensors under their old keys
    unused = UNUSED.get(type(model).__name__, ())
    state = {k: v for k, v in state.items() if not k.startswith(unused)} if unused else state
    return {"state": state_digest(state), "norm": state_norm(state).hex(), **logged}


def committed() -> dict[str, dict]:
    """The committed fingerprints, by ``"<method>/<bank>"`` (and ``"machine"``: where they were written)."""
    return json.loads(COMMITTED.read_text())


def differences(found: dict, expected: dict, same_machine: bool) -> list[str]:
    """What differs between two fingerprints: anything, bitwise, on the machine that wrote ``expected``; elsewhere
    the norm of the state and the logged values beyond a relative 1e-9.

    >>> a = {"state": "x", "norm": (2.0).hex(), "test/acc": (0.5).hex()}
    >>> differences({**a, "state": "y"}, a, True), differences({**a, "state": "y"}, a, False)
    (['state'], [])
    >>> differences({**a, "norm": (2.1).hex()}, a, False)
    ['norm']
    """
    if same_machine:
        return sorted(k for k in expected if found.get(k) != expected[k])
    numbers = [k for k in expected if k != "state"]
    return sorted(
        k for k in numbers if k not in found or abs(float.fromhex(found[k]) - float.fromhex(expected[k])) > 1e-9 * max(
            1.0, abs(float.fromhex(expected[k])))
    )  # fmt: skip


def main() -> None:
    """Trains every registered method with both banks and prints the fingerprints as JSON; on one torch thread, as
    the tests run (``conftest.py``: a reduction split over two threads sums in another order)."""
    torch.set_num_threads(1)
    here = Path(__file__).parent
    sys.path[:0] = [str(here), str(here / "integration")]  # _helpers, and test_algorithms' runs
    from test_algorithms import ALGORITHMS, bank_check_run

    found = {"machine": machine()}
    for name in sorted(ALGORITHMS):
        for bank in ("sequential", "stacked"):
            model, trainer = bank_check_run(name, bank)
            found[f"{name}/{bank}"] = fingerprint(model, trainer)
    print(json.dumps(found, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
