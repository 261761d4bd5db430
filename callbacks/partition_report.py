"""``PartitionReport``: the client × class shard counts of the run, as a heatmap and summary statistics.

Once per ``fit`` (``on_fit_start``, after the federation was built), on global rank zero:

* ``partition/heatmap`` — a ``wandb.Image`` (to every ``WandbLogger``) of the ``K × N`` count matrix
  ``n[k, c]`` (clients on y, classes on x, colour bar, title with the partition settings); the same PNG is
  written to ``<log dir>/partition_heatmap.png`` where the run has a log directory (the first CSV or
  TensorBoard logger's versioned ``log_dir``, otherwise ``trainer.log_dir``). With the CLI's
  :class:`~lightning_sfl.wandb.logger.WandbLogger` both are drawn and written by W&B's process
  (:func:`~lightning_sfl.wandb.payloads.heatmap_payload`), not during the training process's start-up;
* ``partition/<stat>`` scalars (to every logger, so also into the W&B summary), from
  :func:`partition_statistics`: ``num_clients``, ``size_min``, ``size_median``, ``size_max``,
  ``mean_classes_per_client``, ``mean_max_class_share``, ``mean_kl_to_global``, ``mean_emd_to_global``.

Rows carry ``round`` = rounds completed at fit start (0 for a fresh run) and ``trainer/global_step``. The counts
and the title come from the fit's federation (its ``stats.label_counts``, ``[K, N]``, and its data's
``describe()``). It holds no state; a resumed fit reports again.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger
from typing_extensions import override

from lightning_sfl.callbacks.round_callback import RoundCallback
from lightning_sfl.loop import Federation
from lightning_sfl.wandb.payloads import heatmap_payload, heatmap_png, log_built

PNG_NAME = "partition_heatmap.png"


def partition_statistics(label_counts: torch.Tensor | np.ndarray) -> dict[str, float]:
    """Summary statistics of a partition from its count matrix ``n[k, c]`` (``K`` clients × ``N`` classes).

    With ``|D_k| = Σ_c n[k, c]``, ``P_k(c) = n[k, c] / |D_k|`` (client label distribution) and
    ``P(c) = Σ_k n[k, c] / Σ_{k,c} n[k, c]`` (pooled distribution of all the clients' data):

    * ``num_clients`` = ``K``;
    * ``size_min``, ``size_median``, ``size_max`` = min / median / max of ``|D_k|`` (the median of an even
      number of clients is the mean of the two middle sizes);
    * ``mean_classes_per_client`` = ``1/K Σ_k |{c : n[k, c] > 0}|``;
    * ``mean_max_class_share`` = ``1/K Σ_k max_c P_k(c)`` (1: every client holds a single class);
    * ``mean_kl_to_global`` = ``1/K Σ_k KL(P_k || P)``, ``KL(P_k || P) = Σ_{c: P_k(c) > 0} P_k(c) ln(P_k(c) / P(c))``
      in nats (0 for IID shards; ``P(c) > 0`` wherever ``P_k(c) > 0``, so it is always finite);
    * ``mean_emd_to_global`` = ``1/K Σ_k ½ Σ_c |P_k(c) − P(c)|``: the earth mover's distance between ``P_k`` and
      ``P`` when moving mass between two different classes costs 1 (labels have no order), i.e. the total
      variation distance, in ``[0, 1]``.

    Raises ``ValueError`` for a matrix that is not 2-D, has negative entries or an empty client.
    """
    n = torch.as_tensor(label_counts).detach().cpu().to(torch.float64).numpy()
    if n.ndim != 2 or n.shape[0] == 0 or n.shape[1] == 0:
        raise ValueError(f"label_counts must be a non-empty [clients, classes] matrix, got shape {n.shape}")
    if (n < 0).any():
        raise ValueError("label_counts must be non-negative")
    sizes = n.sum(axis=1)
    if (sizes == 0).any():
        raise ValueError(f"client(s) {np.flatnonzero(sizes == 0).tolist()[:10]} hold no samples")
    p_k = n / sizes[:, None]
    p = n.sum(axis=0) / n.sum()
    ratio = np.divide(p_k, p, out=np.ones_like(p_k), where=p_k > 0)
    kl = (p_k * np.log(ratio)).sum(axis=1)
    emd = 0.5 * np.abs(p_k - p).sum(axis=1)
    return {
        "num_clients": float(n.shape[0]),
        "size_min": float(sizes.min()),
        "size_median": float(np.median(sizes)),
        "size_max": float(sizes.max()),
        "mean_classes_per_client": float((n > 0).sum(axis=1).mean()),
        "mean_max_class_share": float(p_k.max(axis=1).mean()),
        "mean_kl_to_global": float(kl.mean()),
        "mean_emd_to_global": float(emd.mean()),
    }


class PartitionReport(RoundCallback):
    """Logs the partition heatmap and its summary statistics once per fit (see the module docstring)."""

    def __init__(self) -> None:
        self.federation: Federation | None = None

    @override
    def on_federation(self, trainer: L.Trainer, pl_module: L.LightningModule, federation: Federation) -> None:
        self.federation = federation

    @override
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.loggers or self.federation is None:
            return
        out_dir = _png_dir(trainer)  # all ranks: trainer.log_dir broadcasts
        if not trainer.is_global_zero:
            return
        counts = self.federation.stats.label_counts
        stats = {f"partition/{k}": v for k, v in partition_statistics(counts).items()}
        stats["round"] = float(trainer.current_epoch)
        data = self.federation.data
        title = data.describe() if data is not None else f"K={self.federation.stats.num_clients}"
        png_path = str((out_dir / PNG_NAME).resolve()) if out_dir is not None else None
        args = (torch.as_tensor(counts).tolist(), title, stats)
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):  # the heatmap is drawn in W&B's process where the logger has one
                log_built(logger, heatmap_payload, (*args, png_path), step=trainer.global_step)
                png_path = None  # written (by the first W&B logger's payload)
            else:
                logger.log_metrics(dict(stats), step=trainer.global_step)
        if png_path is not None:
            Path(png_path).parent.mkdir(parents=True, exist_ok=True)
            Path(png_path).write_bytes(heatmap_png(args[0], title))


def _png_dir(trainer: L.Trainer) -> Path | None:
    for logger in trainer.loggers:
        if isinstance(logger, (CSVLogger, TensorBoardLogger)):
            return Path(logger.log_dir)
    log_dir = trainer.log_dir
    return Path(log_dir) if log_dir else None
