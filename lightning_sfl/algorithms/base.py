"""The coordinating loop of split federated learning: one ``LightningModule`` per run (manual optimisation), the base
of every method. The documentation's :doc:`/architecture` describes it: the objects, one round as data flows, and the
table of the hooks with their paper steps (SCALA Algorithm 2), defaults and who overrides each.

The method configures its :class:`~lightning_sfl.loop.Schedule` (:meth:`SplitFedAlgorithm.configure_schedule`), which
becomes part of the fit's :class:`~lightning_sfl.loop.Federation` (:meth:`SplitFedAlgorithm.federate`); the data module
executes it and every ``training_step`` receives one typed :class:`~lightning_sfl.loop.Step`, run by the handler of its
kind (``step_handlers``; ``"local"``: the method's ``local_iteration``, which for a split method
(:class:`~lightning_sfl.algorithms.split_method.SplitMethod`, with the hooks of the split iteration) runs
:func:`~lightning_sfl.runtime.iteration.split_iteration` and for a plain FL method
:func:`~lightning_sfl.runtime.iteration.full_model_iteration`). **One epoch = one global round**; the FL phase
(:meth:`SplitFedAlgorithm.aggregate`) runs inside the round's last training step, not in ``on_train_epoch_end``:
Lightning validates before it, and evaluation must see the aggregated model.

The base is one module with parts, not a stack of mixins, each in :mod:`lightning_sfl.runtime` and handed what it needs
from the hook where Lightning calls it: the split's shape (``shape``, :mod:`~lightning_sfl.runtime.shape`: the cut, what
crosses, the iteration), the evaluation (``evaluation``, :class:`~lightning_sfl.runtime.evaluation.Evaluation`: its
metric and a checkpoint's rounds), declared state and its checkpoint entry (:mod:`~lightning_sfl.runtime.state`), the
federation's side (:mod:`~lightning_sfl.runtime.federated`: its checkpoint entry is handed the federation, the system
model's costs the halves), the round's bookkeeping (:mod:`~lightning_sfl.runtime.round_tracker`), the halves
(:mod:`~lightning_sfl.runtime.halves`), the clients' copies (:mod:`~lightning_sfl.runtime.banks`) and the clients'
defences (``defences``, :mod:`lightning_sfl.defences`, given through the shape).
"""

from __future__ import annotations

from typing import ClassVar

import lightning as L
import torch
from torch import nn
from typing_extensions import override

from lightning_sfl import trainer_view
from lightning_sfl.algorithms.registry import algorithm_path
from lightning_sfl.class_paths import recorded
from lightning_sfl.compression import Compressor
from lightning_sfl.defences import Defences
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import ClientStats, Federate, Federation, RoundEnd, Schedule, Step, SyncRounds
from lightning_sfl.loop.selection import ClientSelection, UniformSelection, resolve_selection
from lightning_sfl.loss_terms import ClientTerm, ClientTermInputs
from lightning_sfl.losses import logit_adjusted_cross_entropy
from lightning_sfl.models import SplittableModel
from lightning_sfl.models.source import ModelSource
from lightning_sfl.process.fast_logging import skip_redundant_metric_moves
from lightning_sfl.runtime import banks, exchange, federated, state
from lightning_sfl.runtime.client_bank import ClientBank, SequentialBank, Slots
from lightning_sfl.runtime.evaluation import Evaluation
from lightning_sfl.runtime.guards import check_global_weights
from lightning_sfl.runtime.halves import DEFAULT_SPLIT_POINT, ClientModule, ServerModule
from lightning_sfl.runtime.options import MissingClassFloor, check_training_options, check_unused, option_defaults
from lightning_sfl.runtime.processes import disable_ddp_reducer, sum_gradients_over_processes, world_size
from lightning_sfl.runtime.round_tracker import RoundTracker
from lightning_sfl.runtime.shape import Split, make_shape
from lightning_sfl.runtime.stacked_bank import StackedBank, make_bank
from lightning_sfl.system.comm import CommLedger
from lightning_sfl.system.timing import ClientCosts, SystemModel
from lightning_sfl.system.wireless import WirelessCell


class SplitFedAlgorithm(L.LightningModule):
    """Base of every method: builds the split model, runs the schedule's steps, aggregates, evaluates.

    Args:
        arch: the model (:class:`~lightning_sfl.models.source.ModelSource`): a zoo name
            (``lightning_sfl.models.MODELS``), a class path with init args of any ``nn.Module``
            (``--model.arch torchvision.models.ResNet --model.arch.layers [2,2,2,2] …``; its ``num_classes`` argument,
            if any, is set from the data), or (from Python) a module. A model other than the zoo's is cut at a
            module's name (``split_point: layer2``).
        split_point: where the model is cut: ``s1``…``s5`` (shallow to deep) for a zoo model, a module's name as
            ``named_modules()`` spells it for any model (``layer2``: the cut is after it); the client holds what runs
            before it. Refused (other than the default) by a method without a server half (:meth:`unused_options`).
        local_iters: ``T``, local iterations per global round.
        lr: ``η``, SGD learning rate of clients and server.
        momentum: SGD momentum, in [0, 1) (the papers use plain SGD: 0).
        weight_decay: SGD weight decay, >= 0.
        num_classes: ``N`` (linked from the data module by the CLI).
        input_shape: ``(C, H, W)`` of one sample (linked from the data module by the CLI).
        client_selection: the policy choosing the clients of a round (``lightning_sfl.loop.selection``): an object,
            a class with its arguments on the CLI (``--model.client_selection FedCBSSelection
            --model.client_selection.lam 5``) or a short name (``uniform``, ``fedcbs``, ``class_balanced``);
            ``None``: the method's own (``default_selection``).
        client_bank: how the client copies run: ``sequential`` (one module per client, one after another),
            ``stacked`` (parameters stacked on a client dimension, every layer run for all clients at once) or
            ``auto`` (what ``benchmarks/client_scaling.py`` shows faster: stacked on CUDA; on a CPU stacked from 10
            clients per round on for models without BatchNorm, else sequential; see ``make_bank``).
        nesterov: Nesterov momentum (Sutskever et al., 2013, in PyTorch's form: the step is ``g + µ·b`` with ``b``
            the momentum buffer) for clients and server; needs ``momentum > 0``. Semi-SFL's optimiser (§V-A).
        compression: compressors of the crossings (:mod:`lightning_sfl.compression`: ``TopK``, ``Quantise``,
            ``QSGD``, …), at most one a crossing (``crossing``: ``activations`` up, ``gradients`` down, U-shaped
            ``body_outputs`` down and ``body_gradients`` up, ``model``: the clients' uploaded updates), applied after
            the defences, e.g. ``--model.compression+=TopK --model.compression.ratio 0.1``; the ledger counts the
            encoded bytes. A crossing the method does not have refuses its compressor. ``None`` (default): every
            crossing dense.
    """

    #: The method's shape, declared (:func:`~lightning_sfl.runtime.shape.make_shape` reads it once; every decision
    #: that depends on it is the shape's, ``self.shape``): False for plain FL methods, whose "client half" is the
    #: whole model and which have no server half.
    has_server_half: ClassVar[bool] = True
    #: Client-selection policy used when ``client_selection`` is not given.
    default_selection: ClassVar[type[ClientSelection]] = UniformSelection
    #: Declared, like ``has_server_half``: True for one server-half copy per client, trained on its activations only
    #: and averaged each round (SplitFedV1); False: one server half trained on the concatenated activations (eqs.
    #: 5-7). A constructor that decides it from its options sets ``self.shape.server_copies``.
    server_copies: ClassVar[bool] = False
    #: Step kind -> name of the method that runs such steps; ``None``: nothing to run (a round's closing
    #: ``"aggregate"`` step lists its clients but has no rows; the base then aggregates).
    step_handlers: ClassVar[dict[str, str | None]] = {"local": "local_iteration", "aggregate": None}
    missing_class_floor = MissingClassFloor()
    #: Declared: False where the clients' uploaded models do not reach the base's average as updates of the round's
    #: global model (:meth:`aggregate_slots`), so a ``model`` crossing's compressor is refused: FedDyn's own
    #: average, the asynchronous methods' buffered uploads, the clients who keep their own halves (SplitFedV3).
    averages_uploaded_models: ClassVar[bool] = True

    def __init__(
        self,
        arch: nn.Module | str = "cnn_small",
        split_point: str = DEFAULT_SPLIT_POINT,
        local_iters: int = 5,
        lr: float = 0.01,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        num_classes: int = 10,
        input_shape: tuple[int, int, int] = (1, 8, 8),
        client_selection: ClientSelection | str | None = None,
        client_bank: str = "auto",
        nesterov: bool = False,
        compression: list[Compressor] | None = None,
    ) -> None:
        super().__init__()
        self._states = state.DeclaredStates()  # what add_state declares
        self._client_terms: list[ClientTerm] = []  # what add_client_term adds
        check_training_options(local_iters, lr, momentum, weight_decay, client_bank, nesterov)
        self.save_hyperparameters()
        given = dict(self.hparams)  # every option of the method's constructors, as given
        self.automatic_optimization = False
        self.local_iters, self.lr, self.momentum, self.weight_decay = local_iters, lr, momentum, weight_decay
        self.nesterov, self.num_classes, self.client_bank = nesterov, num_classes, client_bank
        self.selection = resolve_selection(client_selection, self.default_selection)
        self.hparams["client_selection"] = self.selection.config()  # a config, so checkpoints load safely
        self.federation: Federation | None = None  # handed over when a fit starts (federate)
        self._schedule: Schedule | None = None  # configured on first use (schedule), after the whole construction
        arch = recorded(arch, self.hparams.get("arch"), nn.Module)  # (built again from its class path, with N classes)
        self.model_source = ModelSource(arch, num_classes, tuple(input_shape))
        self.hparams["arch"] = self.model_source.config()  # the zoo name or the class path it was built with
        self.shape: Split = make_shape(type(self))  # (U-shaped: SplitMethod's tail_point)
        client_net, server_net = self.build_halves(self.model_source.model, split_point)
        self.client, self.server = ClientModule(client_net), ServerModule(server_net)
        self.client_banks = nn.ModuleDict()  # name of a client model -> its slots (built when a fit starts)
        self.server_bank: ClientBank | None = None
        self.tail: ClientModule | None = None  # U-shaped runs' (the shape's tail)
        self.evaluation = Evaluation(num_classes)  # the accuracy after every round (and of a loaded checkpoint)
        self.defences = Defences()  # none but a split method's (given through its shape: shape.defend)
        self.give_compression(compression)  # (a split method's once its shape is final)
        self.example_input_array = torch.zeros(1, *input_shape)  # the model summary counts FLOPs on it
        check_unused(self.unused_options(), given, option_defaults(type(self)))  # after the values' own checks

    def give_compression(self, compression: list | None) -> None:
        """The crossings' compressors (:meth:`~lightning_sfl.runtime.shape.Split.compress`), from the base's
        constructor; a method whose shape changes later in its constructor (U-shaped) gives them then."""
        self.shape.compress(self, compression)

    @classmethod
    def unused_options(cls) -> dict[str, str]:
        """The options the method has no use for, each with why: one set to other than its default is refused at
        construction (one line: an option that changes nothing is not accepted silently), and ``compare`` leaves them
        out of a config it runs several methods with. Here: the shape's (``split_point`` of a method without a server
        half)."""
        return make_shape(cls).unused_options(cls.__name__)

    def build_halves(self, model: SplittableModel, split_point: str) -> tuple[nn.Sequential, nn.Sequential]:
        """The client half ``[B, *input] -> [B, *act]`` and the server half ``[B, *act] -> [B, N]`` of ``model`` (the
        method's ``model_source``'s, cut by its :attr:`shape`; plain FL: the whole model and an empty server)."""
        return self.shape.halves(model, split_point)

    def configure_schedule(self) -> Schedule:
        """How a round unfolds (executed by the data module): synchronous rounds of ``T`` local iterations. Called
        once, on first use of :attr:`schedule` (the method is then fully constructed: any attribute may be read)."""
        return SyncRounds(self.local_iters, self.selection)

    @property
    def schedule(self) -> Schedule:
        """The method's schedule (:meth:`configure_schedule`, given to the defences, then checked:
        :func:`~lightning_sfl.runtime.federated.checked_schedule`), made on first use."""
        if self._schedule is None:
            schedule = self.configure_schedule()
            schedule = self.defences.configure_schedule(schedule, type(self).__name__, self.local_iters, self.selection)
            self._schedule = federated.checked_schedule(self, schedule)
        return self._schedule

    def one_process_only(self) -> str | None:
        """What of the method runs on one process only (``None``: all of it runs on several); a run of it on more is
        refused before its processes start (the command line) and at ``setup``. Here: what its defences and its
        compressors refuse."""
        return self.defences.one_process_only() or self.compression.one_process_only()

    def client_models(self) -> dict[str, nn.Module]:
        """The method's client-side models every client holds a copy of (broadcast, trained in a slot, aggregated):
        name -> global module (the shape adds its own: U-shaped, the tail). SFLLocalLoss adds its auxiliary head."""
        return {"client": self.client.net}

    # ------------------------------------------------------------------ its parts: federation, state, evaluation
    def add_state(self, name: str, init) -> None:
        """Declare the checkpointed tensor ``self.<name>``, made by ``init()`` when a fit starts
        (:class:`~lightning_sfl.runtime.state.DeclaredStates`)."""
        self._states.add(name, init)

    def add_client_state(self, name: str, default) -> None:
        """Declare the per-client state ``self.<name>``, ``[K, *row]``, each client's row ``default()`` until written:
        a :class:`~lightning_sfl.client_store.ClientStore` (rows held for the clients written, on disk
        beyond a memory budget, checkpointed incrementally), made when a fit starts."""
        self._states.add_per_client(name, lambda: self.client_stats.num_clients, default)

    @override
    def _apply(self, fn, recurse: bool = True):
        """``Module._apply`` (``.to``, ``.double()``), and the same on the per-client stores' held rows."""
        super()._apply(fn, recurse)
        for store in state.client_stores(self).values():
            store.apply(fn)
        return self

    @property
    def u_shaped(self) -> bool:
        """Whether the clients keep a tail (``tail_point``: the :attr:`shape` is
        :class:`~lightning_sfl.runtime.shape.UShaped`)."""
        return self.shape.u_shaped

    @override
    def configure_callbacks(self) -> list[L.Callback]:
        """For a fit, :class:`~lightning_sfl.loop.Federate`: builds (unless given) and connects the fit's federation."""
        return [Federate()] if self._trainer is None or trainer_view.is_fitting(self._trainer) else []

    def federate(self, federation: Federation) -> None:
        """Receive the fit's federation, checked against the method (:mod:`~lightning_sfl.runtime.federated`)."""
        self.federation = federated.checked_federation(self, federation)

    @property
    def client_stats(self) -> ClientStats:
        """The federation's client statistics (``|D_k|``, ``n_{k,y}``, ``P_k``, shards, ``S``, ``B``, seed)."""
        return self._federation().stats

    @property
    def ledger(self) -> CommLedger:
        """The federation's byte ledger of the current round."""
        return self._federation().ledger

    def _federation(self) -> Federation:
        if self.federation is None:
            raise RuntimeError(f"{type(self).__name__} has no federation yet: it gets one when a fit starts")
        return self.federation

    def default_system(self) -> SystemModel:
        """The system model of a federation built without one (Python API): SCALA's wireless cell (clients at
        1-5 GFLOP/s; :class:`~lightning_sfl.system.wireless.WirelessCell`). The CLI's is ``--clock.*``."""
        return WirelessCell()

    def check_system(self, system: SystemModel) -> None:
        """What the method refuses of the fit's system model, as a one-line
        :class:`~lightning_sfl.errors.ConfigError`, before anything runs: the CLI asks before the trainer exists,
        :meth:`Federation.build <lightning_sfl.loop.Federation.build>` before it binds the system. Nothing here (S²FL:
        a fixed cut on a clock that never slides it)."""

    def split_options(self) -> list[str] | None:
        """The cut points the system model may charge a client (a sliding split, S²FL); ``None``: ``split_point``."""
        return None

    def client_costs(self) -> ClientCosts:
        """What the client-side model costs per sample, for the system model (measured when it asks)."""
        split_point = self.hparams.split_point
        return federated.client_costs(
            self.client.net, self.server, self.example_input_array, self.shape.crosses_cut, self.shape.tail_for_costs(),
            self.model_source.build, self.split_options() or [split_point], split_point,
        )  # fmt: skip

    #: ``(save, load)`` of each part with an entry in checkpoints, each handed what it needs: the method's modules'
    #: (its class, the W&B run; banks rebuilt every round left out) and the federation's; each keeps the others'
    #: keys, so their order does not matter.
    _checkpoint_parts = (
        (lambda method, ckpt: state.save_method_entry(method, ckpt, algorithm_path(type(method)), method._wandb_run()),
         lambda method, ckpt: state.load_method_entry(method, ckpt, trainer_view.checkpoint_path(method._trainer))),
        (lambda method, ckpt: federated.save_federation_entry(method.federation, ckpt),
         lambda method, ckpt: federated.load_federation_entry(method.federation, method._fitting(), ckpt)),
    )  # fmt: skip

    def _wandb_run(self) -> str | None:
        return trainer_view.wandb_run_id(self._trainer)

    def _fitting(self) -> bool:
        return trainer_view.is_fitting(self._trainer)

    @override
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        for save, _ in self._checkpoint_parts:
            save(self, checkpoint)

    @override
    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.evaluation.checkpoint_rounds = int(checkpoint.get("epoch", -1)) + 1  # saved at the end of epoch ``epoch``
        for _, load in self._checkpoint_parts:
            load(self, checkpoint)

    @override
    def on_train_start(self) -> None:
        self.evaluation.checkpoint_rounds = None  # from now on the rounds are this fit's

    @override
    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> dict[str, torch.Tensor]:
        """Accuracy of the global model after every round (also ``test_step``), logged as ``test/acc`` with ``round``
        by the epoch's end (:class:`~lightning_sfl.runtime.evaluation.Evaluation`, handed the global model)."""
        return self.evaluation.step(self, batch)

    @override
    def on_validation_epoch_start(self) -> None:
        """Every evaluation draws the defences' noise afresh from ``(seed, rounds done)`` (the run's seed; 0 outside a
        fit)."""
        seed = int(self.federation.stats.seed) if self.federation is not None else 0
        done = self.rounds_evaluated() if self._trainer is not None else 0
        self.evaluation.start(self.defences, seed, self.global_rank, done)

    @override
    def on_validation_epoch_end(self) -> None:
        self.evaluation.finish(self.log, "test", self.rounds_evaluated())

    def rounds_evaluated(self) -> int:
        """Rounds behind the global model being evaluated (the ``round`` logged with ``test/acc``): during fit the
        round just aggregated; in ``validate``/``test`` of a checkpoint the rounds it was saved after; otherwise the
        trainer's epochs."""
        return self.evaluation.rounds_completed(trainer_view.is_fitting(self._trainer), self.current_epoch)

    test_step, on_test_epoch_start = validation_step, on_validation_epoch_start
    on_test_epoch_end = on_validation_epoch_end

    # ------------------------------------------------------------------ setup: buffers, banks, states
    @override
    def setup(self, stage: str) -> None:
        if stage != "fit":
            return
        skip_redundant_metric_moves()  # Lightning's self.log re-moves every logged metric to its device: skip no-ops
        refused = self.one_process_only() if world_size() > 1 else None
        if refused is not None:
            raise ConfigError(f"{refused} runs on one process (got {world_size()})")
        self.defences.setup(self._federation(), self.global_rank)
        stats = self._federation().stats
        self.register_buffer("client_sizes", stats.sizes.clone(), persistent=False)
        label_dist = self.defences.label_distribution(stats)  # of the labels the clients train on
        self.register_buffer("label_dist", label_dist.to(torch.float32), persistent=False)
        banks.build_banks(self, self.schedule.num_slots(stats), self.schedule.persistent_slots)
        self._states.build(self)
        folder = trainer_view.checkpoint_folder(self._trainer)
        for store in state.client_stores(self).values():  # the method's and its parts' (SCALA-PE's decoders)
            store.bind_folder(folder, self.global_rank)

    @property
    def bank(self) -> ClientBank:
        """The slots of the client half (``client_banks["client"]``)."""
        return self.client_banks["client"]

    def make_bank(self, template: nn.Module, num_slots: int) -> SequentialBank | StackedBank:
        """A bank of ``num_slots`` copies of ``template`` of the configured kind (``client_bank``)."""
        return make_bank(template, num_slots, self.client_bank, device=trainer_view.device(self.trainer))

    def _slot_parameters(self) -> list[nn.Parameter]:
        """Parameters of the slots (client copies and per-client server copies)."""
        return [p for bank in banks.all_banks(self) for p in bank.parameters()]

    def _server_parameters(self) -> list[nn.Parameter]:
        return self.shape.trained_server(self.server, self.server_bank)

    @override
    def configure_optimizers(self) -> torch.optim.Optimizer:
        """One SGD over all slots and the server: one ``global_step`` per training step."""
        groups = [{"params": self._slot_parameters(), "name": "client_slots"}]
        if self._server_parameters():
            groups.append({"params": self._server_parameters(), "name": "server"})
        return torch.optim.SGD(
            groups, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay, nesterov=self.nesterov
        )

    # ------------------------------------------------------------------ the step loop
    @override
    def training_step(self, step: Step, batch_idx: int) -> dict | None:
        """Run ``step`` with the handler of its kind; at the round's edges, the broadcast (hook 0), the FL phase (hook
        7) and the round events. A handler returns ``(server_loss, client_loss)`` (logged), ``None``, or a dict with
        those keys and what callbacks may read (``outputs`` of ``on_train_batch_end``), which is returned."""
        if self._trainer is not None:  # the method sums the gradients itself (take_step), not DDP's reducer
            disable_ddp_reducer(trainer_view.ddp_model(self.trainer))
        if step.round_start:  # the round's events, ledger and counters (RoundTracker), then the method's own starts
            self._round_tracker = RoundTracker.start(self._federation(), step, len(self.bank))
            self.start_round(step)
            self.defences.start_round(step)
        self._round_tracker.count(step)
        step = self.defences.training_labels(step)  # the labels the clients train on (label DP)
        result = federated.step_handler(self, step.kind)(step)
        outputs = result if isinstance(result, dict) else None
        losses = result if outputs is None else (outputs.pop("server_loss", None), outputs.pop("client_loss", None))
        if losses is not None and all(loss is not None for loss in losses):
            self._round_tracker.log_losses(self.log, step, *losses)
        if step.round_end:
            self.aggregate(step)
            halves = ((n, p) for n, p in self.named_parameters() if n.startswith(("client.", "server.", "tail.")))
            check_global_weights(halves, step)
            self._round_tracker.end(step, metrics=self.round_metrics())
        return outputs

    def round_metrics(self) -> dict[str, float]:
        """What the method measured in the round that its schedule adapts to (``RoundEnd.metrics``); none here."""
        return {}

    def on_round_end(self, event: RoundEnd) -> None:
        """Module hook after a round's FL phase (e.g. Semi-SFL logs its ``K_s`` here)."""

    # ------------------------------------------------------------------ round edges: broadcast and FL phase
    def reset_slots(self, slots: Slots = None, models: dict[str, nn.Module] | None = None) -> None:
        """The ``slots`` (default all) download the global models (bytes counted) and start with a fresh optimiser
        state; per-client server copies are reset too. ``models``: bank name -> the module those slots download
        (default :meth:`client_models`; FedConcat's clients download their cluster's model)."""
        opt = self.optimizers()
        models = self.shape.shared_models(self.client_models()) if models is None else models
        banks.download(self, slots, models, getattr(opt, "optimizer", opt))  # the torch optimiser in Lightning's

    def start_round(self, step: Step) -> None:
        """Round start (hook 0): every client of the round gets the global halves in its slot (FL-style: the
        client optimiser state starts fresh every round); then the shape's (U-shaped, tails kept per client: each slot
        takes its own)."""
        self.reset_slots()
        self.shape.start_round(self, step)

    def aggregation_weights(self, step: Step) -> torch.Tensor:
        """Weights of the step's clients in :meth:`aggregate`, ``[S]``: ``|D_k|`` (eq. 10)."""
        return self.client_sizes[step.clients]

    def aggregate(self, step: Step) -> None:
        """FL phase (hook 7, eq. 10): global models ← weighted averages (:meth:`aggregation_weights`) of the step's
        slots; then the shape's (U-shaped, tails kept per client: each back into its store)."""
        weights = self.aggregation_weights(step)
        self.aggregate_slots(weights, step.slots, clients=step.clients, seed=self.step_seed(step))
        banks.aggregate_server(self, weights, step.slots)
        self.shape.end_round(self, step)

    def aggregate_slots(
        self,
        weights: torch.Tensor,
        slots: Slots,
        models: dict[str, nn.Module] | None = None,
        clients: torch.Tensor | None = None,
        seed: int = 0,
    ) -> None:
        """Eq. (10) for the client banks: each global module ← the ``weights``-weighted average of its bank's
        ``slots`` (uploads counted; through the ``model`` crossing's compressor if given:
        :func:`~lightning_sfl.runtime.exchange.upload_models`, ``clients`` the slots' clients ``[S]`` and ``seed``
        its draws'). ``models``: bank name -> the module to aggregate into (default the shape's
        :meth:`~lightning_sfl.runtime.shape.Split.shared_models` of :meth:`client_models`)."""
        models = self.shape.shared_models(self.client_models()) if models is None else models
        exchange.upload_models(self, weights, slots, models, clients, seed)

    # ------------------------------------------------------------------ the losses (hooks 5-6)
    def cross_entropy(
        self, logits: torch.Tensor, labels: torch.Tensor, prior: torch.Tensor | None = None, reduction: str = "none"
    ) -> torch.Tensor:
        """The loss the base's server and client losses are made of: cross-entropy of ``logits`` ``[B, N]`` plus
        ``log prior`` (eqs. 14-15; ``None``: plain) against ``labels`` ``[B]``. A method that changes the loss
        overrides this (label smoothing: ``logit_adjusted_cross_entropy(..., label_smoothing=ε)``) and keeps every
        adjustment a base makes through its priors (SCALA's). Label smoothing with SCALA's exact priors needs
        ``missing_class_floor > 0``: a class a client lacks has a ``−∞`` logit, and the smoothed target's mass on it
        makes the loss infinite."""
        return logit_adjusted_cross_entropy(logits, labels, prior, reduction, self.missing_class_floor)

    def client_extra_loss(
        self, step: Step, outputs: torch.Tensor, features: torch.Tensor | None = None
    ) -> torch.Tensor | None:
        """Hook 5, a loss the clients add over their rows (``outputs``: what the client models produced — the
        activations, or the logits for plain FL; ``features``: inputs of the last layer when asked for), summed over
        this process's rows and normalised by global counts like the other losses; ``None``: nothing."""
        return None

    def step_seed(self, step: Step) -> int:
        """The seed of ``step``'s draws (a compressor's stochastic rounding): from the run's seed, round and step, the
        same in a resumed run."""
        return int(self.client_stats.seed) * 1_000_003 + step.round * 10_007 + step.index

    def add_client_term(self, term: ClientTerm) -> None:
        """Add ``term`` to the clients' objective (:mod:`~lightning_sfl.loss_terms`): the client iteration adds the
        terms' sum to :meth:`client_regulariser`'s, so a method composes a term with its parent's loss."""
        self._client_terms.append(term)

    def client_terms(self, step: Step, outputs: torch.Tensor) -> torch.Tensor | None:
        """The sum of the terms added by :meth:`add_client_term` for ``step``'s clients (``None``: none)."""
        if not self._client_terms:
            return None
        slots = [self.bank.slots[k] for k in step.slots_list()]
        inputs = ClientTermInputs(list(self.client.net.parameters()), slots, outputs)
        total = None
        for term in self._client_terms:
            value = term(inputs)
            total = value if total is None else total + value
        return total

    def client_regulariser(
        self, step: Step, outputs: torch.Tensor, features: torch.Tensor | None = None
    ) -> torch.Tensor | None:
        """Hook 5, a term every process computes in full (a function of the clients' parameters, such as FedProx's
        proximal term, or of this process's rows taken together); under DDP the processes' gradients of it are
        averaged (:func:`~lightning_sfl.runtime.iteration.process_share`). ``None``: nothing."""
        return None

    def take_step(self, opt, count_step: bool = True, slots=None) -> None:
        """Hook 6: sum the gradients over processes (each holds a shard of every client's rows; losses are
        normalised by global counts, so the sum is the one-process gradient), then step. ``count_step=False``
        steps the raw optimiser, which Lightning does not count as a ``global_step``. ``slots``: the client slots
        this step moves (``None``: every slot; the others keep their weights and momentum, whatever the bank)."""
        if world_size() > 1:
            sum_gradients_over_processes([p for p in self.parameters() if p.requires_grad], self.device)
        self.adjust_gradients()
        banks.step_slots(self, opt, slots if self.schedule.partial_steps else None, count_step)

    def adjust_gradients(self) -> None:
        """Between the gradients (summed over processes) and the optimiser step, e.g. clipping; nothing here."""

    # ------------------------------------------------------------------ the global model
    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The global model ``[w_c, w_s]``: logits ``[B, N]`` (evaluated after every round), with what crosses the cut
        as deployed: the activation defences, then the activations' compressor (stochastic rounding rounds to nearest
        here); U-shaped, then the tail."""
        return self.shape.global_logits(self.client, self.server, self._crossing, x)

    def _crossing(self, crossing: str, rows: torch.Tensor) -> torch.Tensor:
        """What reaches the other side at inference of ``rows`` sent on ``crossing``: the activations defended, then
        decoded; the body's outputs decoded."""
        if crossing == "activations":
            rows = self.defences.upload(rows)
        return self.compression.evaluate(crossing, rows)


__all__ = ["ClientModule", "ServerModule", "SplitFedAlgorithm"]
