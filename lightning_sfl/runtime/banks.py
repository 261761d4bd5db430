"""The clients' copies of a method's models (its banks, :mod:`~lightning_sfl.runtime.client_bank`), as functions
the base's hooks call: built when a fit starts, downloaded into when clients start, averaged when they upload, and
stepped only in the slots of a step's clients. Which models get copies is the method's shape's
(:mod:`~lightning_sfl.runtime.shape`: the client models, the tail, the server copies). Bytes go to the federation's
ledger as ``client_half`` (or, without a server half, ``full_model``); the uploads are
:mod:`~lightning_sfl.runtime.exchange`'s."""

from __future__ import annotations

from contextlib import ExitStack

import torch
from torch import nn

from lightning_sfl import trainer_view
from lightning_sfl.runtime.client_bank import ClientBank, Slots
from lightning_sfl.system.comm import module_bytes

__all__ = [
    "aggregate_server", "all_banks", "build_banks", "check_bank_memory", "download", "step_slots", "traffic_kind",
]  # fmt: skip


def traffic_kind(method) -> str:
    """What ``method``'s clients download and upload each round: ``client_half`` or (plain FL) ``full_model``."""
    return method.shape.traffic_kind


def build_banks(method, num_slots: int, persistent: bool) -> None:
    """``num_slots`` copies of each of ``method``'s client models (its shape's ``client_models``, ``make_bank``) and,
    with server copies, of its server half; ``persistent``: the slots live across rounds (checkpointed). Copies that
    cannot fit in the memory of the machine (or of the GPU) are refused before they are made, with the estimate."""
    models = method.shape.client_models(method.client_models())
    server = method.shape.server_template(method.server.net)
    copied = [*models.values(), *([] if server is None else [server])]
    check_bank_memory(copied, num_slots, trainer_view.device(method.trainer))
    for name, module in models.items():
        method.client_banks[name] = method.make_bank(module, num_slots)
        method.client_banks[name].checkpointed = persistent
    if server is not None:
        method.server_bank = method.make_bank(server, num_slots)
        method.server_bank.checkpointed = persistent


def check_bank_memory(modules: list[nn.Module], num_slots: int, device: torch.device | None) -> None:
    """A one-line :class:`~lightning_sfl.errors.ConfigError` when ``num_slots`` copies of ``modules`` — each copy's
    parameters, their gradients and an optimiser's momentum, and its buffers — need more than the memory of ``device``
    (the machine's for the CPU; the GPU's free memory for CUDA).

    >>> check_bank_memory([nn.Linear(1000, 1000)], num_slots=10**6, device=torch.device("cpu"))
    Traceback (most recent call last):
    ...
    lightning_sfl.errors.ConfigError: the clients' copies (1,000,000 slots of 1,001,000 parameters): 10.9 TiB needed; \
this machine has ... of memory: lower --data.participation or --data.num_clients
    """
    from lightning_sfl.errors import check_memory

    per_copy = sum(3 * p.numel() * p.element_size() for m in modules for p in m.parameters())
    per_copy += sum(b.numel() * b.element_size() for m in modules for b in m.buffers())
    parameters = sum(p.numel() for m in modules for p in m.parameters())
    what = f"the clients' copies ({num_slots:,} slots of {parameters:,} parameters)"
    available = None
    if device is not None and device.type == "cuda":
        available = torch.cuda.mem_get_info(device)[0]
        what = f"{what} on {device}"
    check_memory(what, num_slots * per_copy, "--data.participation or --data.num_clients", available)


def all_banks(method) -> list[ClientBank]:
    """Every per-client copy set of ``method`` (client banks, then server copies)."""
    server = [method.server_bank] if method.server_bank is not None else []
    return [*method.client_banks.values(), *server]


def download(method, slots: Slots, models: dict[str, nn.Module], optimizer: torch.optim.Optimizer) -> None:
    """The ``slots`` take ``models`` (bank name -> global module; bytes counted down) and a fresh ``optimizer`` state;
    per-client server copies take the global server half."""
    for name, module in models.items():
        method.client_banks[name].reset(module, slots)
        method.client_banks[name].reset_optimizer_state(optimizer, slots)
        method.ledger.add("down", traffic_kind(method), module_bytes(module), slots)
    if method.server_bank is not None:
        method.server_bank.reset(method.server.net, slots)
        method.server_bank.reset_optimizer_state(optimizer, slots)


def aggregate_server(method, weights: torch.Tensor, slots: Slots) -> None:
    """With server copies, the server half ← the ``weights``-weighted average of its copies in ``slots`` (eq. 10 on
    the server side; nothing crosses the network)."""
    if method.server_bank is not None:
        method.server_bank.aggregate_into(method.server.net, weights, slots)


def step_slots(method, opt, slots: Slots, count_step: bool) -> None:
    """One step of ``opt`` (Lightning's wrapper; ``count_step=False``: its raw optimiser, not counted as a
    ``global_step``) that moves only ``slots`` (``None``: all): every bank keeps the others' weights and momentum."""
    step = opt.step if count_step else opt.optimizer.step
    if slots is None:
        step()
        return
    with ExitStack() as keep:
        for bank in all_banks(method):
            keep.enter_context(bank.steps_only(opt.optimizer, slots))
        step()
