"""Lightning callbacks of lightning_sfl, installed as ``lightning_sfl.callbacks``.

The CLI turns them all on (options under ``--comm.*``, ``--per_class.*``, ``--partition_report.*``,
``--dissimilarity.*``, ``--splitguard.*``, ``--wandb_axis.*``, ``--pseudo_labels.*``; ``--clock.*`` configures the
system model whose times ``SimulatedClock`` logs); with a plain ``Trainer`` pass the ones you want. ``RoundCallback``
is the base of those that receive the federation and the round events.
"""

from lightning_sfl.callbacks.comm_bytes import CommunicationBytes
from lightning_sfl.callbacks.grad_dissimilarity import GradientDissimilarity
from lightning_sfl.callbacks.partition_report import PartitionReport
from lightning_sfl.callbacks.per_class import PerClassAccuracy
from lightning_sfl.callbacks.progress import RoundProgressBar
from lightning_sfl.callbacks.pseudo_labels import PseudoLabelQuality
from lightning_sfl.callbacks.round_callback import RoundCallback
from lightning_sfl.callbacks.simulated_clock import SimulatedClock
from lightning_sfl.callbacks.splitguard import SplitGuard
from lightning_sfl.callbacks.wandb_axis import WandbRoundAxis

__all__ = [
    "CommunicationBytes",
    "GradientDissimilarity",
    "PartitionReport",
    "PerClassAccuracy",
    "PseudoLabelQuality",
    "RoundCallback",
    "RoundProgressBar",
    "SimulatedClock",
    "SplitGuard",
    "WandbRoundAxis",
]
