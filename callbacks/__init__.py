"""Lightning callbacks of lightning_sfl, installed as ``lightning_sfl.callbacks``."""

from lightning_sfl.callbacks.comm_bytes import CommunicationBytes
from lightning_sfl.callbacks.progress import RoundProgressBar

__all__ = ["CommunicationBytes", "RoundProgressBar"]
