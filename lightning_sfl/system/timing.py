"""System models: how long the clients take. One object answers every timing question of a run: the synchronous
round's duration (the clock), every client's seconds per event (the asynchronous clock of GAS, FedBuff and CA²FL),
and which cut point a sliding split gives each client (S²FL). :class:`~lightning_sfl.system.wireless.WirelessCell`
(SCALA, GAS) and :class:`~lightning_sfl.system.devices.EdgeDevices` (Semi-SFL's heterogeneous devices and
fluctuating links) are built; another system model subclasses :class:`SystemModel`.

A system model is bound to a federation once per fit (:meth:`SystemModel.bind`): the clients (``K``, the data
seed) and :class:`ClientCosts`, what the method's client-side model costs per sample (measured when the system model
asks). Its state (placements, speeds) is checkpointed with the federation.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import torch
from torch import nn
from typing_extensions import override

from lightning_sfl.errors import ConfigError
from lightning_sfl.system.comm import module_bytes
from lightning_sfl.system.flops import CutCost, cut_costs, forward_flops_per_sample, training_flops_per_sample

__all__ = ["LABEL_BYTES", "ClientCosts", "ClientTimes", "RoundTraffic", "SystemModel", "checked_redraw", "draws_digest"]

LABEL_BYTES = 8  # one int64 label per row


def draws_digest(*draws: torch.Tensor | None) -> str | None:
    """SHA-1 of the bytes of a system model's per-client draws (``[K]`` each; ``None``: not drawn yet): what a
    checkpoint keeps of them instead of ``K`` numbers each, so that its size does not grow with ``K``.

    >>> draws_digest(torch.zeros(3)) == draws_digest(torch.zeros(3)), draws_digest(None)
    (True, None)
    """
    if any(d is None for d in draws):
        return None
    digest = hashlib.sha1()
    for d in draws:
        digest.update(d.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def checked_redraw(saved: str, redrawn: str | None, model: str) -> None:
    """Refuse a resume whose per-client draws, redrawn from the checkpoint's seed and ``K``, are not its own."""
    if redrawn != saved:
        raise ConfigError(
            f"{model}: the clients' draws of the checkpoint's seed and K differ from what these options draw with this "
            "torch (other system options, or another torch version?): resume with those that started the run"
        )


@dataclass(frozen=True)
class ClientTimes:
    """Seconds per local iteration and per upload of every client, ``[K]`` float64 each.

    Attributes:
        forward: client-half forward of one minibatch (split); a whole local iteration of the model (FL).
        backward: client-half backward of one minibatch (split); 0 (FL: counted in ``forward``).
        activation_upload: one minibatch's activations and labels, up (split); ``None`` for FL methods.
        model_upload: the client half (split) or the whole model (FL), up.
    """

    forward: torch.Tensor
    backward: torch.Tensor
    activation_upload: torch.Tensor | None
    model_upload: torch.Tensor

    @staticmethod
    def split(forward, backward, activation_upload, model_upload) -> ClientTimes:
        """Times of a split method (values or lists, one per client)."""
        f64 = lambda v: torch.as_tensor(v, dtype=torch.float64)  # noqa: E731
        return ClientTimes(f64(forward), f64(backward), f64(activation_upload), f64(model_upload))

    @staticmethod
    def local(iteration, model_upload) -> ClientTimes:
        """Times of an FL method: a local iteration of the whole model and the model's upload."""
        it = torch.as_tensor(iteration, dtype=torch.float64)
        return ClientTimes(it, torch.zeros_like(it), None, torch.as_tensor(model_upload, dtype=torch.float64))

    @property
    def is_split(self) -> bool:
        return self.activation_upload is not None

    @property
    def num_clients(self) -> int:
        return len(self.forward)


class ClientCosts:
    """What a method's client-side model costs per sample, each figure measured once, when a system model first asks
    for it (FLOPs with :mod:`lightning_sfl.system.flops`, bytes from tensor sizes and dtypes).

    Args:
        client: the client-side model (a split method's client half; an FL method's whole model).
        input_shape: ``(C, H, W)`` of one sample.
        sends_activations: activations cross a cut (a split method; ``False``: plain FL, no activation traffic).
        activation_shape: a function giving one sample's activation shape at the cut (split methods).
        cut_model: a function giving the unsplit model whose cut points a client may be charged
            (``iteration`` barrier; :func:`~lightning_sfl.system.flops.cut_costs`).
        cut_options: the cut points a client may be charged: the method's ``split_point``, or several for a sliding
            split (S²FL).
        nominal_cut: the method's ``split_point`` (where every client starts), one of ``cut_options``.
        tail: U-shaped split learning: the clients' tail (they also run it, and send the gradient of its input up
            instead of their labels); ``None``: none.
        tail_input_shape: a function giving one sample's input shape of ``tail`` (the body's output).
    """

    def __init__(
        self,
        client: nn.Module,
        input_shape: Sequence[int],
        sends_activations: bool,
        activation_shape: Callable[[], tuple[int, ...]] | None = None,
        cut_model: Callable[[], nn.Module] | None = None,
        cut_options: Sequence[str] = (),
        nominal_cut: str | None = None,
        tail: nn.Module | None = None,
        tail_input_shape: Callable[[], tuple[int, ...]] | None = None,
    ) -> None:
        self.client, self.input_shape = client, tuple(input_shape)
        self.tail, self._tail_input_shape = tail, tail_input_shape
        self.sends_activations = bool(sends_activations)
        self._activation_shape, self._cut_model = activation_shape, cut_model
        self.cut_options, self.nominal_cut = list(cut_options), nominal_cut

    @cached_property
    def training_flops(self) -> float:
        """FLOPs of one forward and backward pass per sample (U-shaped: the head's and the tail's)."""
        return training_flops_per_sample(self.client, self.input_shape) + self.tail_training_flops

    @cached_property
    def forward_flops(self) -> float:
        """FLOPs of one forward pass per sample (U-shaped: the head's and the tail's)."""
        return forward_flops_per_sample(self.client, self.input_shape) + self.tail_forward_flops

    @cached_property
    def tail_training_flops(self) -> float:
        """U-shaped: FLOPs of the tail's forward and backward pass per sample (0 without a tail)."""
        return 0.0 if self.tail is None else training_flops_per_sample(self.tail, self._tail_input_shape())

    @cached_property
    def tail_forward_flops(self) -> float:
        """U-shaped: FLOPs of the tail's forward pass per sample (0 without a tail)."""
        return 0.0 if self.tail is None else forward_flops_per_sample(self.tail, self._tail_input_shape())

    @cached_property
    def tail_row_bytes(self) -> int:
        """U-shaped: bytes of one row of the body's output, down, and of its gradient, up (0 without a tail)."""
        if self.tail is None:
            return 0
        return math.prod(self._tail_input_shape()) * next(self.tail.parameters()).element_size()

    @cached_property
    def backward_flops(self) -> float:
        """FLOPs of one backward pass per sample: the training FLOPs less the forward's."""
        return self.training_flops - self.forward_flops

    @cached_property
    def full_training_flops(self) -> float:
        """FLOPs of one forward and backward pass per sample of the whole (unsplit) model (the client model where no
        ``cut_model`` is given)."""
        if self._cut_model is None:
            return self.training_flops
        return training_flops_per_sample(self._cut_model(), self.input_shape)

    @cached_property
    def model_bytes(self) -> int:
        """Bytes of the client-side model as sent (its state dict)."""
        return module_bytes(self.client)

    @cached_property
    def activation_row_bits(self) -> float:
        """Bits of one row sent up in a split iteration: its activations and its int64 label (U-shaped: the gradient
        of the body's output instead of the label)."""
        first = next(self.client.parameters(), None)  # a client half without weights sends the inputs' dtype
        value_bytes = torch.empty((), dtype=torch.get_default_dtype() if first is None else first.dtype).element_size()
        per_row = self.tail_row_bytes if self.tail is not None else LABEL_BYTES
        return 8.0 * (math.prod(self._activation_shape()) * value_bytes + per_row)

    @cached_property
    def cuts(self) -> dict[str, CutCost]:
        """:class:`~lightning_sfl.system.flops.CutCost` of each of ``cut_options``."""
        return cut_costs(self._cut_model(), self.cut_options)


@dataclass(frozen=True)
class RoundTraffic:
    """What a synchronous round asked of its clients, slot by slot (``[S]`` each; a slot's client ``-1``: unused).

    Attributes:
        clients: the client in each slot.
        samples: training rows each slot processed in the round (``T·B_k``).
        iterations: local iterations each slot took part in (``None``: not counted).
        up: bytes each slot sent this round.
        down: bytes each slot received this round.
        activations_up: bytes of activations sent this round, all slots together.
        round: the round (0-based), for system models that draw per round.
        server_rows: rows the server trained on its own data this round (Semi-SFL's labelled set; whole model).
        by_kind: ``(direction, kind) -> [S]`` bytes of each slot (the ledger's
            :meth:`~lightning_sfl.system.comm.CommLedger.bytes`).
    """

    clients: torch.Tensor
    samples: torch.Tensor
    iterations: torch.Tensor | None
    up: torch.Tensor
    down: torch.Tensor
    activations_up: int
    round: int = 0
    server_rows: int = 0
    by_kind: dict = field(default_factory=dict)


class SystemModel:
    """Protocol of a system model (see the module docstring).

    Subclasses implement :meth:`bind`, :meth:`round_seconds` and :meth:`client_times`, and checkpoint their draws in
    :meth:`state_dict`."""

    def bind(self, num_clients: int, seed: int, costs: ClientCosts) -> None:
        """Fix the ``num_clients`` clients' systems for the run (``seed``: the data seed, for draws that follow it)
        and what a sample costs (``costs``); measure here what the model will need (the model's dtype may change
        when the fit starts)."""
        raise NotImplementedError

    def round_seconds(self, traffic: RoundTraffic) -> float:
        """Simulated duration of a synchronous round (s)."""
        raise NotImplementedError

    def client_times(self, rows: torch.Tensor, concurrency: int, full_bandwidth: bool = False) -> ClientTimes:
        """Every client's seconds per event on the asynchronous clock, ``b_k = rows[k]`` rows per minibatch, ``C =
        concurrency`` clients in flight (``full_bandwidth``: each gets the whole bandwidth, not ``W / C``)."""
        raise NotImplementedError

    def slides_cut(self) -> bool:
        """Whether a round may charge a client a cut other than ``split_point`` (a sliding split, among
        ``ClientCosts.cut_options``: S²FL's); ``False`` here."""
        return False

    @override
    def state_dict(self) -> dict:
        return {}

    @override
    def load_state_dict(self, state: dict) -> None:
        pass
