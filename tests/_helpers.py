"""Small helpers shared by the tests (``tests/``, on ``sys.path`` because ``conftest.py`` lies there: the tests in
``unit/``, ``integration/`` and ``studies/`` import them by name)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import lightning as L
    import torch

#: The repository's folder (tests of every kind read configs, docs and scripts from it).
REPO = Path(__file__).resolve().parents[1]


def quiet_trainer(max_epochs: int = 1, **overrides) -> L.Trainer:
    """A Trainer with no logger, checkpoints, progress bar or model summary (override any of them)."""
    import lightning as L

    kwargs = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    return L.Trainer(max_epochs=max_epochs, **{**kwargs, **overrides})


def round_steps(dm, round_idx: int, local_iters: int = 1, selection=None) -> list:
    """The steps of synchronous round ``round_idx`` with their data, as a method with ``T = local_iters`` and
    ``selection`` (default uniform) receives them."""
    from lightning_sfl.loop import SyncRounds
    from lightning_sfl.loop.selection import UniformSelection

    return dm.plan(round_idx, SyncRounds(local_iters, selection or UniformSelection()))


def make_step(clients, sizes, **fields):
    """A ``"local"`` step of round 0 for calling a method's hooks directly (data fields given as keywords)."""
    import torch

    from lightning_sfl.loop import Step

    clients, sizes = torch.as_tensor(clients), torch.as_tensor(sizes)
    fields.setdefault("local_sizes", sizes)
    return Step("local", 0, 0, False, clients, sizes, torch.zeros(0, dtype=torch.long), **fields)


def small_digits():
    """The digits setting of the FL-baseline tests: 8 clients, α=2, participation 0.5, B=24, data seed 1."""
    from lightning_sfl.data import FederatedDataModule

    return FederatedDataModule(dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=24, seed=1)


def flat_params(module):
    """A module's parameters, detached and concatenated: ``[P]``."""
    import torch

    return torch.cat([p.detach().reshape(-1) for p in module.parameters()])


#: Constructor arguments the registry-driven tests give a method of the asynchronous family on top of their own: C = Q_s
#: = Q_c = 4 clients in flight (their default 10 exceeds the tests' 8 clients).
ASYNC_SMALL = {"concurrency": 4, "flush_every": 4, "aggregate_every": 4}


#: SCALA-PE's decoders warm up 2 passes over their client's shard instead of ResSFL's 30, in the tests whose subject is
#: not the warm-up (the same per-client loop; at 30 passes these were the slowest tests of the suite).
SHORT_WARMUP = {
    "defences": [
        {"class_path": "lightning_sfl.defences.Bottleneck", "init_args": {"channels": 8}},
        {"class_path": "lightning_sfl.defences.InversionRegulariser", "init_args": {"warmup_epochs": 2}},
    ]
}


def method_kwargs(name: str, **common) -> dict:
    """Extra constructor arguments of registered method ``name`` in the registry-driven tests, with ``common`` (what a
    test gives every method: ``local_iters``, ``lr``, ...), less the options the method has no use for and refuses
    (``unused_options``: FedBuff's ``flush_every``, supervised-only's clients' settings)."""
    from lightning_sfl.algorithms import REGISTRY

    kwargs = dict({"semi": SEMI_SMALL, "async": ASYNC_SMALL}.get(REGISTRY[name].family, {}), **common)
    if name == "semi_sfl":
        kwargs["queue_size"] = 16  # Semi-SFL's queue of teacher projections (eq. 5)
    unused = REGISTRY[name].cls.unused_options()
    return {k: v for k, v in kwargs.items() if k not in unused}


#: Data-module arguments the registry-driven tests add for the semi-supervised methods: a labelled server set of 3
#: images per class (the clients hold the rest, unlabelled).
SEMI_DATA = {"labelled_per_class": 3}
#: ... and constructor arguments of the semi-supervised family: small supervised and client batches, K_s = 2
#: supervised steps per round.
SEMI_SMALL = {"supervised_steps": 2, "labelled_batch_size": 8, "client_batch_size": 8}


def data_kwargs(name: str) -> dict:
    """Extra data-module arguments of registered method ``name`` in the registry-driven tests."""
    from lightning_sfl.algorithms import REGISTRY

    return dict(SEMI_DATA) if REGISTRY[name].family == "semi" else {}


def trained_checkpoint(cls, folder, rounds: int = 1, local_iters: int = 2, **kwargs):
    """``cls`` trained ``rounds`` rounds on :func:`small_digits` (seed 0, lr 0.05); the path of its last checkpoint in
    ``folder``."""
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint

    torch.manual_seed(0)
    model = cls(local_iters=local_iters, lr=0.05, **kwargs)
    trainer = quiet_trainer(
        rounds, enable_checkpointing=True, callbacks=[ModelCheckpoint(dirpath=folder, save_last=True)]
    )
    trainer.fit(model, small_digits())
    return folder / "last.ckpt"


def csv_rounds(folder) -> dict[int, dict[str, str]]:
    """The metrics of ``folder/csv/version_0/metrics.csv`` (a CSVLogger's), merged per epoch (empty cells left out)."""
    import csv

    rows: dict[int, dict[str, str]] = {}
    with open(folder / "csv" / "version_0" / "metrics.csv") as f:
        for row in csv.DictReader(f):
            rows.setdefault(int(row["epoch"]), {}).update({k: v for k, v in row.items() if v != ""})
    return rows


def reference_ssim(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Wang et al.'s SSIM per image, written out: Gaussian window 11, σ 1.5, borders reflect-padded, K1 0.01, K2 0.03,
    data range 1, averaged over channels and pixels."""
    import torch

    coords = torch.arange(11, dtype=torch.float64) - 5
    g = torch.exp(-(coords**2) / (2 * 1.5**2))
    g = g / g.sum()
    window = torch.outer(g, g)
    out = []
    for x, y in zip(a.double(), b.double()):
        maps = []
        for xc, yc in zip(x, y):
            xp = torch.nn.functional.pad(xc[None, None], (5, 5, 5, 5), mode="reflect")[0, 0]
            yp = torch.nn.functional.pad(yc[None, None], (5, 5, 5, 5), mode="reflect")[0, 0]
            h, w = xc.shape
            s = torch.empty(h, w, dtype=torch.float64)
            for i in range(h):
                for j in range(w):
                    px, py = xp[i : i + 11, j : j + 11], yp[i : i + 11, j : j + 11]
                    mx, my = (window * px).sum(), (window * py).sum()
                    vx = max((window * px * px).sum() - mx**2, 0.0)
                    vy = max((window * py * py).sum() - my**2, 0.0)
                    cxy = (window * px * py).sum() - mx * my
                    c1, c2 = 0.01**2, 0.03**2
                    s[i, j] = ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx**2 + my**2 + c1) * (vx + vy + c2))
            maps.append(s)
        out.append(torch.stack(maps).mean())
    return torch.stack(out)


def extended_params(names, extended) -> list:
    """``names`` as a test's parameters, those in ``extended`` marked ``extended`` (left out of CI; ``pytest -m
    extended`` runs them): a name not listed, such as a method added since, runs in CI."""
    import pytest

    unknown = set(extended) - set(names)
    assert not unknown, f"not parameters of the test: {sorted(unknown)}"
    return [pytest.param(n, marks=pytest.mark.extended) if n in extended else n for n in names]
