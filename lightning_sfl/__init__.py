"""lightning_sfl: Split Federated Learning under label skew, on PyTorch Lightning.

The public API, importable from the package itself (loaded on first use, so ``lightning-sfl --help`` and
``import lightning_sfl`` stay fast):

>>> from lightning_sfl import SCALA, FederatedDataModule, CommunicationBytes  # doctest: +SKIP

* methods: every class of :data:`ALGORITHMS` (``SCALA``, ``FedAvg``, ``SplitFedV1``, …) and their base
  ``SplitFedAlgorithm``;
* data: ``FederatedDataModule``; client-selection policies ``ClientSelection``, ``UniformSelection``,
  ``FedCBSSelection``, ``ClassBalancedSelection``;
* the loop: ``Step``, ``Schedule``, ``SyncRounds``, ``ClientStats``, ``RoundEnd``, ``RoundCallback``;
* callbacks (also in ``lightning_sfl.callbacks``): ``CommunicationBytes``, ``PerClassAccuracy``,
  ``GradientDissimilarity``, ``SimulatedClock``, ``PartitionReport``, ``WandbRoundAxis``, ``RoundProgressBar``;
* the command line: ``SFLCLI`` (the LightningCLI behind ``lightning-sfl fit|validate|test``).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_ALGORITHMS = (
    "SCALA SCALAPE MiniBatchSFL CASFL LLASFL SplitFedV1 SplitFedV2 SplitFedV3 SFLLocalLoss CSSFL "
    "FedAvg FedProx FedDyn FedLC FedLogit FedDecorr FedCBS Scaffold FedNova FedAvgM FedAdagrad FedAdam FedYogi FedRS "
    "FedConcat S2FL GAS AsyncSFL FedBuff CA2FL SemiSFL SupervisedOnly FedSwitchSL FedSwitch SemiFL SplitFedAlgorithm "
    "ALGORITHMS"
)
_CALLBACKS = (
    "CommunicationBytes PerClassAccuracy GradientDissimilarity SimulatedClock PartitionReport WandbRoundAxis "
    "PseudoLabelQuality "
    "RoundProgressBar"
)
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(_ALGORITHMS.split(), "lightning_sfl.algorithms"),
    **dict.fromkeys(_CALLBACKS.split(), "lightning_sfl.callbacks"),
    **dict.fromkeys("Step Schedule SyncRounds ClientStats RoundEnd RoundCallback".split(), "lightning_sfl.loop"),
    **dict.fromkeys(
        "ClientSelection UniformSelection FedCBSSelection ClassBalancedSelection".split(),
        "lightning_sfl.data.selection",
    ),
    "FederatedDataModule": "lightning_sfl.data",
    "SFLCLI": "lightning_sfl.lightning_cli",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'lightning_sfl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
