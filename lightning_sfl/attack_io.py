"""What ``lightning-sfl attack`` writes and where: the output folder (:func:`output_folder`, created by
:func:`claim_output_folder`), the scores (:func:`write_scores`), the picture of reconstructions (:func:`save_grid`,
:func:`grid_indices`) and the W&B run (:func:`log_to_wandb`).

Nothing here imports torch or W&B when imported (``lightning-sfl attack --help`` loads neither).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = [
    "claim_output_folder", "grid_indices", "log_to_wandb", "output_folder", "save_grid", "write_scores",
]  # fmt: skip


def output_folder(ckpt_path: str | os.PathLike, out: str | os.PathLike | None) -> Path:
    """Where the attack writes, not created: ``out`` if given; else, for a checkpoint in a run folder
    (:func:`~lightning_sfl.run_folder.run_of_checkpoint`), the run's first free ``attack-<n>`` (never the fit's own
    files); else the first free ``attack-<n>`` next to the checkpoint.

    >>> import tempfile
    >>> run = Path(tempfile.mkdtemp())
    >>> (run / "checkpoints").mkdir()
    >>> _ = (run / "config.yaml").write_text("seed_everything: 0")
    >>> output_folder(run / "checkpoints" / "last.ckpt", None) == run / "attack-1"
    True
    >>> output_folder("elsewhere/model.ckpt", None), output_folder("elsewhere/model.ckpt", "out")
    (PosixPath('elsewhere/attack-1'), PosixPath('out'))
    """
    from lightning_sfl.run_folder import next_record

    return Path(out) if out else next_record(_beside(ckpt_path), "attack")


def _beside(ckpt_path: str | os.PathLike) -> Path:
    """The folder an attack's ``attack-<n>`` goes in: the checkpoint's run folder, else the checkpoint's folder."""
    from lightning_sfl.run_folder import run_of_checkpoint

    return run_of_checkpoint(ckpt_path) or Path(ckpt_path).parent


def claim_output_folder(ckpt_path: str | os.PathLike, out: str | os.PathLike | None) -> Path:
    """:func:`output_folder`, created (an ``attack-<n>`` by :func:`~lightning_sfl.run_folder.claim_record`: of two
    attacks at once, each gets its own)."""
    from lightning_sfl.run_folder import claim_record

    if not out:
        return claim_record(_beside(ckpt_path), "attack")
    Path(out).mkdir(parents=True, exist_ok=True)
    return Path(out)


def write_scores(out: Path, metrics: dict) -> None:
    """``metrics.json`` (``metrics`` as they are) and ``metrics.md`` (a table row of the scores) in ``out``."""
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    (out / "metrics.md").write_text(
        "| method | attack | MSE | SSIM | PSNR (dB) | test images |\n|---|---|---|---|---|---|\n"
        f"| {metrics['method']} | {metrics['attack']} | {metrics['mse']:.4f} | {metrics['ssim']:.4f} | "
        f"{metrics['psnr']:.2f} | {metrics['test_images']} |\n"
    )


#: ``--attack labels``: the scores of :mod:`~lightning_sfl.privacy.label_attack`, in the order of ``metrics.md``.
LABEL_SCORES = (
    "norm_auc",
    "norm_auc_per_batch",
    "direction_auc",
    "cluster_accuracy",
    "known_tail_accuracy",
    "completion_accuracy",
    "histogram_l1",
)


def write_label_scores(out: Path, metrics: dict) -> None:
    """``metrics.json`` and ``metrics.md`` (a table row of the label attacks' scores; ``-`` where a score does not
    apply: the AUCs need a binary task) in ``out``."""
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    cells = [f"{metrics[k]:.4f}" if k in metrics else "-" for k in LABEL_SCORES]
    (out / "metrics.md").write_text(
        "| method | the server receives | " + " | ".join(LABEL_SCORES) + " | rows |\n"
        + "|---" * (len(LABEL_SCORES) + 3) + "|\n"
        + f"| {metrics['method']} | {metrics['sent']} | " + " | ".join(cells) + f" | {metrics['rows']} |\n"
    )  # fmt: skip


def log_to_wandb(
    project: str, metrics: dict, history: list[dict], grid: Path, trained_by: str | None, offline: str | None = None
) -> str:
    """One W&B run (``job_type=attack``; files under the output folder, ``grid``'s): the attacker's curves per epoch,
    then the scores and the picture of reconstructions (``grid``, a PNG; the label attacks pass their
    ``metrics.md``); the summary holds the scores. Offline unless W&B's own switches (as for ``fit``: ``WANDB_MODE``,
    ``wandb online``) say otherwise, or ``offline`` says why it cannot be online. W&B's own messages go to
    ``wandb/messages.log`` there, not the terminal. Returns where the run is, for the result line (``W&B offline run
    … (upload: wandb sync …)``)."""
    import wandb

    from lightning_sfl.process.streams import output_to
    from lightning_sfl.run_folder import shown_path
    from lightning_sfl.wandb.process import MESSAGES, wandb_switch

    mode = "offline" if offline else (wandb_switch() or "offline")
    (grid.parent / "wandb").mkdir(exist_ok=True)
    with output_to(grid.parent / "wandb" / MESSAGES):
        kind, where = _log_run(wandb, project, metrics, history, grid, trained_by, mode)
    if kind == "offline":
        return f"W&B offline run {shown_path(where)} (upload: wandb sync {shown_path(where)})"
    return f"W&B run {where}" if where else ""  # (WANDB_MODE=disabled: no run, nothing to say)


def _log_run(wandb, project, metrics, history, grid, trained_by, mode: str) -> tuple[str, str]:
    """:func:`log_to_wandb`'s run, in ``mode``; returns :func:`~lightning_sfl.wandb.online.where_logged`."""
    from lightning_sfl.wandb.online import where_logged

    scores = ("mse", "ssim", "psnr", "best_val_mse", "best_epoch", "clone_accuracy", "final_activation_mse")
    scores += LABEL_SCORES
    config = {k: v for k, v in metrics.items() if k not in scores}
    run = wandb.init(
        project=project,
        dir=str(grid.parent),
        mode=mode,
        job_type="attack",
        name=f"{metrics['attack']}-{metrics['method']}",
        tags=["attack", metrics["attack"], metrics["method"]],
        config={**config, "trained_by_run": trained_by},
    )
    try:
        if history:
            step, *curves = history[0]  # attack/epoch (inversion) or attack/outer (unsplit), then the curves
            run.define_metric(step)
            for key in curves:
                run.define_metric(key, step_metric=step)
        for row in history:
            run.log(row)
        logged = ("mse", "ssim", "psnr", "best_epoch", "clone_accuracy", *LABEL_SCORES)
        scores = {f"attack/{k}": metrics[k] for k in logged if k in metrics}
        if grid.suffix == ".png":  # the inversion attacks' picture; the label attacks have none
            caption = f"{metrics['method']}: test images (top) and the attacker's reconstructions (bottom)"
            scores["attack/reconstructions"] = wandb.Image(str(grid), caption=caption)
        run.log(scores)
        run.summary.update(scores)
        where = where_logged(run)
    finally:
        run.finish()
    return where


def grid_indices(labels, n: int):
    """The ``n`` test images the figure shows: each class's first image in class order, then each class's second, and
    so on (a test split stored class by class would otherwise show one class only).

    >>> import torch
    >>> grid_indices(torch.tensor([0, 0, 0, 1, 1, 2]), 5).tolist()
    [0, 3, 5, 1, 4]
    """
    import torch

    labels = torch.as_tensor(labels).cpu()
    rank = torch.zeros_like(labels)  # how many earlier images share the image's class
    for c in labels.unique():
        where = (labels == c).nonzero().squeeze(1)
        rank[where] = torch.arange(len(where))
    order = sorted(range(len(labels)), key=lambda i: (int(rank[i]), int(labels[i])))
    return torch.tensor(order[:n], dtype=torch.long)


def save_grid(originals, reconstructions, path: Path, title: str = "") -> list[str]:
    """Originals ``[n, C, H, W]`` in ``[0, 1]`` (top row, labelled "original") over the attacker's reconstructions
    (bottom row, labelled "reconstruction", each with its own SSIM and PSNR beneath), ``title`` above, as a PNG of
    about 1.1 inches per image at 100 dpi. Returns the texts drawn: the title, the row labels, the captions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lightning_sfl.privacy.metrics import psnr_per_image, ssim_per_image

    ssim, psnr = ssim_per_image(reconstructions, originals), psnr_per_image(reconstructions, originals)
    n = len(originals)
    fig, axes = plt.subplots(2, n, figsize=(max(4.0, 1.1 * n), 3.0), squeeze=False, dpi=100)
    for row, (images, label) in enumerate(((originals, "original"), (reconstructions, "reconstruction"))):
        for i in range(n):
            ax = axes[row][i]
            image = images[i].clamp(0, 1).permute(1, 2, 0).numpy()
            ax.imshow(image[..., 0] if image.shape[-1] == 1 else image, cmap="gray", vmin=0, vmax=1)
            ax.set_xticks([]), ax.set_yticks([])
            if row == 1:
                ax.set_xlabel(f"SSIM {float(ssim[i]):.2f}\n{float(psnr[i]):.1f} dB", fontsize=7)
        axes[row][0].set_ylabel(label, fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    texts = [title, *(axes[r][0].get_ylabel() for r in range(2)), *(ax.get_xlabel() for ax in axes[1])]
    plt.close(fig)
    return texts
