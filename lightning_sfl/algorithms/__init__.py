"""Split-FL algorithms. ``ALGORITHMS`` maps CLI names to classes."""

from lightning_sfl.algorithms.base import ClientModule, ServerModule, SplitFedAlgorithm
from lightning_sfl.algorithms.scala import SCALA

ALGORITHMS: dict[str, type[SplitFedAlgorithm]] = {"scala": SCALA}

__all__ = ["ALGORITHMS", "SCALA", "ClientModule", "ServerModule", "SplitFedAlgorithm"]
