"""The comparison's own W&B run (``job_type`` ``compare``), beside its trials' runs: its command and settings as the
run's config (and the command as its notes), and at the end its summary table as a ``wandb.Table`` (``results``), its
plots as ``wandb.Image`` (``accuracy``, and ``accuracy_time``/``accuracy_traffic`` when drawn) and each method's mean
final and best test accuracy in the run's summary.

W&B runs in a process of its own (:class:`~lightning_sfl.wandb.process.WandbProcess`, as a fit's logger does): it
starts while the trials run and builds the table and images there (:func:`comparison_payload`); its messages go to
``OUT/log.txt`` (W&B's footer never follows the comparison's table), the comparison's own output to the run's
console log. Offline unless W&B's own switches say otherwise (``WANDB_MODE``, ``wandb online``), as for ``fit``;
named ``WANDB_NAME`` or ``compare-<OUT's name>``, tagged ``compare-<OUT's name>`` (the tag of its trials) after
``WANDB_TAGS``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["ComparisonRun", "comparison_payload"]

#: The plots of a comparison logged as images: file in ``OUT`` -> key in the run.
IMAGES = {"accuracy.png": "accuracy", "accuracy_time.png": "accuracy_time", "accuracy_traffic.png": "accuracy_traffic"}


def comparison_payload(columns: list[str], data: list[list[str]], images: dict[str, str]) -> dict[str, Any]:
    """What the comparison's run logs at the end, built in W&B's process: ``{"results": wandb.Table, <key>:
    wandb.Image, ...}``."""
    import wandb

    payload: dict[str, Any] = {"results": wandb.Table(columns=columns, data=data)}
    payload.update({key: wandb.Image(path) for key, path in images.items()})
    return payload


class ComparisonRun:
    """The W&B run of a comparison into ``out`` made by ``command`` (see the module docstring); ``settings``: the
    run's config beside the command."""

    def __init__(self, out: Path, command: str, settings: dict[str, Any]) -> None:
        from lightning_sfl.wandb import process as wandb_process
        from lightning_sfl.wandb.process import generate_run_id

        name = f"compare-{out.name}"
        tags = [t for t in os.environ.get("WANDB_TAGS", "").split(",") if t] + [name]
        init = {
            "project": "lightning-sfl",
            "dir": str(out),
            "id": generate_run_id(),
            "name": os.environ.get("WANDB_NAME") or name,
            "job_type": "compare",
            "tags": list(dict.fromkeys(tags)),
            "notes": command,
            "config": {"command": command, **settings},
        }
        if os.environ.get("WANDB_RUN_GROUP"):
            init["group"] = os.environ["WANDB_RUN_GROUP"]
        self.process = wandb_process.WandbProcess()
        before, wandb_process.output_path = wandb_process.output_path, str(out / "log.txt")
        try:
            self.process.init(init, offline=None)  # the worker takes its output file now
        finally:
            wandb_process.output_path = before

    def log_results(
        self, columns: Sequence[str], data: Sequence[Sequence[str]], out: Path, summary: dict[str, float]
    ) -> None:
        """Log the table (``columns``, ``data``: its cells), the plots found in ``out`` and ``summary``."""
        images = {key: str(out / name) for name, key in IMAGES.items() if (out / name).is_file()}
        cells = [[str(c).replace("`", "") for c in row] for row in data]
        self.process.log_built(comparison_payload, (list(columns), cells, images))
        if summary:
            self.process.call(("summary", "update"), (summary,))

    def finish(self, exit_code: int = 0) -> None:
        """End the run and wait until W&B has written it."""
        self.process.close(exit_code)
