"""The W&B objects the callbacks log, built from plain Python data (lists, numbers, bytes).

Pure functions of this module's own: it imports neither torch nor Lightning, so a W&B worker process
(:mod:`lightning_sfl.wandb_process`) can build the objects itself from the data the training process sends, and
:func:`log_built` lets a callback log the same payload to either kind of ``WandbLogger``:

* :func:`per_class_payload` — :class:`~lightning_sfl.callbacks.PerClassAccuracy`'s table, bar chart and confusion
  matrix of one report;
* :func:`heatmap_payload` — :class:`~lightning_sfl.callbacks.PartitionReport`'s heatmap image.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["heatmap_payload", "log_built", "per_class_payload", "typed_table"]


def per_class_payload(accuracy: Sequence[float], confusion: Sequence[Sequence[int]], round_idx: int) -> dict[str, Any]:
    """The W&B objects of one per-class report: ``per_class/table`` (columns ``class, accuracy, support``; support
    = row sums of ``confusion``), ``per_class/bar_chart`` (``wandb.plot.bar`` of that table),
    ``per_class/confusion_matrix`` (W&B's ``wandb/confusion_matrix/v1`` chart of ``confusion``, ``N²`` rows
    ``Actual, Predicted, nPredictions``) and ``round``. ``accuracy``: ``[N]`` floats; ``confusion``: ``[N, N]``
    ints, rows = actual class."""
    import wandb

    n = len(accuracy)
    support = [sum(row) for row in confusion]
    rows = [[c, a, s] for c, (a, s) in enumerate(zip(accuracy, support))]
    table = typed_table(["class", "accuracy", "support"], rows)
    names = [str(c) for c in range(n)]
    cells = [[names[i], names[j], confusion[i][j]] for i in range(n) for j in range(n)]
    cells = typed_table(["Actual", "Predicted", "nPredictions"], cells)
    return {
        "per_class/table": table,
        "per_class/bar_chart": wandb.plot.bar(
            table, "class", "accuracy", title=f"Per-class test accuracy (round {round_idx})"
        ),
        "per_class/confusion_matrix": wandb.plot.plot_table(
            "wandb/confusion_matrix/v1",
            cells,
            {"Actual": "Actual", "Predicted": "Predicted", "nPredictions": "nPredictions"},
            {"title": f"Confusion matrix (round {round_idx})"},
        ),
        "round": float(round_idx),
    }


def heatmap_payload(png: bytes, caption: str, stats: dict[str, float]) -> dict[str, Any]:
    """``stats`` and ``partition/heatmap``: a ``wandb.Image`` of the PNG bytes ``png`` with ``caption``."""
    import wandb
    from PIL import Image

    return {**stats, "partition/heatmap": wandb.Image(Image.open(io.BytesIO(png)), caption=caption)}


def typed_table(columns: list[str], rows: list[list[Any]]):
    """``wandb.Table(columns=columns, data=rows)`` for rows whose cells have the same Python type in every row (as
    here: ints, floats, strings): W&B infers the column types from the first row and the other rows are appended as
    it stores them, skipping ``add_data``'s per-row type check (~0.02 ms a cell; the same table, see the tests)."""
    import wandb

    table = wandb.Table(columns=columns, data=rows[:1])
    for row in rows[1:]:
        if [type(v) for v in row] != [type(v) for v in rows[0]]:
            raise TypeError(f"row {row} does not have the types of the first row {rows[0]}")
    table.data.extend(list(row) for row in rows[1:])
    return table


def log_built(logger: Any, build: Callable[..., dict[str, Any]], args: tuple, step: int | None) -> None:
    """``logger.log_metrics(build(*args), step=step)``; a logger that can build in W&B's process
    (:class:`lightning_sfl.loggers.WandbLogger`: a ``log_built`` method) gets ``build`` and ``args`` instead, so the
    objects are built there. ``build``: a module-level function of a module without torch (it travels by name)."""
    if callable(getattr(logger, "log_built", None)):
        logger.log_built(build, args, step=step)
    else:
        logger.log_metrics(build(*args), step=step)
