"""Split-FL and FL algorithms. ``ALGORITHMS`` maps CLI/registry names to classes.

Every class is a ``LightningModule`` usable as ``--model <ClassName>`` (or ``class_path`` in a config).
"""

from lightning_sfl.algorithms.async_base import AsyncMethod
from lightning_sfl.algorithms.base import ClientModule, ServerModule, SplitFedAlgorithm
from lightning_sfl.algorithms.fedavg import FedAvg, FedCBS, FedDecorr, FedDyn, FedLC, FedLogit, FedProx
from lightning_sfl.algorithms.fedbuff import CA2FL, FedBuff
from lightning_sfl.algorithms.fedconcat import FedConcat
from lightning_sfl.algorithms.fednova import FedNova
from lightning_sfl.algorithms.fedopt import FedAdagrad, FedAdam, FedAvgM, FedYogi
from lightning_sfl.algorithms.fedrs import FedRS
from lightning_sfl.algorithms.gas import GAS, AsyncSFL
from lightning_sfl.algorithms.s2fl import S2FL
from lightning_sfl.algorithms.scaffold import Scaffold
from lightning_sfl.algorithms.scala import SCALA
from lightning_sfl.algorithms.scala_pe import SCALAPE
from lightning_sfl.algorithms.semi_baselines import FedSwitch, FedSwitchSL, SemiFL
from lightning_sfl.algorithms.semi_sfl import SemiSFL, SupervisedOnly
from lightning_sfl.algorithms.splitfed import (
    CASFL,
    CSSFL,
    LLASFL,
    MiniBatchSFL,
    SFLLocalLoss,
    SplitFedV1,
    SplitFedV2,
    SplitFedV3,
)

ALGORITHMS: dict[str, type[SplitFedAlgorithm]] = {
    "scala": SCALA,
    "minibatch_sfl": MiniBatchSFL,
    "s2fl": S2FL,
    "ca_sfl": CASFL,
    "lla_sfl": LLASFL,
    "splitfedv1": SplitFedV1,
    "splitfedv2": SplitFedV2,
    "splitfedv3": SplitFedV3,
    "sfl_local_loss": SFLLocalLoss,
    "cs_sfl": CSSFL,
    "scala_pe": SCALAPE,
    "fedavg": FedAvg,
    "fedprox": FedProx,
    "feddyn": FedDyn,
    "fedlc": FedLC,
    "fedlogit": FedLogit,
    "feddecorr": FedDecorr,
    "fedcbs": FedCBS,
    "fedavgm": FedAvgM,
    "fedadagrad": FedAdagrad,
    "fedadam": FedAdam,
    "fedyogi": FedYogi,
    "fedrs": FedRS,
    "scaffold": Scaffold,
    "fednova": FedNova,
    "fedconcat": FedConcat,
    "gas": GAS,
    "async_sfl": AsyncSFL,
    "fedbuff": FedBuff,
    "ca2fl": CA2FL,
    "semi_sfl": SemiSFL,
    "supervised_only": SupervisedOnly,
    "fedswitch_sl": FedSwitchSL,
    "fedswitch": FedSwitch,
    "semifl": SemiFL,
}
#: Methods on the asynchronous clock (a "round" is one aggregation of ``Q_c`` uploads, not a synchronous round):
#: ``compare`` runs them only when named, and their study is ``docs/results/gas``.
ASYNC_METHODS: tuple[str, ...] = tuple(name for name, cls in ALGORITHMS.items() if issubclass(cls, AsyncMethod))
#: Semi-supervised methods (labelled data on the server only; they need ``--data.labelled_per_class``): ``compare``
#: runs them only when named, and their study is ``docs/results/semi_sfl``.
SEMI_METHODS: tuple[str, ...] = tuple(name for name, cls in ALGORITHMS.items() if issubclass(cls, SemiSFL))

__all__ = [
    "ALGORITHMS",
    "ASYNC_METHODS",
    "SEMI_METHODS",
    "AsyncMethod",
    "GAS",
    "AsyncSFL",
    "CA2FL",
    "FedBuff",
    "CASFL",
    "CSSFL",
    "ClientModule",
    "FedAdagrad",
    "FedAdam",
    "FedAvg",
    "FedAvgM",
    "FedCBS",
    "FedConcat",
    "FedDecorr",
    "FedDyn",
    "FedLC",
    "FedLogit",
    "FedNova",
    "FedProx",
    "FedRS",
    "FedSwitch",
    "FedSwitchSL",
    "FedYogi",
    "LLASFL",
    "MiniBatchSFL",
    "S2FL",
    "SemiFL",
    "SemiSFL",
    "SupervisedOnly",
    "SCALA",
    "SCALAPE",
    "SFLLocalLoss",
    "Scaffold",
    "ServerModule",
    "SplitFedAlgorithm",
    "SplitFedV1",
    "SplitFedV2",
    "SplitFedV3",
]
