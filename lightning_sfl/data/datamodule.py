"""``FederatedDataModule``: skewed client shards, and the executor of the federation's schedule.

The data module knows the clients (shards, ``|D_k|``, label counts and distributions): it hands them over once, as
:class:`~lightning_sfl.loop.ClientStats` (``client_stats``), to the fit's :class:`~lightning_sfl.loop.Federation`,
which hands it its schedule back (:meth:`FederatedDataModule.federate`). At the start of every round (one training
epoch) it asks that schedule for the round's typed :class:`~lightning_sfl.loop.Step` list and yields them one by one,
each filled with its data::

    x [B, C, H, W], y [B], owner [B] (0..S-1, the row's client in ``clients``), local_sizes [S] (rows here),
    label_counts [N] (labels of the whole step)

next to what the schedule planned (kind, round, index, round_end, clients [S], sizes B_k [S], rows, slots, time).
The schedule's state (selection history, clocks, adaptive counts) is checkpointed with the federation.

Under DDP (``--trainer.strategy ddp --trainer.devices N``) every process plans the same round and keeps every
N-th row of each client's block (:func:`shard_step`); ``sizes`` and ``label_counts`` stay global so that losses
and label distributions are those of the one-process run.

All data stays in one tensor per split; a client's shard is an index tensor. The validation and test loaders both
iterate the test split (the papers report test accuracy after every round).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path

import lightning as L
import torch
from typing_extensions import override

from lightning_sfl import trainer_view
from lightning_sfl.class_paths import NAMED, recorded
from lightning_sfl.data.datasets import DATASETS, DatasetSplits, load_dataset
from lightning_sfl.data.partition import PARTITIONS, labelled_split, partition_rows, split_rows
from lightning_sfl.data.partition import label_counts as count_labels
from lightning_sfl.data.source import (
    check_source_options,
    dataset_label,
    dataset_record,
    load_source,
    named_records,
)  # fmt: skip
from lightning_sfl.errors import ConfigError, seed_number
from lightning_sfl.loop.sampling import clients_per_round
from lightning_sfl.loop.step import ClientStats, Step


def shard_step(step: Step, rank: int, world: int) -> Step:
    """The rows of ``step`` that process ``rank`` of ``world`` trains on: every ``world``-th row of every client's
    block, starting at ``rank``. ``sizes`` (B_k) and ``label_counts`` stay global (losses are normalised by
    them); ``local_sizes`` counts this process's rows per client."""
    blocks = step.sizes.tolist() if len(step.clients) else [len(step.rows)]
    pos = torch.cat([torch.arange(int(b)) for b in blocks]) if blocks else torch.zeros(0, dtype=torch.long)
    keep = pos % world == rank
    owner = None if step.owner is None else step.owner[keep]
    local = None if owner is None else torch.bincount(owner, minlength=len(step.sizes))
    y = None if step.y is None else step.y[keep]  # unlabelled steps carry no labels
    return step.replace(x=step.x[keep], y=y, owner=owner, local_sizes=local, local_rows=step.rows[keep])


class _RoundStream:
    """Yields the steps of the trainer's current round (planned when the round starts, in this process: its length
    is exact). A plain iterable, not a DataLoader over an IterableDataset: no worker could plan a round faster."""

    def __init__(self, dm: FederatedDataModule) -> None:
        self.dm = dm

    def __iter__(self) -> Iterator[Step]:
        round_idx = trainer_view.next_round(self.dm.trainer)
        rank, world = trainer_view.rank_and_world(self.dm.trainer)
        for step in self.dm.plan(round_idx):
            yield step if world == 1 else shard_step(step, rank, world)

    def __len__(self) -> int:
        steps = self.dm.schedule.steps_per_round
        if steps is None:  # rounds of variable length: Lightning reads the end of the epoch from the stream
            raise TypeError("rounds of this schedule have no fixed number of steps")
        return steps


class _TestBatches:
    """The test split in batches of ``batch_size`` rows ``(x [b, ...], y [b])``, sliced from the tensors in memory
    (no per-row indexing and stacking). Under DDP each process takes a contiguous block of rows, none twice and none
    padded, so the accuracy synced across processes counts every test row once. Like ``_RoundStream``, not a
    DataLoader: the data are in memory and there is no loading for worker processes to share."""

    def __init__(self, dm: FederatedDataModule, batch_size: int) -> None:
        self.dm, self.batch_size = dm, batch_size

    def _rows(self) -> range:
        rank, world = trainer_view.rank_and_world(self.dm.trainer)
        n = len(self.dm.splits.test_y)
        return range(n * rank // world, n * (rank + 1) // world)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        rows, x, y = self._rows(), self.dm.splits.test_x, self.dm.splits.test_y
        for start in range(rows.start, rows.stop, self.batch_size):
            stop = min(start + self.batch_size, rows.stop)
            yield x[start:stop], y[start:stop]

    def __len__(self) -> int:
        return -(-len(self._rows()) // self.batch_size)


class FederatedDataModule(L.LightningDataModule):
    """Client shards of one dataset under label skew.

    Args:
        dataset: one of ``digits, synthetic, mnist5k, cifar10, cifar100, fashion_mnist, svhn, cinic10, imagenette,
            leaf_synthetic`` (FedProx's Synthetic(λ, µ), drawn for ``num_clients`` clients with the seed); or any torch
            ``Dataset`` of ``(x, y)`` by class path with init args (``--data.dataset torchvision.datasets.ImageFolder
            --data.dataset.root images``) or, from Python, as an object: read once into memory (PIL images as
            ``uint8``), cached in ``root`` for the next run (:mod:`~lightning_sfl.data.source`).
        test_dataset: the test split of a ``dataset`` given as a class path (same form); without it, ``test_fraction``
            of its rows are held out.
        test_fraction: the fraction of rows held out as the test split, stratified by label and drawn with the seed,
            of a dataset without a test split of its own (``digits``, ``mnist5k``, ``synthetic``, a class path without
            ``test_dataset``).
        root: folder holding the dataset files.
        download: let torchvision download missing files (cifar10, cifar100, fashion_mnist, svhn).
        num_clients: ``K``, the number of clients.
        partition: ``iid``, ``quantity`` (α), ``dirichlet`` (β), ``shards``, or ``natural``: the dataset's own
            clients (``leaf_synthetic``).
        alpha: ``α``, classes per client for ``quantity``.
        beta: ``β``, Dirichlet concentration for ``dirichlet``.
        shards_per_client: shards per client for ``shards``.
        participation: ``ρ`` in (0, 1], fraction of clients selected per round.
        batch_size: ``B``, rows per local iteration summed over the selected clients.
        seed: seeds the partition and the per-round client and minibatch draws.
        test_batch_size: rows per evaluation batch.
        image_size: side length images are resized to (cinic10, imagenette).
        labelled_per_class: ``0`` (default): every training row goes to the clients. ``> 0``: that many rows of each
            class form a labelled set held by the server (semi-supervised methods, e.g. Semi-SFL's ``D_l``), drawn
            with the seed and disjoint from the clients, whose shards partition the rest.
        leaf_lambda: ``λ`` of Synthetic(λ, µ) (``leaf_synthetic``): the spread of the clients' models.
        leaf_mu: ``µ`` of Synthetic(λ, µ): the spread of the clients' input means.
        leaf_size_log_mean: the clients' sizes of ``leaf_synthetic``, ``⌊LogNormal(m, s)⌋ + 50`` rows (train and test):
            ``m``, the mean of their logarithm; FedProx's 4 by default (about 450 rows a client on average, heavy
            tailed). Smaller keeps tens of thousands of clients in memory: ``0`` gives about 57 (see
            ``configs/leaf_synthetic/fedavg_10k.yaml``).
        leaf_size_log_std: ``s``, the standard deviation of their logarithm (FedProx's 2).
        binary_class: ``None`` (default): the dataset's own labels. A class ``c``: the task becomes one class against
            the rest, label 1 for ``c`` and 0 for every other class (2 classes, imbalanced: the binary tasks of Li et
            al.'s label-leakage attacks, ICLR 2022); the partition is made on these labels.
    """

    def __init__(
        self,
        dataset: torch.utils.data.Dataset | str = "digits",
        root: str = "data",
        download: bool = False,
        num_clients: int = 20,
        partition: str = "quantity",
        alpha: int = 2,
        beta: float = 0.5,
        shards_per_client: int = 2,
        participation: float = 0.25,
        batch_size: int = 64,
        seed: int = 0,
        test_batch_size: int = 1024,
        image_size: int = 32,
        labelled_per_class: int = 0,
        leaf_lambda: float = 0.0,
        leaf_mu: float = 0.0,
        leaf_size_log_mean: float = 4.0,
        leaf_size_log_std: float = 2.0,
        binary_class: int | None = None,
        test_dataset: torch.utils.data.Dataset | str | None = None,
        test_fraction: float = 0.2,
    ) -> None:
        super().__init__()
        built_in = isinstance(dataset, str) and dataset in DATASETS
        named = isinstance(dataset, str) and dataset in NAMED["dataset"] and not built_in  # (an installed plugin's)
        if isinstance(dataset, str) and not (built_in or named) and "." not in dataset:
            names = ", ".join([*DATASETS, *NAMED["dataset"]])
            raise ConfigError(f"dataset={dataset!r} is not one of: {names}, nor a class path")
        if named and test_dataset is not None:
            raise ConfigError(f"test_dataset: dataset={dataset!r} (a plugin's) gives its own test split")
        check_source_options(built_in, dataset, test_dataset, test_fraction, download, image_size)
        if partition not in PARTITIONS:
            raise ConfigError(f"partition={partition!r} is not one of: {', '.join(PARTITIONS)}")
        if num_clients < 1:
            raise ConfigError(f"num_clients={num_clients} must be >= 1")
        if not 0 < participation <= 1:
            raise ConfigError(f"participation={participation} must be in (0, 1]")
        if batch_size < clients_per_round(num_clients, participation):
            raise ConfigError(
                f"batch_size={batch_size} is smaller than the {clients_per_round(num_clients, participation)} "
                "clients per round; each selected client needs at least one row"
            )
        if not beta > 0:
            raise ConfigError(f"beta={beta} must be > 0")
        if alpha < 1:
            raise ConfigError(f"alpha={alpha} must be >= 1 (classes per client)")
        if shards_per_client < 1:
            raise ConfigError(f"shards_per_client={shards_per_client} must be >= 1")
        if int(labelled_per_class) != labelled_per_class or labelled_per_class < 0:
            raise ConfigError(f"labelled_per_class={labelled_per_class!r} must be a whole number >= 0")
        if test_batch_size < 1:
            raise ConfigError(f"test_batch_size={test_batch_size} must be >= 1")
        seed_number("seed", seed)
        if int(image_size) != image_size or image_size < 1:
            raise ConfigError(f"image_size={image_size!r} must be a whole number of pixels >= 1")
        if (partition == "natural") != (dataset == "leaf_synthetic"):
            raise ConfigError(
                f"partition={partition!r} with dataset={dataset!r}: partition='natural' (the dataset's own clients) "
                "goes with dataset='leaf_synthetic', whose rows are generated client by client"
            )
        if partition == "natural" and labelled_per_class:
            raise ConfigError("labelled_per_class needs a partition of the training rows, not partition='natural'")
        if leaf_lambda < 0 or leaf_mu < 0:
            raise ConfigError(f"leaf_lambda={leaf_lambda}, leaf_mu={leaf_mu} must be >= 0 (standard deviations)")
        if not leaf_size_log_std >= 0:
            raise ConfigError(f"leaf_size_log_std={leaf_size_log_std} must be >= 0 (a standard deviation)")
        if not -20 <= leaf_size_log_mean <= 20:
            raise ConfigError(f"leaf_size_log_mean={leaf_size_log_mean} must be in [-20, 20] (the log of a size)")
        whole = not isinstance(binary_class, bool) and isinstance(binary_class, int) and binary_class >= 0
        if binary_class is not None and not whole:
            raise ConfigError(f"binary_class={binary_class!r} must be a class of the dataset (a number >= 0) or null")
        self.save_hyperparameters()
        base, given = torch.utils.data.Dataset, self.hparams  # (the parser's record of a class path, if it built one)
        self._source = None if built_in else recorded(dataset, given.get("dataset"), base)
        self._test_source = None if test_dataset is None else recorded(test_dataset, given.get("test_dataset"), base)
        if named:  # (recorded by its name: the run's config.yaml names the plugin's dataset as the user did)
            self._source, self._test_source = named_records(dataset, root)
            if self._test_source is not None and test_fraction != 0.2:
                raise ConfigError(
                    f"test_fraction={test_fraction} changes nothing for dataset={dataset!r}, which has a test split"
                )
        self.hparams["dataset"] = dataset if built_in or named else dataset_record(self._source)
        if test_dataset is not None:
            self.hparams["test_dataset"] = dataset_record(self._test_source)
        self.test_fraction = float(test_fraction)
        self.dataset = dataset if built_in or named else dataset_label(self._source)  # (a name: the run's, the plots')
        self.root, self.download = Path(root), download
        self.num_clients, self.partition, self.alpha, self.beta = num_clients, partition, alpha, beta
        self.shards_per_client, self.participation, self.batch_size = shards_per_client, participation, batch_size
        self.seed, self.test_batch_size, self.image_size = seed, test_batch_size, image_size
        self.labelled_per_class = int(labelled_per_class)
        self.leaf_lambda, self.leaf_mu = float(leaf_lambda), float(leaf_mu)
        self.leaf_size_log_mean, self.leaf_size_log_std = float(leaf_size_log_mean), float(leaf_size_log_std)
        self.binary_class = None if binary_class is None else int(binary_class)
        self.federation = None  # handed over when a fit starts (federate)

    # ----------------------------------------------------------------- data and shards (loaded on first use)
    @cached_property
    def splits(self) -> DatasetSplits:
        """The dataset's splits (loaded on first use); with ``binary_class``, one class against the rest."""
        splits = self._dataset_splits()
        if self.binary_class is None:
            return splits
        if self.binary_class >= splits.num_classes:
            raise ConfigError(
                f"binary_class={self.binary_class} is not a class of {self.dataset} (0 to {splits.num_classes - 1})"
            )
        c = self.binary_class
        return dataclasses.replace(
            splits, train_y=(splits.train_y == c).long(), test_y=(splits.test_y == c).long(), num_classes=2
        )

    def _dataset_splits(self) -> DatasetSplits:
        if self._source is not None:
            return load_source(self._source, self._test_source, self.test_fraction, self.seed, self.root)
        return load_dataset(
            self.dataset,
            root=self.root,
            download=self.download,
            seed=self.seed,
            image_size=self.image_size,
            leaf_lambda=self.leaf_lambda,
            leaf_mu=self.leaf_mu,
            leaf_clients=self.num_clients,
            leaf_size_log_mean=self.leaf_size_log_mean,
            leaf_size_log_std=self.leaf_size_log_std,
            test_fraction=self.test_fraction,
        )

    @property
    def num_classes(self) -> int:
        return self.splits.num_classes

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return tuple(self.splits.input_shape)

    @cached_property
    def _labelled_and_rest(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        if not self.labelled_per_class:
            return None, None
        return labelled_split(self.splits.train_y, self.labelled_per_class, self.seed)

    @property
    def labelled_indices(self) -> torch.Tensor | None:
        """The server's labelled rows of the training split (``labelled_per_class`` per class), or ``None``."""
        return self._labelled_and_rest[0]

    @cached_property
    def _client_rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every client's rows of the training split in one tensor, client after client, ``[Σ |D_k|]``, and ``|D_k|``,
        ``[K]`` (the partition's own form: nothing here loops over the clients). A subclass that overrides
        :attr:`client_indices` has its shards here too (``docs/tutorials/add-a-dataset.md``)."""
        if type(self).client_indices is not FederatedDataModule.client_indices:  # a subclass's own shards
            parts = self.client_indices
            return torch.cat(parts), torch.tensor([len(p) for p in parts], dtype=torch.long)
        if self.partition == "natural":  # the dataset's own clients, as generated
            if self.splits.client_partition is not None:
                return self.splits.client_partition
            rows = self.splits.client_rows
            return torch.cat(rows), torch.tensor([len(r) for r in rows], dtype=torch.long)
        rest = self._labelled_and_rest[1]
        labels = self.splits.train_y if rest is None else self.splits.train_y[rest]
        rows, sizes = partition_rows(
            labels,
            self.partition,
            self.num_clients,
            alpha=self.alpha,
            beta=self.beta,
            shards_per_client=self.shards_per_client,
            seed=self.seed,
        )
        return (rows if rest is None else rest[rows]), sizes

    @cached_property
    def client_indices(self) -> list[torch.Tensor]:
        """Each client's rows of the training split, ``K × [|D_k|]`` (without the server's labelled rows): views of one
        index tensor."""
        if self.partition == "natural" and self.splits.client_partition is not None:
            return list(self.splits.client_rows)  # the dataset's own views of that tensor
        return split_rows(*self._client_rows)

    @cached_property
    def client_sizes(self) -> torch.Tensor:
        """``|D_k|``, ``[K]`` int64."""
        return self._client_rows[1]

    @cached_property
    def label_distribution(self) -> torch.Tensor:
        """``P_k(y)``, ``[K, N]`` float64, rows sum to one."""
        counts = self.label_counts.double()
        return counts / counts.sum(dim=1, keepdim=True)

    @cached_property
    def label_counts(self) -> torch.Tensor:
        """Samples of each class held by each client, ``[K, N]`` int64."""
        return count_labels(self.splits.train_y, *self._client_rows, self.num_classes)

    @property
    def clients_per_round(self) -> int:
        """``S = max(1, round(ρ·K))``."""
        return clients_per_round(self.num_clients, self.participation)

    @cached_property
    def client_stats(self) -> ClientStats:
        """What the method and its schedule get to know about the clients (built once)."""
        return ClientStats(
            sizes=self.client_sizes,
            label_counts=self.label_counts,
            label_distribution=self.label_distribution,
            shards=self.client_indices,
            clients_per_round=self.clients_per_round,
            batch_size=self.batch_size,
            seed=self.seed,
            labelled=self.labelled_indices,
        )

    # ----------------------------------------------------------------- the clients' data, for the federation
    @property
    def pixel_mean(self) -> tuple[float, ...]:
        """Per-channel mean the inputs are normalised with."""
        return tuple(self.splits.mean)

    @property
    def pixel_std(self) -> tuple[float, ...]:
        """Per-channel standard deviation the inputs are normalised with."""
        return tuple(self.splits.std)

    def train_labels(self, rows: torch.Tensor) -> torch.Tensor:
        """True labels ``[n]`` of training rows ``rows`` (also of unlabelled clients: for metrics only)."""
        return self.splits.train_y[rows.cpu()]

    def train_inputs(self, rows: torch.Tensor, device: torch.device | str) -> torch.Tensor:
        """Model inputs ``[n, C, H, W]`` of training rows ``rows``: normalised, in the trainer's precision, on
        ``device``."""
        return self.model_input(self.splits.train_x[rows.cpu()].to(device))

    @property
    def num_test(self) -> int:
        """Images in the test split."""
        return len(self.splits.test_x)

    def test_inputs(self, rows: torch.Tensor, device: torch.device | str) -> torch.Tensor:
        """Model inputs ``[n, C, H, W]`` of test rows ``rows`` (normalised, in the trainer's precision, on ``device``):
        what a server may hold as public data (FSHA)."""
        return self.model_input(self.splits.test_x[rows.cpu()].to(device))

    def describe(self) -> str:
        """One line naming the dataset and its partition (plot titles)."""
        knob = {"quantity": f"α={self.alpha}", "dirichlet": f"β={self.beta}"}.get(self.partition)
        if self.partition == "natural":
            knob = f"Synthetic(λ={self.leaf_lambda}, µ={self.leaf_mu})"
        if self.partition == "shards":
            knob = f"{self.shards_per_client} shards/client"
        head = f"{self.dataset}: {self.partition}" + (f" ({knob})" if knob else "")
        if self.binary_class is not None:
            head = f"{self.dataset} (class {self.binary_class} against the rest): " + head.split(": ", 1)[1]
        return ", ".join([head, f"K={self.num_clients}", f"ρ={self.participation}", f"seed={self.seed}"])

    # ----------------------------------------------------------------- executing the federation's schedule
    def federate(self, federation) -> None:
        """Receive the fit's federation: its schedule plans the rounds this data module executes."""
        self.federation = federation

    @property
    def schedule(self):
        """The schedule of the federation this data module was handed (:meth:`federate`)."""
        federation = getattr(self, "federation", None)
        if federation is None:
            raise RuntimeError(
                "FederatedDataModule runs a federation's schedule: trainer.fit(method, datamodule) builds one "
                "(or Federation.build(method, datamodule))"
            )
        return federation.schedule

    def plan(self, round_idx: int, schedule=None) -> list[Step]:
        """The steps of round ``round_idx``, filled with their data (one process). ``schedule``: default the
        federation's. Planning moves the schedule's state to the end of the round."""
        steps = (schedule or self.schedule).plan_round(round_idx, self.client_stats)
        return [self.materialize(step) for step in steps]

    def materialize(self, step: Step) -> Step:
        """``step`` with its data: inputs and labels of its rows, each row's owner, and label counts (no labels for a
        step that does not carry them, e.g. :class:`~lightning_sfl.loop.phases.UnlabelledStep`)."""
        y = self.splits.train_y[step.rows]
        owner = None
        if len(step.clients):
            if int(step.sizes.sum()) != len(step.rows):
                raise ValueError(f"step sizes {step.sizes.tolist()} do not add up to its {len(step.rows)} rows")
            owner = torch.repeat_interleave(torch.arange(len(step.clients)), step.sizes)
        if not getattr(step, "carries_labels", True):  # unlabelled client data: the labels stay here
            return step.replace(x=self.splits.train_x[step.rows], owner=owner, local_sizes=step.sizes)
        return step.replace(
            x=self.splits.train_x[step.rows],
            y=y,
            owner=owner,
            local_sizes=step.sizes,
            label_counts=torch.bincount(y, minlength=self.num_classes),
        )

    # ----------------------------------------------------------------- Lightning hooks
    @override
    def setup(self, stage: str) -> None:
        self.check()

    def check(self) -> None:
        """Load the data and build the partition: a missing dataset, an impossible partition (α above the number of
        classes, more clients than samples) or a batch larger than all the clients' rows fails here, before a run
        creates anything."""
        rows = int(self.client_sizes.sum())
        if self.batch_size > rows:
            raise ConfigError(
                f"batch_size={self.batch_size} is larger than the {rows} training rows of all {self.num_clients} "
                "clients together (B is the rows of one local iteration, summed over the selected clients)"
            )

    @override
    def train_dataloader(self) -> _RoundStream:
        """The steps of each round, planned in this process (an iterable, not a DataLoader: see ``_RoundStream``;
        Lightning would otherwise suggest worker processes for it)."""
        return _RoundStream(self)

    @override
    def val_dataloader(self) -> _TestBatches:
        return _TestBatches(self, self.test_batch_size)

    @override
    def test_dataloader(self) -> _TestBatches:
        return _TestBatches(self, self.test_batch_size)

    @override
    def transfer_batch_to_device(self, batch, device: torch.device, dataloader_idx: int):
        if isinstance(batch, Step):
            return batch.to(device)
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    @override
    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        """Pixels travel as stored (often uint8) and are normalised on the device, in the trainer's precision
        (e.g. float64 with ``--trainer.precision 64-true``). Training batches are steps, evaluation batches
        ``{"x", "y"}``."""
        if isinstance(batch, Step):
            return batch.replace(x=self.model_input(batch.x))
        if isinstance(batch, torch.Tensor):  # the model's example input (model summary): normalised, not yet in
            return self._in_precision(batch)  # the trainer's precision (float64 with 64-true)
        if isinstance(batch, (list, tuple)):
            batch = {"x": batch[0], "y": batch[1]}
        batch["x"] = self.model_input(batch["x"])
        return batch

    def model_input(self, x: torch.Tensor) -> torch.Tensor:
        """Stored pixels → normalised floats in the trainer's input precision (what the model consumes)."""
        return self._in_precision(self.splits.to_float(x))

    def _in_precision(self, x: torch.Tensor) -> torch.Tensor:
        return trainer_view.in_input_precision(self.trainer, x)
