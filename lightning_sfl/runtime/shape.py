"""The split's shape, one object a method is given (``method.shape``): where the model is cut and what each side
holds, which of the models get a copy per client (the banks), what crosses each round, and which iteration a local
step runs. Every decision that depends on the topology is taken here; a method declares its shape in words
(``has_server_half``, ``server_copies``, ``supports_tail``: :func:`make_shape` reads them once) and asks it.

* :class:`WholeModel` (plain FL): the clients hold the whole model, the server nothing; a local step is
  :func:`~lightning_sfl.runtime.iteration.full_model_iteration`;
* :class:`Split`: the clients hold the client half ``w_c``, the server the server half ``w_s`` (or a copy of it per
  client); a local step is :func:`~lightning_sfl.runtime.iteration.split_iteration`;
* :class:`UShaped`: the clients hold the head and the tail, the server the body between the cuts (or a copy per
  client); a local step is :func:`~lightning_sfl.runtime.u_shape.u_shaped_iteration`.

The shape keeps no module of its own that the method does not register (``client``, ``server``, ``tail`` and the
banks are the method's attributes, so checkpoints keep their keys); its state is the clients' own tails of a U-shaped
run whose tails stay with them (``tail_aggregation="none"``), a per-client store the method declares under the key
``client_tails``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch
from torch import nn
from typing_extensions import override

from lightning_sfl.compression import Compression, resolve_compression
from lightning_sfl.defences import Defences, resolve_defences
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop.step import PROBE_KIND
from lightning_sfl.losses import sum_of_client_means
from lightning_sfl.models.split import cut_tail
from lightning_sfl.runtime.aggregate import flat_parameters
from lightning_sfl.runtime.halves import ClientModule, split_halves
from lightning_sfl.runtime.iteration import full_model_iteration, split_iteration
from lightning_sfl.runtime.processes import world_size
from lightning_sfl.runtime.u_shape import TAIL_AGGREGATIONS, keep_tails, load_tails, u_shaped_iteration

if TYPE_CHECKING:
    from lightning_sfl.loop import Step
    from lightning_sfl.models import SplittableModel
    from lightning_sfl.models.source import ModelSource
    from lightning_sfl.runtime.client_bank import ClientBank
    from lightning_sfl.system.comm import CommLedger

__all__ = ["Split", "UShaped", "WholeModel", "make_shape", "require_cut"]


class Split:
    """A client half and a server half cut at ``split_point`` (SCALA's eqs. 5-8): activations ``[B, *act]`` up with
    the labels, their gradients down. ``server_copies``: one server-half copy per client, trained on its activations
    only and averaged each round (SplitFedV1); otherwise one server half on the concatenated activations (eq. 5)."""

    #: Activations cross a cut (``False``: plain FL).
    crosses_cut: ClassVar[bool] = True
    #: The clients keep the last layers and the labels (``UShaped``).
    u_shaped: ClassVar[bool] = False
    #: What the clients download and upload each round: ``client_half`` or (plain FL) ``full_model``.
    traffic_kind: ClassVar[str] = "client_half"

    def __init__(self, server_copies: bool = False) -> None:
        self.server_copies = bool(server_copies)
        self.tail: ClientModule | None = None
        self.tail_aggregation = "server"

    # ------------------------------------------------------------------ construction
    def halves(self, model: SplittableModel, split_point: str) -> tuple[nn.Module, nn.Module]:
        """The client half ``[B, *input] -> [B, *act]`` and the server half ``[B, *act] -> [B, N]`` of ``model``."""
        return split_halves(model, split_point, has_server_half=self.crosses_cut)

    @classmethod
    def unused_options(cls, method_name: str) -> dict[str, str]:
        """The options of the base the shape has no use for, each with why (none here)."""
        return {}

    # ------------------------------------------------------------------ the models the clients hold
    def client_models(self, models: dict[str, nn.Module]) -> dict[str, nn.Module]:
        """The client-side models every client holds a copy of: the method's ``models`` (and, U-shaped, the tail)."""
        return models

    def shared_models(self, models: dict[str, nn.Module]) -> dict[str, nn.Module]:
        """Of :meth:`client_models`, those the clients download and upload each round (all here)."""
        return self.client_models(models)

    def server_template(self, server: nn.Module) -> nn.Module | None:
        """The module the server copies are made of (``server_copies``), ``None`` without copies."""
        return server if self.server_copies else None

    def trained_server(self, server: nn.Module, server_bank: ClientBank | None) -> list[nn.Parameter]:
        """The server-side parameters the optimiser trains outside the banks: the server half's, none with copies
        (the bank's slots are trained instead)."""
        return [] if server_bank is not None else list(server.parameters())

    # ------------------------------------------------------------------ a round's edges
    def start_round(self, method, step: Step) -> None:
        """Round start, after the clients downloaded: nothing here (U-shaped, tails kept per client: each slot takes its
        own)."""

    def end_round(self, method, step: Step) -> None:
        """Round end, after the FL phase: nothing here (U-shaped, tails kept per client: each client's back)."""

    # ------------------------------------------------------------------ one iteration
    def iteration(self, method, step: Step, count_step: bool = True, forward=None, row_loss=None):
        """One local iteration of ``step``'s clients: the split iteration; returns ``(server_loss, client_loss)``.
        ``forward`` and ``row_loss``: what a method running on either shape gives the full-model iteration
        (:class:`WholeModel`'s; a split iteration takes the method's hooks instead)."""
        return split_iteration(method, step, count_step)

    def server_forward(self, server: nn.Module, server_bank: ClientBank | None, a: torch.Tensor, step: Step):
        """Logits ``[B, N]`` of the server half (or of each client's server copy) on activations ``a`` ``[B, *act]``;
        a probe step (``PROBE_KIND``) gets the global server half."""
        if server_bank is None or step.kind == PROBE_KIND:
            return server(a)
        return server_bank(a, step.local_sizes, step.slots)

    def server_mean(self, method, logits: torch.Tensor, step: Step, prior: torch.Tensor | None) -> torch.Tensor:
        """The server's loss over the step's rows (eq. 7): the mean over the concatenated batch (on a DDP shard, its
        sum over the global ``B``), or with server copies the sum over copies of each one's mean."""
        if self.server_copies:
            return sum_of_client_means(method.cross_entropy(logits, step.y, prior), step.owner, step.sizes)
        if world_size() == 1 or len(step.y) == int(step.sizes.sum()):  # every row is here
            return method.cross_entropy(logits, step.y, prior, "mean")
        return method.cross_entropy(logits, step.y, prior, "sum") / int(step.sizes.sum())

    def count_up(self, ledger: CommLedger, kind: str, rows: torch.Tensor, step: Step) -> None:
        """Count ``rows`` ``[B, ...]`` sent up by ``step``'s clients as ``kind`` (nothing crosses a cut in plain FL)."""
        ledger.add_rows("up", kind, rows, step.sizes, step.slots)

    def count_down(
        self, ledger: CommLedger, kind: str, rows: torch.Tensor, step: Step, encoded: int | None = None
    ) -> None:
        """Count ``rows`` sent down to ``step``'s clients as ``kind`` (``encoded``: the bytes a compressed row sends;
        nothing crosses a cut in plain FL)."""
        ledger.add_rows("down", kind, rows, step.sizes, step.slots, encoded)

    def upload_labels(self, ledger: CommLedger, step: Step) -> None:
        """The labels go up with the activations (bytes counted); U-shaped, they stay with the clients."""
        ledger.add_rows("up", "labels", step.y, step.sizes, step.slots)

    def probe_refusal(self, method_name: str) -> str | None:
        """Why a probe of the server's answer (SplitGuard's) is refused; ``None``: it is not."""
        return None

    # ------------------------------------------------------------------ the global model
    def global_logits(self, client: nn.Module, server: nn.Module, crossing, x: torch.Tensor) -> torch.Tensor:
        """The global model's logits ``[B, N]``: ``server(crossing("activations", client(x)))`` (``crossing(name,
        rows)``: what the other side receives, the defences and compressors as deployed)."""
        return server(crossing("activations", client(x)))

    def tail_for_costs(self) -> nn.Module | None:
        """The clients' tail, for the system model's costs (``None``: none)."""
        return None

    # ------------------------------------------------------------------ U-shaped
    def with_tail(self, method, source: ModelSource, split_point: str, tail_point: str | None, tail_aggregation: str):
        """This shape, U-shaped at ``tail_point`` if given (the layers from it on stay with the clients), else itself;
        ``tail_aggregation`` checked. ``method`` declares the tails' per-client store where they stay with the
        clients."""
        if tail_aggregation not in TAIL_AGGREGATIONS:
            allowed = ", ".join(TAIL_AGGREGATIONS)
            raise ConfigError(f"tail_aggregation={tail_aggregation!r} must be one of: {allowed}")
        if tail_aggregation != "server" and tail_point is None:
            raise ConfigError(f"tail_aggregation={tail_aggregation!r} is an option of U-shaped runs: give tail_point")
        if tail_point is None:
            return self
        if not type(method).supports_tail:
            raise ConfigError(f"tail_point={tail_point!r}: {type(method).__name__} does not run U-shaped")
        shape = UShaped(self.server_copies, tail_aggregation)
        split = source.canonical_cut(split_point)
        tail_at = source.model.canonical_cut(tail_point) or tail_point  # (cut_tail names the valid ones)
        body, tail = cut_tail(method.server.net, source.cut_points, split, tail_at)
        method.server.net, shape.tail = body, ClientModule(tail)
        if tail_aggregation == "none":  # every client's own tail, [K, P] (a per-client store)
            method.add_client_state("client_tails", lambda: flat_parameters(shape.tail.net).detach())
        return shape

    # ------------------------------------------------------------------ the clients' defences
    def defend(self, method, defences: list | None, default: list | None = None) -> None:
        """Give ``method``'s clients ``defences`` (``None``: ``default``; :mod:`lightning_sfl.defences`), from its
        constructor, right after the base's: the halves they change (a bottleneck), then each attached to the final
        client half; the hyperparameters record them as configs. Defences of what U-shaped clients send up are refused
        without a tail (:meth:`check_defences`)."""
        method.defences = Defences(resolve_defences(list(default or []) if defences is None else defences))
        method.hparams["defences"] = method.defences.configs()
        shape = tuple(method.hparams.input_shape)
        method.client.net, method.server.net = method.defences.build_halves(method.client.net, method.server.net, shape)
        keeps = getattr(method, "keeps_client_halves", False)  # (SplitFedV3: the clients keep their own halves)
        method.defences.attach(type(method).__name__, method.client.net, shape, keeps)
        self.check_defences([type(d).__name__ for d in method.defences.values() if d.needs_tail])

    #: The crossings of this shape (:data:`~lightning_sfl.compression.base.CROSSINGS`) and why each other one is
    #: not there.
    crossings: ClassVar[tuple[str, ...]] = ("activations", "gradients", "model")
    missing_crossings: ClassVar[dict[str, str]] = {
        "body_outputs": "a crossing of U-shaped runs: give tail_point",
        "body_gradients": "a crossing of U-shaped runs: give tail_point",
    }

    def compress(self, method, compression: list | None) -> None:
        """Give ``method``'s crossings ``compression`` (:mod:`lightning_sfl.compression`; ``None``: none), from its
        constructor; the hyperparameters record them as configs. A compressor of a crossing the method does not have
        (one of another shape, gradients down where the server sends none, model updates where the clients' models
        do not reach the base's average) is refused in one line. Error feedback of the model exchange declares its
        per-client store (:func:`~lightning_sfl.runtime.exchange.declare_residuals`)."""
        from lightning_sfl.runtime.exchange import declare_residuals

        method.compression = Compression(resolve_compression([] if compression is None else compression))
        method.hparams["compression"] = method.compression.configs()
        method.compression.check()
        name = type(method).__name__
        for crossing in method.compression:
            if crossing not in self.crossings:
                why = self.missing_crossings[crossing]
                raise ConfigError(f"compression: {name} has no {crossing} crossing ({why})")
        if "gradients" in method.compression and not getattr(method, "answers_with_gradients", True):
            raise ConfigError(f"compression: {name}'s server sends the clients no gradients")
        if "model" in method.compression and not type(method).averages_uploaded_models:
            raise ConfigError(
                f"compression: {name}'s clients' models do not reach the server's average as updates of the global "
                "model (crossing='model' is for the methods that average them)"
            )
        if "model" in method.compression and method.compression["model"].error_feedback:
            declare_residuals(method)

    def check_defences(self, needing_tail: list[str]) -> None:
        """Defences of what U-shaped clients send up are refused without a tail (one line)."""
        if needing_tail:
            raise ConfigError(f"defences: {needing_tail[0]} defends what U-shaped clients send up: give tail_point too")


class WholeModel(Split):
    """Plain FL: the clients train the whole model, the server holds nothing, nothing crosses a cut; a local step is
    one SGD step of every client's model (:func:`~lightning_sfl.runtime.iteration.full_model_iteration`)."""

    crosses_cut: ClassVar[bool] = False
    traffic_kind: ClassVar[str] = "full_model"
    crossings: ClassVar[tuple[str, ...]] = ("model",)
    missing_crossings: ClassVar[dict[str, str]] = {
        name: "its clients train the whole model: nothing crosses a cut; its crossing is model"
        for name in ("activations", "gradients", "body_outputs", "body_gradients")
    }

    def __init__(self) -> None:
        super().__init__(server_copies=False)

    @classmethod
    @override
    def unused_options(cls, method_name: str) -> dict[str, str]:
        """``split_point`` and ``defences`` (of a method family with both shapes): the clients train the whole
        model."""
        return {
            "split_point": f"{method_name}'s clients train the whole model (no server half to cut off)",
            "defences": f"{method_name}'s clients train the whole model: no activations cross a cut to defend",
        }

    @override
    def iteration(self, method, step: Step, count_step: bool = True, forward=None, row_loss=None):
        """One full-model step (``forward``, ``row_loss``: see
        :func:`~lightning_sfl.runtime.iteration.full_model_iteration`); its loss is both returned losses."""
        loss = full_model_iteration(method, step, forward, row_loss, count_step)
        return loss, loss

    @override
    def count_up(self, ledger: CommLedger, kind: str, rows: torch.Tensor, step: Step) -> None:
        """Nothing crosses a cut."""

    @override
    def count_down(
        self, ledger: CommLedger, kind: str, rows: torch.Tensor, step: Step, encoded: int | None = None
    ) -> None:
        """Nothing crosses a cut."""

    @override
    def upload_labels(self, ledger: CommLedger, step: Step) -> None:
        """The labels stay with the clients."""

    @override
    def with_tail(self, method, source, split_point, tail_point, tail_aggregation):
        """A whole model has no tail to keep: itself (``tail_point`` is not an option of plain FL methods)."""
        return self


class UShaped(Split):
    """U-shaped split learning (:mod:`~lightning_sfl.runtime.u_shape`): the clients keep the head and the tail (the
    labels never leave them), the server holds the body between the cuts (or a copy of it per client). The tails
    are averaged with the heads each round, by the body's server or an aggregator of their own, or stay with each
    client (``tail_aggregation``: ``server``, ``separate``, ``none``)."""

    u_shaped: ClassVar[bool] = True
    crossings: ClassVar[tuple[str, ...]] = ("activations", "gradients", "body_outputs", "body_gradients", "model")

    def __init__(self, server_copies: bool = False, tail_aggregation: str = "server") -> None:
        super().__init__(server_copies)
        self.tail_aggregation = tail_aggregation

    @override
    def client_models(self, models: dict[str, nn.Module]) -> dict[str, nn.Module]:
        """The method's client models and the tail (averaged with them each round)."""
        return {**models, "tail": self.tail.net}

    @override
    def shared_models(self, models: dict[str, nn.Module]) -> dict[str, nn.Module]:
        """All client models, less the tail when each client keeps its own (``tail_aggregation="none"``)."""
        models = self.client_models(models)
        return {n: m for n, m in models.items() if n != "tail"} if self.tail_aggregation == "none" else models

    @override
    def start_round(self, method, step: Step) -> None:
        """With tails kept per client, each client's slot takes its own tail
        (:func:`~lightning_sfl.runtime.u_shape.load_tails`)."""
        if self.tail_aggregation == "none":
            load_tails(method, step)

    @override
    def end_round(self, method, step: Step) -> None:
        """With tails kept per client, each client's tail back into its store; the evaluated tail is their
        ``|D_k|``-weighted mean (:func:`~lightning_sfl.runtime.u_shape.keep_tails`)."""
        if self.tail_aggregation == "none":
            keep_tails(method, step)

    @override
    def iteration(self, method, step: Step, count_step: bool = True, forward=None, row_loss=None):
        """One U-shaped iteration (:func:`~lightning_sfl.runtime.u_shape.u_shaped_iteration`)."""
        return u_shaped_iteration(method, step, count_step)

    @override
    def upload_labels(self, ledger: CommLedger, step: Step) -> None:
        """The labels stay with the clients."""

    @override
    def probe_refusal(self, method_name: str) -> str | None:
        return f"U-shaped {method_name}'s server computes no loss: SplitGuard cannot probe it"

    @override
    def global_logits(self, client: nn.Module, server: nn.Module, crossing, x: torch.Tensor) -> torch.Tensor:
        """``tail(body(head(x) as sent) as sent)``: logits ``[B, N]``."""
        return self.tail(crossing("body_outputs", server(crossing("activations", client(x)))))

    @override
    def tail_for_costs(self) -> nn.Module:
        return self.tail.net

    @override
    def with_tail(self, method, source, split_point, tail_point, tail_aggregation):
        raise ConfigError("the model is cut for a tail already")

    @override
    def check_defences(self, needing_tail: list[str]) -> None:
        """A tail is there: every defence of what U-shaped clients send up applies."""


def make_shape(method_cls: type) -> Split:
    """The shape a method class declares: :class:`WholeModel` where ``has_server_half`` is false, else
    :class:`Split` with its ``server_copies`` (a method may change them in its constructor, e.g. SCALA without
    concatenation; ``tail_point`` makes it :class:`UShaped`: :meth:`Split.with_tail`)."""
    if not getattr(method_cls, "has_server_half", True):
        return WholeModel()
    return Split(server_copies=getattr(method_cls, "server_copies", False))


def require_cut(method_cls: type, purpose: str) -> None:
    """A one-line :class:`~lightning_sfl.errors.ConfigError` unless ``method_cls`` is a split method (something
    crosses a cut), for ``purpose`` (e.g. ``no activations to invert``)."""
    if not make_shape(method_cls).crosses_cut:
        raise ConfigError(f"{method_cls.__name__} is not a split method (nothing crosses a cut): {purpose}")
