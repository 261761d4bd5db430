"""The W&B objects the callbacks log, built from plain Python data (lists, numbers, bytes).

Pure functions of this module's own: it imports neither torch nor Lightning, so a W&B worker process
(:mod:`lightning_sfl.wandb.process`) can build the objects itself from the data the training process sends, and
:func:`log_built` lets a callback log the same payload to either kind of ``WandbLogger``:

* :func:`per_class_payload` — :class:`~lightning_sfl.callbacks.PerClassAccuracy`'s table, bar chart and confusion
  matrix of one report;
* :func:`heatmap_payload` — :class:`~lightning_sfl.callbacks.PartitionReport`'s heatmap image (drawn by
  :func:`heatmap_png`, with matplotlib: also off the training process's start-up).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["heatmap_payload", "heatmap_png", "log_built", "per_class_payload", "typed_table"]


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


def heatmap_payload(
    label_counts: Sequence[Sequence[int]], title: str, stats: dict[str, float], png_path: str | None = None
) -> dict[str, Any]:
    """``stats`` and ``partition/heatmap``: a ``wandb.Image`` of :func:`heatmap_png` (caption ``title``), whose PNG
    is also written to ``png_path`` if given."""
    import wandb
    from PIL import Image

    png = heatmap_png(label_counts, title)
    if png_path is not None:
        Path(png_path).parent.mkdir(parents=True, exist_ok=True)
        Path(png_path).write_bytes(png)
    return {**stats, "partition/heatmap": wandb.Image(Image.open(io.BytesIO(png)), caption=title)}


def heatmap_png(label_counts: Sequence[Sequence[int]], title: str) -> bytes:
    """PNG bytes of the client × class count heatmap of ``label_counts`` (``[K, N]``: clients × classes; counts
    written in the cells when there are few)."""
    import numpy as np
    from matplotlib.figure import Figure  # no pyplot: no global figure state, no GUI backend

    n = np.asarray(label_counts)
    k, c = n.shape
    fig = Figure(figsize=(min(max(4.0, 0.5 * c + 2.5), 24.0), min(max(3.0, 0.32 * k + 1.8), 24.0)), dpi=100)
    ax = fig.add_subplot()
    im = ax.imshow(n, aspect="auto", cmap="viridis", interpolation="nearest")
    fig.colorbar(im, ax=ax, label="samples")
    ax.set_xlabel("class")
    ax.set_ylabel("client")
    ax.set_title(title, fontsize=9)
    if c <= 40:
        ax.set_xticks(range(c))
    if k <= 40:
        ax.set_yticks(range(k))
    if k * c <= 400:
        threshold = n.max() / 2 if n.size else 0
        for i in range(k):
            for j in range(c):
                if n[i, j]:
                    colour = "black" if n[i, j] > threshold else "white"
                    ax.text(j, i, int(n[i, j]), ha="center", va="center", fontsize=7, color=colour)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


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
    (:class:`lightning_sfl.wandb.logger.WandbLogger`: a ``log_built`` method) gets ``build`` and ``args`` instead, so
    the objects are built there. ``build``: a module-level function of a module without torch (it travels by name)."""
    if callable(getattr(logger, "log_built", None)):
        logger.log_built(build, args, step=step)
    else:
        logger.log_metrics(build(*args), step=step)
