"""A defence as a part a split method is given: :class:`Defence` (its hooks, all optional) and :class:`Defences` (a
method's defences in order, asked by the method at each point of a split iteration).

A defence is an ``nn.Module``: its tensors (the inversion regulariser's per-client decoders) are saved in the
method's checkpoints under its own entry, ``defences.<key>.``. Its options are its constructor's arguments, stored
under the same names, so :meth:`Defence.config` records it as a config (the checkpoint's hyperparameters, the run's
``config.yaml``) and :func:`resolve_defences` makes it again.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import nn

from lightning_sfl.errors import ConfigError
from lightning_sfl.known import component_config, known_class

if TYPE_CHECKING:
    from lightning_sfl.loop import Federation, Schedule, Step
    from lightning_sfl.loop.selection import ClientSelection

__all__ = ["Defence", "Defences", "resolve_defences"]

#: ``log(name, value, **options)``: how a defence logs (the method's ``self.log`` for the step's rows, per round).
Log = Callable[..., None]


class Defence(nn.Module):
    """One defence of the clients of a split method. Every hook has a default that does nothing; a defence overrides
    the ones where it acts (the package docstring says where each is called)."""

    #: The defence's name in its method's :class:`Defences` and checkpoints (one defence of each key per method).
    key: ClassVar[str] = ""
    #: True if its client term differentiates through the activations after ``G_k`` went back through them (the
    #: clients' graph is then kept for a second backward pass).
    goes_back_through_activations: ClassVar[bool] = False

    def config(self) -> dict:
        """``{"class_path": ..., "init_args": {...}}``: this defence as a config (what checkpoints record)."""
        return component_config(self, "lightning_sfl.defences")

    def build_halves(
        self, client: nn.Sequential, server: nn.Sequential, input_shape: tuple[int, int, int]
    ) -> tuple[nn.Sequential, nn.Sequential]:
        """At construction, before :meth:`attach`: the halves this defence needs (the bottleneck adds its layers)."""
        return client, server

    def attach(self, method: str, client: nn.Module, input_shape: tuple[int, int, int], keeps_client_halves: bool):
        """At construction, once the halves are final: ``method`` (its class name, for messages), the global client
        half ``[B, *input_shape] -> [B, *act]`` and whether the method's clients keep their own halves across rounds."""

    def configure_schedule(self, schedule: Schedule, method: str, local_iters: int, selection: ClientSelection):
        """The method's schedule as this defence needs it (the inversion regulariser: a warm-up before each client's
        first round); refusing one it cannot run with, in one line."""
        return schedule

    def step_handlers(self) -> dict[str, Callable[[Step, nn.Module], None]]:
        """Step kind -> handler ``(step, global client half)`` of the steps this defence adds to the schedule."""
        return {}

    def setup(self, federation: Federation, rank: int) -> None:
        """When a fit starts: the run's federation (clients, seed, data) and this process's rank."""

    def start_round(self, step: Step) -> None:
        """At the first step of a round."""

    def start_evaluation(self, seed: int, rank: int, rounds_done: int) -> None:
        """Before every validation or test epoch of the global model."""

    def training_noise(self, step: Step) -> torch.Generator | None:
        """The generator of the noise this defence draws in training step ``step``; ``None``: it draws none."""
        return None

    def upload(self, z: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """What leaves the client instead of ``z`` ``[B, *act]`` (in training and at inference); ``generator``: the
        noise's (``None``: the evaluation's)."""
        return z

    def training_labels(self, step: Step) -> torch.Tensor | None:
        """The labels the clients train on in ``step`` instead of ``step.y`` ``[B_local]`` (label differential privacy:
        :class:`~lightning_sfl.defences.labels.RandomisedLabels`); ``None``: their own. A defence that returns labels
        also gives :meth:`label_counts` and :meth:`label_distribution`."""
        return None

    def label_counts(self, step: Step) -> torch.Tensor | None:
        """The counts ``[C]`` of the labels all of ``step``'s rows train on, where :meth:`training_labels` changes
        them; ``None``: the step's own."""
        return None

    def label_distribution(self, stats) -> torch.Tensor | None:
        """``P_k(y)`` ``[K, N]`` of the labels the clients train on, where :meth:`training_labels` changes them;
        ``None``: :class:`~lightning_sfl.loop.ClientStats`' own."""
        return None

    #: True for a defence of what U-shaped clients send up (``gradient_upload``): the method refuses it without a
    #: ``tail_point``.
    needs_tail: ClassVar[bool] = False
    #: True for a defence of the labels the clients train on (``training_labels``): a method whose clients hold no
    #: labels (the semi-supervised ones) refuses it.
    needs_client_labels: ClassVar[bool] = False

    def gradient_upload(self, g: torch.Tensor, step: Step) -> torch.Tensor:
        """U-shaped split learning: what leaves the clients instead of ``g`` ``[B, *h]``, the gradients of their
        losses w.r.t. the body's outputs (:mod:`~lightning_sfl.runtime.u_shape`), in training step ``step``."""
        return g

    def client_terms(self, step: Step, sent: torch.Tensor, log: Log) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The terms the clients add to their loss for the activations ``sent`` ``[B, *act]`` (as uploaded):
        ``(over rows, whole)`` — a sum over this process's rows normalised by global counts, and a term every process
        computes in full (:func:`~lightning_sfl.runtime.iteration.process_share`); ``None`` for none."""
        return None, None

    def one_process_only(self) -> str | None:
        """What of this defence runs on one process only (``None``: it runs on several)."""
        return None



#: Short name -> class of every defence of the library (filled by :mod:`lightning_sfl.defences`, which imports them).
#:
#: :meta hide-value:
DEFENCES: dict[str, type[Defence]] = {}

class Defences(nn.ModuleDict):
    """A method's defences, keyed by :attr:`Defence.key` in the order given; each hook asks them in turn. Empty for a
    method without defences (every hook is then the identity or nothing).

    >>> from lightning_sfl.defences import ActivationNoise, NoPeek
    >>> list(Defences([NoPeek(weight=10.0), ActivationNoise(scale=0.1)]))
    ['nopeek', 'noise']
    """

    def __init__(self, defences: Sequence[Defence] = ()) -> None:
        super().__init__()
        for defence in defences:
            if defence.key in self:
                raise ConfigError(f"defences: two {type(defence).__name__} (one defence of each kind per method)")
            self[defence.key] = defence

    @property
    def goes_back_through_activations(self) -> bool:
        return any(d.goes_back_through_activations for d in self.values())

    def build_halves(self, client, server, input_shape):
        for defence in self.values():
            client, server = defence.build_halves(client, server, input_shape)
        return client, server

    def attach(self, method: str, client: nn.Module, input_shape, keeps_client_halves: bool) -> None:
        for defence in self.values():
            defence.attach(method, client, input_shape, keeps_client_halves)

    def configure_schedule(self, schedule, method: str, local_iters: int, selection):
        for defence in self.values():
            schedule = defence.configure_schedule(schedule, method, local_iters, selection)
        return schedule

    def step_handler(self, kind: str) -> Callable[[Step, nn.Module], None] | None:
        """The handler of steps of ``kind`` a defence added, or ``None``."""
        return next((h[kind] for h in (d.step_handlers() for d in self.values()) if kind in h), None)

    def setup(self, federation: Federation, rank: int) -> None:
        for defence in self.values():
            defence.setup(federation, rank)

    def start_round(self, step: Step) -> None:
        for defence in self.values():
            defence.start_round(step)

    def start_evaluation(self, seed: int, rank: int, rounds_done: int) -> None:
        for defence in self.values():
            defence.start_evaluation(seed, rank, rounds_done)

    def training_noise(self, step: Step) -> torch.Generator | None:
        return next((g for g in (d.training_noise(step) for d in self.values()) if g is not None), None)

    def upload(self, z: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """What the clients send for activations ``z`` ``[B, *act]`` (``z`` itself without defences)."""
        for defence in self.values():
            z = defence.upload(z, generator)
        return z

    def training_labels(self, step: Step) -> Step:
        """``step`` with the labels its clients train on (:meth:`Defence.training_labels`; ``step`` itself without
        such a defence)."""
        for defence in self.values():
            labels = defence.training_labels(step)
            if labels is not None:
                counts = defence.label_counts(step)
                step = step.replace(y=labels, label_counts=step.label_counts if counts is None else counts)
        return step

    def label_distribution(self, stats) -> torch.Tensor:
        """``P_k(y)`` ``[K, N]`` of the labels the clients train on (what their priors, SCALA's eq. 15, are made of):
        :class:`~lightning_sfl.loop.ClientStats`' own, or a label defence's."""
        own = (d.label_distribution(stats) for d in self.values())
        return next((p for p in own if p is not None), stats.label_distribution)

    def gradient_upload(self, g: torch.Tensor, step: Step) -> torch.Tensor:
        """What U-shaped clients send for the gradients ``g`` ``[B, *h]`` (``g`` itself without defences)."""
        for defence in self.values():
            g = defence.gradient_upload(g, step)
        return g

    def client_terms(self, step: Step, sent: torch.Tensor, log: Log):
        """Every defence's ``(over rows, whole)`` terms, each kind summed in order (``None`` where there is none)."""
        rows = whole = None
        for defence in self.values():
            r, w = defence.client_terms(step, sent, log)
            rows = r if rows is None else rows if r is None else rows + r
            whole = w if whole is None else whole if w is None else whole + w
        return rows, whole

    def one_process_only(self) -> str | None:
        return next((r for r in (d.one_process_only() for d in self.values()) if r is not None), None)

    def configs(self) -> list[dict]:
        return [d.config() for d in self.values()]


def resolve_defences(value) -> list[Defence]:
    """The one place a ``defences`` setting becomes defence objects: a list of :class:`Defence` objects (copied) or
    configs ``{"class_path": ..., "init_args": {...}}`` (how checkpoints and configs record them; a short
    class name of :mod:`lightning_sfl.defences` will do)."""
    if not isinstance(value, list | tuple):
        raise ConfigError(f"defences={value!r} must be a list of defences (e.g. --model.defences+=NoPeek)")
    return [_resolve_one(v) for v in value]


def _resolve_one(value) -> Defence:
    if isinstance(value, Defence):
        return copy.deepcopy(value)  # a method's own: one object given to two methods would share its state
    if isinstance(value, dict) and "class_path" in value:  # (a checkpoint's: never imported on its word)
        cls = known_class(str(value["class_path"]), Defence, names=DEFENCES)
        if cls is not None:
            return cls(**(value.get("init_args") or {}))
    raise ConfigError(f"defences: {value!r} is not a defence; one of: {', '.join(DEFENCES)}")
