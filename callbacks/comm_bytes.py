"""``CommunicationBytes``: exact traffic of every round, by direction and kind, and the running total.

The algorithms record what crosses the client/server link in their round's ledger
(:class:`lightning_sfl.system.comm.CommLedger`) from the real tensors' sizes and dtypes; this callback
logs, when a round ends (the ``on_round_end`` event, after the FL phase):

* ``comm/up_bytes``, ``comm/down_bytes``, ``comm/total_bytes`` — this round, all participating clients;
* ``comm/<up|down>/<kind>_bytes`` — by kind (activations, labels, gradients, client_half, full_model, …);
* ``comm/cumulative_bytes`` — since round 1 (checkpointed with the callback's state);
* ``comm/<up|down>/<kind>_ratio`` — for each kind sent through a compressor (:mod:`lightning_sfl.compression`), its
  compression ratio this round: the bytes it would have sent uncompressed over the bytes it sent.
"""

from __future__ import annotations

from typing_extensions import override

from lightning_sfl.callbacks.round_callback import RoundCallback
from lightning_sfl.loop import RoundEnd


class CommunicationBytes(RoundCallback):
    """Logs the communication ledger of each round (keys ``comm/*``, one value per round)."""

    def __init__(self) -> None:
        self.cumulative = 0

    @override
    def on_round_end(self, trainer, pl_module, event: RoundEnd) -> None:
        totals = event.ledger.totals()
        self.cumulative += totals["total"]
        metrics = {f"comm/{k}_bytes": float(v) for k, v in totals.items()}
        metrics["comm/cumulative_bytes"] = float(self.cumulative)
        metrics.update({f"comm/{k}_ratio": ratio for k, ratio in event.ledger.compression_ratios().items()})
        pl_module.log_dict(metrics, on_step=False, on_epoch=True, batch_size=1)

    @override
    def state_dict(self) -> dict:
        return {"cumulative": self.cumulative}

    @override
    def load_state_dict(self, state_dict: dict) -> None:
        self.cumulative = int(state_dict["cumulative"])
