"""Draw what one run logs: the figure in the README, from a real SCALA run on digits.

Run from the repository root (takes about half a minute on a laptop CPU)::

    python docs/figures/make_run_figure.py            # writes docs/figures/digits_run.png

It trains ``configs/digits/scala.yaml`` with the default loggers (W&B offline + CSV) into a temporary folder,
then reads the values back from W&B's own offline run file (``lightning_sfl.wandb.offline``) and plots test
accuracy against rounds, simulated wall-clock time and cumulative traffic, the final per-class accuracy, the
gradient dissimilarity of the client and server halves, and the partition heatmap.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "docs" / "figures" / "digits_run.png"


def main() -> None:
    from lightning_sfl.cli import main as cli_main
    from lightning_sfl.wandb.offline import read_offline_run

    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        os.environ.setdefault("WANDB_MODE", "offline")
        cli_main(
            [
                "fit",
                "--config",
                str(REPO / "configs/digits/scala.yaml"),
                "--dissimilarity.every_n_rounds=5",
                "--trainer.enable_progress_bar=false",
            ]
        )
        import wandb

        wandb.finish()  # flush the offline run file before reading it back
        run = read_offline_run(Path(tmp) / "runs")
        rows = run.history

        def series(key: str, x: str = "round") -> tuple[list[float], list[float]]:
            pts = [(r[x], r[key]) for r in rows if key in r and x in r and r[key] is not None]
            return [p[0] for p in pts], [p[1] for p in pts]

        acc_by_round = dict(zip(*series("test/acc")))
        elapsed = dict(zip(*series("clock/elapsed_seconds")))
        traffic = dict(zip(*series("comm/cumulative_bytes")))
        rounds = sorted(acc_by_round)
        heatmap = next(Path(tmp).rglob("partition_heatmap.png"))

        fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
        ax = axes[0, 0]
        ax.plot(rounds, [acc_by_round[r] for r in rounds])
        ax.set(xlabel="global round", ylabel="test accuracy", title="test/acc by round")
        ax = axes[0, 1]
        common = [r for r in rounds if r in elapsed]
        ax.plot([elapsed[r] for r in common], [acc_by_round[r] for r in common])
        ax.set(xlabel="simulated time (s): clock/elapsed_seconds", ylabel="test accuracy", title="accuracy vs time")
        ax = axes[0, 2]
        common = [r for r in rounds if r in traffic]
        ax.plot([traffic[r] / 1e6 for r in common], [acc_by_round[r] for r in common])
        ax.set(
            xlabel="cumulative traffic (MB): comm/cumulative_bytes", ylabel="test accuracy", title="accuracy vs bytes"
        )
        ax = axes[1, 0]
        last = max(r["round"] for r in rows if "test/acc_class_0" in r)
        final = next(r for r in rows if r.get("round") == last and "test/acc_class_0" in r)
        classes = sorted(int(k.rsplit("_", 1)[1]) for k in final if k.startswith("test/acc_class_"))
        ax.bar(classes, [final[f"test/acc_class_{c}"] for c in classes])
        ax.set(
            xlabel="class",
            ylabel="test accuracy",
            title=f"per-class accuracy, round {int(last)}",
            ylim=(0, 1.05),
            xticks=classes,
        )
        ax = axes[1, 1]
        for key in ("dissimilarity/client_half", "dissimilarity/server_half"):
            xs, ys = series(key, "dissimilarity/round")
            ax.plot(xs, ys, marker="o", label=key.split("/")[1])
        ax.set(xlabel="global round", ylabel="Σ_k p_k ‖∇F_k − ∇F‖²", title="gradient dissimilarity", yscale="log")
        ax.legend()
        ax = axes[1, 2]
        ax.imshow(plt.imread(heatmap))
        ax.axis("off")
        ax.set_title("partition/heatmap (clients × classes)")
        fig.suptitle("SCALA on digits (configs/digits/scala.yaml): values read back from the W&B offline run")
        fig.tight_layout()
        OUT.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(OUT, dpi=90)
    print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    sys.exit(main())
