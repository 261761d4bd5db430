"""Command line: ``lightning-sfl fit|validate|test`` (LightningCLI).

Run the main job (SCALA on scikit-learn's bundled digits, offline)::

    lightning-sfl fit --config configs/digits/scala.yaml

Any setting can be overridden: ``--data.partition dirichlet --data.beta 0.1 --model.lr 0.05``. The algorithm
is chosen with ``--model SCALA`` (or ``model.class_path`` in a config); ``num_classes`` and ``input_shape``
of the model are filled in from the data module.
"""

from __future__ import annotations

import sys

import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningCLI

from lightning_sfl.algorithms import SplitFedAlgorithm
from lightning_sfl.callbacks import CommunicationBytes
from lightning_sfl.data import FederatedDataModule

TRAINER_DEFAULTS = {
    "max_epochs": 50,
    "default_root_dir": "runs",
    "log_every_n_steps": 1,
    "num_sanity_val_steps": 0,
}


class SFLCLI(LightningCLI):
    """LightningCLI with the algorithm as a subclass of :class:`SplitFedAlgorithm` and data-driven links."""

    def __init__(self, args=None, run: bool = True) -> None:
        super().__init__(
            model_class=SplitFedAlgorithm,
            subclass_mode_model=True,
            datamodule_class=FederatedDataModule,
            trainer_defaults=TRAINER_DEFAULTS,
            seed_everything_default=0,
            save_config_kwargs={"overwrite": True},
            auto_configure_optimizers=False,
            args=args,
            run=run,
        )

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument(
            "--torch_threads",
            type=int | None,
            default=None,
            help="torch.set_num_threads for this run (1 is fastest for small models on a shared CPU); null: default",
        )
        parser.link_arguments("data.num_classes", "model.init_args.num_classes", apply_on="instantiate")
        parser.link_arguments("data.input_shape", "model.init_args.input_shape", apply_on="instantiate")
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(CommunicationBytes, "comm")
        parser.set_defaults(
            {
                "model": {"class_path": "lightning_sfl.algorithms.SCALA"},
                "checkpoint.save_last": True,
                "trainer.logger": [
                    {
                        "class_path": "lightning.pytorch.loggers.WandbLogger",
                        "init_args": {"project": "lightning-sfl", "save_dir": "runs", "offline": True},
                    },
                    {
                        "class_path": "lightning.pytorch.loggers.CSVLogger",
                        "init_args": {"save_dir": "runs", "name": "csv"},
                    },
                ],
            }
        )

    def before_instantiate_classes(self) -> None:
        threads = self.config.get(self.subcommand, self.config).get("torch_threads")
        if threads is not None:
            if threads < 1:
                raise ValueError(f"torch_threads={threads} must be >= 1 (or null for torch's default)")
            torch.set_num_threads(threads)

    def after_fit(self) -> None:
        """Print the final test accuracy of the global model in one line."""
        if self.trainer.interrupted or not self.trainer.is_global_zero:
            return
        metrics = self.trainer.callback_metrics
        if "test/acc" not in metrics or int(metrics.get("round", -1)) != self.trainer.current_epoch:
            metrics = self.trainer.validate(self.model, datamodule=self.datamodule, verbose=False)[0]
        print(f"final test accuracy: {float(metrics['test/acc']):.4f} after {self.trainer.current_epoch} rounds")


def main(args=None) -> None:
    """Console-script entry point ``lightning-sfl`` (``fit``, ``validate``, ``test``, ``compare``)."""
    argv = sys.argv[1:] if args is None else list(args)
    if argv[:1] == ["compare"]:
        from lightning_sfl.compare import main as compare_main

        compare_main(argv[1:])
        return
    SFLCLI(args=args)


if __name__ == "__main__":
    main()
