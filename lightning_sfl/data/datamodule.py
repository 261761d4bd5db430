"""``FederatedDataModule``: skewed client shards and one batch per local iteration.

One training epoch is one global round. Its loader yields ``T`` batches (``T = local_iters``, set by the
algorithm), each holding the minibatches of every client selected for the round, concatenated client by
client::

    {"x": [B, C, H, W], "y": [B], "slot": [B] (0..S-1, the row's client slot),
     "clients": [S] (global client ids), "sizes": [S] (B_k, eq. 3), "local_sizes": [S] (rows here),
     "label_counts": [N] (labels of the whole concatenated batch), "round": []}

Under DDP (``--trainer.strategy ddp --trainer.devices N``) every process draws the same round and keeps every
N-th row of each client's minibatch (:func:`shard_batch`); ``sizes`` and ``label_counts`` stay global so that
losses and label distributions are those of the one-process run.

All data stays in one tensor per split; a client's shard is an index tensor. Clients and minibatches are
drawn from generators seeded by ``(seed, round)``, so a resumed run sees exactly the batches of an
uninterrupted one. The validation and test loaders both iterate the test split (the papers report test
accuracy after every round).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from lightning_sfl.data.datasets import DATASETS, DatasetSplits, load_dataset
from lightning_sfl.data.partition import PARTITIONS, label_distribution, partition
from lightning_sfl.data.sampling import client_batch_sizes, clients_per_round, minibatch_indices, round_generator
from lightning_sfl.data.selection import UniformSelection
from lightning_sfl.errors import ConfigError

# The round stream is produced in the main process (num_workers=0), so its length is exact.
warnings.filterwarnings("ignore", message=".*`IterableDataset` has `__len__` defined.*")


def shard_batch(batch: dict[str, torch.Tensor], rank: int, world: int) -> dict[str, torch.Tensor]:
    """The rows of ``batch`` that process ``rank`` of ``world`` trains on: every ``world``-th row of every client's
    block, starting at ``rank``. ``sizes`` (B_k) and ``label_counts`` stay global (losses are normalised by
    them); ``local_sizes`` counts this process's rows per client."""
    pos = torch.cat([torch.arange(int(b)) for b in batch["sizes"]])  # row position within its client's block
    keep = pos % world == rank
    out = dict(batch)
    for key in ("x", "y", "slot"):
        out[key] = batch[key][keep]
    out["local_sizes"] = torch.bincount(out["slot"], minlength=len(batch["sizes"]))
    return out


class _RoundStream(IterableDataset):
    """Yields the ``T`` batches of the trainer's current round."""

    def __init__(self, dm: FederatedDataModule) -> None:
        self.dm = dm

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        trainer = self.dm.trainer
        round_idx = trainer.current_epoch if trainer is not None else 0
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        for batch in self.dm.round_batches(round_idx):
            yield batch if world == 1 else shard_batch(batch, rank, world)

    def __len__(self) -> int:
        return self.dm.local_iters


class FederatedDataModule(L.LightningDataModule):
    """Client shards of one dataset under label skew.

    Args:
        dataset: one of ``digits, synthetic, cifar10, cifar100, fashion_mnist, svhn, cinic10, imagenette``.
        root: folder holding the dataset files.
        download: let torchvision download missing files (cifar10, cifar100, fashion_mnist, svhn).
        num_clients: ``K``, the number of clients.
        partition: ``iid``, ``quantity`` (α), ``dirichlet`` (β) or ``shards``.
        alpha: ``α``, classes per client for ``quantity``.
        beta: ``β``, Dirichlet concentration for ``dirichlet``.
        shards_per_client: shards per client for ``shards``.
        participation: ``ρ`` in (0, 1], fraction of clients selected per round.
        batch_size: ``B``, rows per local iteration summed over the selected clients.
        seed: seeds the partition and the per-round client and minibatch draws.
        test_batch_size: rows per evaluation batch.
        image_size: side length images are resized to (cinic10, imagenette).
    """

    def __init__(
        self,
        dataset: str = "digits",
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
    ) -> None:
        super().__init__()
        if dataset not in DATASETS:
            raise ConfigError(f"dataset={dataset!r} is not one of: {', '.join(DATASETS)}")
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
        if partition == "dirichlet" and not beta > 0:
            raise ConfigError(f"beta={beta} must be > 0")
        self.save_hyperparameters()
        self.dataset, self.root, self.download = dataset, Path(root), download
        self.num_clients, self.partition, self.alpha, self.beta = num_clients, partition, alpha, beta
        self.shards_per_client, self.participation, self.batch_size = shards_per_client, participation, batch_size
        self.seed, self.test_batch_size, self.image_size = seed, test_batch_size, image_size
        self.local_iters = 1
        self.selection = UniformSelection()

    # ----------------------------------------------------------------- data and shards (loaded on first use)
    @cached_property
    def splits(self) -> DatasetSplits:
        return load_dataset(
            self.dataset, root=self.root, download=self.download, seed=self.seed, image_size=self.image_size
        )

    @property
    def num_classes(self) -> int:
        return self.splits.num_classes

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return tuple(self.splits.input_shape)

    @cached_property
    def client_indices(self) -> list[torch.Tensor]:
        """Each client's rows of the training split, ``K × [|D_k|]``."""
        return partition(
            self.splits.train_y,
            self.partition,
            self.num_clients,
            alpha=self.alpha,
            beta=self.beta,
            shards_per_client=self.shards_per_client,
            seed=self.seed,
        )

    @cached_property
    def client_sizes(self) -> torch.Tensor:
        """``|D_k|``, ``[K]`` int64."""
        return torch.tensor([len(p) for p in self.client_indices], dtype=torch.long)

    @cached_property
    def label_distribution(self) -> torch.Tensor:
        """``P_k(y)``, ``[K, N]`` float64, rows sum to one."""
        return label_distribution(self.splits.train_y, self.client_indices, self.num_classes)

    @cached_property
    def label_counts(self) -> torch.Tensor:
        """Samples of each class held by each client, ``[K, N]`` int64."""
        return torch.stack(
            [torch.bincount(self.splits.train_y[p], minlength=self.num_classes) for p in self.client_indices]
        )

    @property
    def clients_per_round(self) -> int:
        """``S = max(1, round(ρ·K))``."""
        return clients_per_round(self.num_clients, self.participation)

    # ----------------------------------------------------------------- rounds
    def set_local_iters(self, local_iters: int) -> None:
        """Called by the algorithm: the number ``T`` of batches per round."""
        self.local_iters = int(local_iters)

    def set_selection(self, selection) -> None:
        """Called by the algorithm: the client-selection policy (see ``lightning_sfl.data.selection``)."""
        self.selection = selection

    def select_clients(self, round_idx: int) -> torch.Tensor:
        """``C^i``: the sorted ids of the clients of round ``round_idx``, ``[S]``."""
        g = round_generator(self.seed, round_idx)
        clients = self.selection(self.label_counts, self.clients_per_round, g, round_idx)
        return torch.as_tensor(clients, dtype=torch.long).sort().values

    def round_batches(self, round_idx: int) -> list[dict[str, torch.Tensor]]:
        """The ``T`` batches of round ``round_idx`` (deterministic in ``(seed, round_idx)``)."""
        clients = self.select_clients(round_idx)
        sizes = client_batch_sizes(self.client_sizes[clients], self.batch_size)
        g = round_generator(self.seed, round_idx, stream=1)
        rows = [minibatch_indices(self.client_indices[k], int(b), self.local_iters, g) for k, b in zip(clients, sizes)]
        slot = torch.repeat_interleave(torch.arange(len(clients)), sizes)
        batches = []
        for t in range(self.local_iters):
            idx = torch.cat([r[t] for r in rows])
            y = self.splits.train_y[idx]
            batches.append(
                {
                    "x": self.splits.train_x[idx],
                    "y": y,
                    "slot": slot,
                    "clients": clients,
                    "sizes": sizes,
                    "local_sizes": sizes,
                    "label_counts": torch.bincount(y, minlength=self.num_classes),
                    "round": torch.tensor(round_idx),
                }
            )
        return batches

    # ----------------------------------------------------------------- Lightning hooks
    def state_dict(self) -> dict:
        return {"selection": self.selection.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.selection.load_state_dict(state_dict.get("selection", {}))

    def setup(self, stage: str) -> None:
        _ = self.client_indices  # build the partition now: bad settings fail before training starts

    def train_dataloader(self) -> DataLoader:
        return DataLoader(_RoundStream(self), batch_size=None, num_workers=0)

    def _test_loader(self) -> DataLoader:
        ds = TensorDataset(self.splits.test_x, self.splits.test_y)
        return DataLoader(ds, batch_size=self.test_batch_size, shuffle=False, num_workers=0)

    def val_dataloader(self) -> DataLoader:
        return self._test_loader()

    def test_dataloader(self) -> DataLoader:
        return self._test_loader()

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        """Pixels travel as stored (often uint8) and are normalised on the device, in the trainer's precision
        (e.g. float64 with ``--trainer.precision 64-true``)."""
        if isinstance(batch, (list, tuple)):
            batch = {"x": batch[0], "y": batch[1]}
        batch["x"] = self.model_input(batch["x"])
        return batch

    def model_input(self, x: torch.Tensor) -> torch.Tensor:
        """Stored pixels → normalised floats in the trainer's input precision (what the model consumes)."""
        x = self.splits.to_float(x)
        return self.trainer.precision_plugin.convert_input(x) if self.trainer is not None else x
