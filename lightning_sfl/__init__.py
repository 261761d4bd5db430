"""lightning_sfl: Split Federated Learning under label skew, on PyTorch Lightning.

The public API, importable from the package itself (loaded on first use, so ``lightning-sfl --help`` and
``import lightning_sfl`` stay fast):

>>> from lightning_sfl import SCALA, FederatedDataModule, CommunicationBytes  # doctest: +SKIP

* methods: every registered class (``SCALA``, ``FedAvg``, ``SplitFedV1``, …: :data:`ALGORITHMS`, derived from the
  registry of :mod:`lightning_sfl.algorithms.registry`), their base ``SplitFedAlgorithm`` and ``register``;
* data: ``FederatedDataModule``; client-selection policies ``ClientSelection``, ``UniformSelection``,
  ``FedCBSSelection``, ``ClassBalancedSelection``;
* the loop: ``Federation``, ``Step``, ``Schedule``, ``SyncRounds``, ``ClientStats``, ``RoundEnd``;
* callbacks (also in ``lightning_sfl.callbacks``): ``CommunicationBytes``, ``PerClassAccuracy``,
  ``GradientDissimilarity``, ``SimulatedClock``, ``PartitionReport``, ``WandbRoundAxis``, ``PseudoLabelQuality``,
  ``SplitGuard``, ``RoundProgressBar``, and ``RoundCallback``, the base of callbacks that receive the federation and
  the round events;
* system models: ``WirelessCell`` (SCALA's and GAS's wireless cell), ``EdgeDevices`` (Semi-SFL's devices and
  links; ``lightning_sfl.system``);
* per-client state: ``ClientStore`` (rows for the clients written, on disk beyond a memory budget, checkpointed
  incrementally: FedDyn's, SCAFFOLD's, SCALA-PE's decoders, …);
* the command line: ``SFLCLI`` (the LightningCLI behind ``lightning-sfl fit|validate|test``).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_CALLBACKS = (
    "CommunicationBytes PerClassAccuracy GradientDissimilarity SimulatedClock PartitionReport WandbRoundAxis "
    "PseudoLabelQuality SplitGuard RoundCallback "
    "RoundProgressBar"
)
_EXPORTS: dict[str, str] = {
    **dict.fromkeys("SplitFedAlgorithm ALGORITHMS register".split(), "lightning_sfl.algorithms"),
    **dict.fromkeys(_CALLBACKS.split(), "lightning_sfl.callbacks"),
    **dict.fromkeys("Step Schedule SyncRounds ClientStats RoundEnd Federation".split(), "lightning_sfl.loop"),
    **dict.fromkeys(
        "ClientSelection UniformSelection FedCBSSelection ClassBalancedSelection".split(),
        "lightning_sfl.loop.selection",
    ),
    "FederatedDataModule": "lightning_sfl.data",
    "WirelessCell": "lightning_sfl.system.wireless",
    "EdgeDevices": "lightning_sfl.system.devices",
    "SFLCLI": "lightning_sfl.lightning_cli",
    "ClientStore": "lightning_sfl.client_store",
}


def _methods() -> dict[str, str]:
    """Class name -> module of every registered method (imports the methods: the registry is filled by importing)."""
    from lightning_sfl.algorithms import ALGORITHMS

    return dict.fromkeys((cls.__name__ for cls in ALGORITHMS.values()), "lightning_sfl.algorithms")


def __getattr__(name: str):
    if name == "__all__":  # every export, the registered methods included (from the registry)
        return sorted({**_EXPORTS, **_methods()})
    module = _EXPORTS.get(name) or (_methods().get(name) if name[:1].isupper() else None)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'lightning_sfl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
