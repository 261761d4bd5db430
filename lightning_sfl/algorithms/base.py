"""The coordinating loop of split federated learning.

One ``LightningModule`` coordinates a whole run (manual optimisation):

* **epoch = one global round** ``i``; **training step = one local iteration** ``t`` (``T`` steps per epoch);
* the first step of a round (:meth:`SplitFedAlgorithm.start_round`) broadcasts the global client half
  ``w_c`` into the ``S`` client slots (the batch tells which clients they are);
* ``training_step`` runs the method's local iteration (:meth:`SplitFedAlgorithm.local_iteration`);
* after the ``T``-th step, the FL phase aggregates the slots weighted by ``|D_k|`` (eq. 10). It runs in the
  last training step rather than ``on_train_epoch_end`` because Lightning validates *before*
  ``on_train_epoch_end``: evaluation must see the aggregated model.

The server half (``ServerModule``) and the global client half (``ClientModule``) are LightningModules held
as submodules. With the defaults (plain cross-entropy, one server half) this is MiniBatch-SFL; methods
override :meth:`server_prior` / :meth:`client_prior`, the losses, or the whole local iteration.
"""

from __future__ import annotations

from typing import ClassVar

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch import nn
from torchmetrics.classification import MulticlassAccuracy

from lightning_sfl.algorithms.client_bank import SequentialBank
from lightning_sfl.algorithms.losses import logit_adjusted_cross_entropy, per_client_mean
from lightning_sfl.algorithms.stacked_bank import BANK_KINDS, StackedBank, make_bank
from lightning_sfl.data.selection import build_selection
from lightning_sfl.errors import ConfigError, NonFiniteError
from lightning_sfl.models import build_model, split_model
from lightning_sfl.system.comm import CommLedger, module_bytes

BANKS = (SequentialBank, StackedBank)


class ClientModule(L.LightningModule):
    """Client-side half ``h(w_c; X) -> A``: ``[B, C, H, W] -> [B, *activation_shape]``."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class ServerModule(L.LightningModule):
    """Server-side half ``l(w_s; A) -> s``: ``[B, *activation_shape] -> [B, N]`` logits."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return self.net(a)


class SplitFedAlgorithm(L.LightningModule):
    """Base of every method: builds the split model, runs rounds, aggregates, evaluates.

    Args:
        arch: model name (see ``lightning_sfl.models.MODELS``).
        split_point: cut point ``s1``…``s5`` (shallow to deep); the client holds the layers before it.
        local_iters: ``T``, local iterations per global round.
        lr: ``η``, SGD learning rate of clients and server.
        momentum: SGD momentum (the papers use plain SGD: 0).
        weight_decay: SGD weight decay.
        num_classes: ``N`` (linked from the data module by the CLI).
        input_shape: ``(C, H, W)`` of one sample (linked from the data module by the CLI).
        client_selection: policy choosing the clients of a round (``lightning_sfl.data.selection``);
            ``None``: the method's own (``default_selection``: uniform, Fed-CBS for FedCBS, class-balanced for
            CS-SFL).
        client_bank: how the round's client copies run: ``sequential`` (one module per client, one after
            another), ``stacked`` (parameters stacked on a client dimension, one ``vmap`` call) or ``auto``
            (stacked on CUDA, sequential on CPU — what the benchmark shows faster on each).
    """

    #: False for plain FL methods: the "client half" is the whole model and there is no server half.
    split: ClassVar[bool] = True
    #: Client-selection policy used when ``client_selection`` is not given.
    default_selection: ClassVar[str] = "uniform"
    #: True: one server-half copy per selected client, trained on that client's activations only and averaged
    #: each round (SplitFedV1); False: one server half trained on the concatenated activations (eq. 5-7).
    server_copies: bool = False

    def __init__(
        self,
        arch: str = "cnn_small",
        split_point: str = "s2",
        local_iters: int = 5,
        lr: float = 0.01,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        num_classes: int = 10,
        input_shape: tuple[int, int, int] = (1, 8, 8),
        client_selection: str | None = None,
        client_bank: str = "auto",
    ) -> None:
        super().__init__()
        if local_iters < 1:
            raise ConfigError(f"local_iters={local_iters} must be >= 1")
        if not lr > 0:
            raise ConfigError(f"lr={lr} must be > 0")
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.local_iters, self.lr, self.momentum, self.weight_decay = local_iters, lr, momentum, weight_decay
        self.num_classes = num_classes
        self.selection = build_selection(client_selection or self.default_selection)
        if client_bank not in BANK_KINDS:
            raise ConfigError(f"client_bank={client_bank!r} is not one of: {', '.join(BANK_KINDS)}")
        self.client_bank = client_bank
        net = build_model(arch, num_classes, tuple(input_shape))
        client_net, server_net = split_model(net, split_point) if self.split else (net[:], nn.Sequential())
        self.client = ClientModule(client_net)
        self.server = ServerModule(server_net)
        self.bank: SequentialBank | None = None
        self.local_step = 0
        self.server_bank: SequentialBank | None = None
        self.ledger = CommLedger()
        self.val_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_acc_per_class = MulticlassAccuracy(num_classes, average="none")

    # ------------------------------------------------------------------ setup
    def setup(self, stage: str) -> None:
        if stage != "fit":
            return
        dm = self.trainer.datamodule
        dm.set_local_iters(self.local_iters)
        dm.set_selection(self.selection)
        if dm.num_classes != self.num_classes:
            raise ConfigError(f"num_classes={self.num_classes} does not match the dataset's {dm.num_classes} classes")
        self.register_buffer("client_sizes", dm.client_sizes.clone(), persistent=False)
        self.register_buffer("label_dist", dm.label_distribution.to(torch.float32), persistent=False)
        self.bank = self.make_bank(self.client.net, dm.clients_per_round)
        if self.server_copies:
            self.server_bank = self.make_bank(self.server.net, dm.clients_per_round)

    def make_bank(self, template: nn.Module, num_slots: int) -> SequentialBank | StackedBank:
        """A bank of ``num_slots`` copies of ``template`` of the configured kind (``client_bank``)."""
        return make_bank(template, num_slots, self.client_bank, device=self.trainer.strategy.root_device)

    def banks(self) -> list[SequentialBank]:
        """Every per-client copy set of this method (rebuilt each round, not checkpointed)."""
        return [m for m in self.children() if isinstance(m, BANKS)]

    def slot_parameters(self) -> list[nn.Parameter]:
        """Parameters that are reset every round (client slots and per-client server copies)."""
        return [p for bank in self.banks() for p in bank.parameters()]

    def server_parameters(self) -> list[nn.Parameter]:
        return [] if self.server_bank is not None else list(self.server.parameters())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """One SGD over all slots and the server: one ``global_step`` per local iteration."""
        groups = [{"params": self.slot_parameters(), "name": "client_slots"}]
        if self.server_parameters():
            groups.append({"params": self.server_parameters(), "name": "server"})
        return torch.optim.SGD(groups, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)

    # ------------------------------------------------------------------ round structure
    def start_round(self, batch: dict[str, torch.Tensor]) -> None:
        """Round start (first local iteration): broadcast ``w_c`` into the slots of ``batch["clients"]``."""
        self.bank.reset(self.client.net)
        self.ledger.add("down", self.client_kind, module_bytes(self.client.net))
        if self.server_bank is not None:
            self.server_bank.reset(self.server.net)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._disable_ddp_reducer()
        if batch_idx == 0:
            self.ledger.start(len(self.bank))
            opt = self.optimizers()
            for p in self.slot_parameters():  # FL-style: client optimiser state starts fresh every round
                opt.optimizer.state.pop(p, None)
            self.start_round(batch)
        self.local_step = batch_idx
        server_loss, client_loss = self.local_iteration(batch)
        if self.world_size > 1:  # each process holds its shard's part of the (globally normalised) losses
            server_loss, client_loss = (
                self.trainer.strategy.reduce(v.detach().clone(), reduce_op="sum") for v in (server_loss, client_loss)
            )
        for name, loss in (("server loss", server_loss), ("client loss", client_loss)):
            if not torch.isfinite(loss):
                self.check_finite(name, loss.detach().expand(len(batch["y"])), batch)
        self.log("train/server_loss", server_loss.detach(), on_step=False, on_epoch=True, batch_size=len(batch["y"]))
        self.log("train/client_loss", client_loss.detach(), on_step=False, on_epoch=True, batch_size=len(batch["y"]))
        if batch_idx == self.local_iters - 1:
            self.aggregate(batch)
            bad = [
                n for n, p in self.named_parameters() if n.startswith(("client.", "server.")) and not p.isfinite().all()
            ]
            if bad:  # never let a broken global model reach evaluation or a checkpoint
                raise NonFiniteError(
                    f"non-finite global weights ({bad[0]}) after aggregating round {self.current_epoch + 1}; "
                    f"stopped, the last checkpoint is from round {self.current_epoch}"
                )

    def check_finite(self, what: str, values: torch.Tensor, batch: dict[str, torch.Tensor]) -> None:
        """NaN/Inf guard for per-row values ``[B, ...]``: stop the run naming the round, the local iteration and
        the clients whose rows are affected. The last checkpoint (previous round) stays on disk untouched."""
        bad = ~torch.isfinite(values.detach().reshape(len(values), -1)).all(dim=1)
        flag = bad.any().to(torch.int32)
        if self.world_size > 1:  # every process stops together (no process left waiting in a collective)
            flag = self.trainer.strategy.reduce(flag, reduce_op="sum")
        if flag:
            clients = batch["clients"][torch.unique(batch["slot"][bad])].tolist() or "on another process"
            raise NonFiniteError(
                f"non-finite {what} in round {self.current_epoch + 1}, local iteration {self.local_step + 1}, "
                f"client(s) {clients}; stopped, the last checkpoint is from round {self.current_epoch}"
            )

    def aggregate(self, batch: dict[str, torch.Tensor]) -> None:
        """FL phase (eq. 10): global halves ← ``|D_k|``-weighted averages of the round's copies."""
        weights = self.client_sizes[batch["clients"]]
        self.bank.aggregate_into(self.client.net, weights)
        self.ledger.add("up", self.client_kind, module_bytes(self.client.net))
        if self.server_bank is not None:
            self.server_bank.aggregate_into(self.server.net, weights)

    @property
    def client_kind(self) -> str:
        """What the clients download and upload each round: ``client_half`` or (plain FL) ``full_model``."""
        return "client_half" if self.split else "full_model"

    # ------------------------------------------------------------------ one local iteration
    def server_forward(self, a: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, N]`` of the server half (or of each client's server copy) on activations ``a``."""
        return self.server(a) if self.server_bank is None else self.server_bank(a, sizes)

    # ------------------------------------------------------------------ several processes
    @property
    def world_size(self) -> int:
        return self.trainer.world_size if self._trainer is not None else 1

    def _disable_ddp_reducer(self) -> None:
        """Under DDP the gradients are all-reduced by :meth:`step`, not by DDP's hooks (a local iteration makes
        several backward passes over disjoint parameter sets, which DDP's reducer does not support). Lightning
        turns the reducer back on after every manual-optimisation forward, so this runs in every step."""
        from torch.nn.parallel import DistributedDataParallel

        if self._trainer is not None and isinstance(self.trainer.strategy.model, DistributedDataParallel):
            self.trainer.strategy.model.require_backward_grad_sync = False

    def step(self, opt, count_step: bool = True) -> None:
        """Sum the gradients over processes (each holds a shard of every client's rows; losses are normalised
        by global counts, so the sum is the one-process gradient), then step. ``count_step=False`` steps the
        raw optimiser, which Lightning does not count as a ``global_step``."""
        if self.world_size > 1:
            params = [p for p in self.parameters() if p.requires_grad]
            has_grad = torch.tensor([p.grad is not None for p in params], dtype=torch.int32, device=self.device)
            torch.distributed.all_reduce(has_grad, op=torch.distributed.ReduceOp.MAX)  # a client may have no rows here
            for p, used in zip(params, has_grad.tolist()):
                if used:
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                    torch.distributed.all_reduce(p.grad, op=torch.distributed.ReduceOp.SUM)
        (opt.step() if count_step else opt.optimizer.step())

    def server_prior(self, batch: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """Label distribution added (as ``log``) to the logits of the server loss; ``None``: plain CE."""
        return None

    def client_prior(self, batch: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """Label distribution added (as ``log``) to the logits of the clients' loss; ``None``: plain CE."""
        return None

    def server_loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Loss whose gradient updates the server weights ``w_s`` (eq. 7): the mean over the concatenated
        batch, or with server copies the sum over copies of each copy's mean over its client's rows."""
        prior = self.server_prior(batch)
        if self.server_bank is None:
            return self.concat_mean_loss(logits, batch, prior)
        rows = logit_adjusted_cross_entropy(logits, batch["y"], prior, "none")
        return per_client_mean(rows, batch["slot"], batch["sizes"])

    def concat_mean_loss(
        self, logits: torch.Tensor, batch: dict[str, torch.Tensor], prior: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(Logit-adjusted) cross-entropy averaged over the whole concatenated batch of ``B`` rows; on a DDP
        shard, the shard's sum divided by the global ``B`` (the gradient all-reduce adds the shards)."""
        total = int(batch["sizes"].sum())
        if len(batch["y"]) == total:
            return logit_adjusted_cross_entropy(logits, batch["y"], prior)
        return logit_adjusted_cross_entropy(logits, batch["y"], prior, "sum") / total

    def client_loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Loss whose gradient w.r.t. the activations is sent to the clients (eq. 8): each client's mean
        over its own ``B_k`` rows, summed over clients."""
        rows = logit_adjusted_cross_entropy(logits, batch["y"], self.client_prior(batch), "none")
        return per_client_mean(rows, batch["slot"], batch["sizes"])

    def local_iteration(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Client forward → server forward on the concatenation → server update and client gradients from
        the same (pre-update) forward → every client backpropagates its ``G_k`` and steps."""
        opt = self.optimizers()
        opt.zero_grad()
        acts = self.bank(batch["x"], batch["local_sizes"])  # A = concat_k A_k, [B, *act]
        self.check_finite("activations", acts, batch)
        self.ledger.add_rows("up", "activations", acts, batch["sizes"])
        self.ledger.add_rows("up", "labels", batch["y"], batch["sizes"])
        a = acts.detach().requires_grad_(True)
        logits = self.server_forward(a, batch["local_sizes"])  # [B, N]
        self.check_finite("logits", logits, batch)
        server_loss = self.server_loss(logits, batch)
        client_loss = self.client_loss(logits, batch)
        (grad_a,) = torch.autograd.grad(client_loss, a, retain_graph=True)  # rows of client k: G_k
        self.ledger.add_rows("down", "gradients", grad_a, batch["sizes"])
        self.manual_backward(server_loss)
        self.manual_backward(acts, grad_a)
        self.step(opt)
        return server_loss, client_loss

    # ------------------------------------------------------------------ evaluation
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The global model ``[w_c, w_s]``: logits ``[B, N]``."""
        return self.server(self.client(x))

    def _eval_step(self, batch: dict[str, torch.Tensor]) -> None:
        preds = self(batch["x"]).argmax(dim=1)
        self.val_acc.update(preds, batch["y"])
        self.val_acc_per_class.update(preds, batch["y"])

    def _eval_epoch_end(self, prefix: str) -> None:
        per_class = self.val_acc_per_class.compute()
        self.log(f"{prefix}/acc", self.val_acc.compute())
        self.log_dict({f"{prefix}/acc_class_{c}": v for c, v in enumerate(per_class)})
        fitting = self.trainer.state.fn == TrainerFn.FITTING
        self.log("round", float(self.current_epoch + 1 if fitting else self.current_epoch))  # rounds completed
        self.val_acc.reset()
        self.val_acc_per_class.reset()

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._eval_step(batch)

    def on_validation_epoch_end(self) -> None:
        self._eval_epoch_end("test")

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._eval_step(batch)

    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end("test")

    # ------------------------------------------------------------------ checkpoints
    def _bank_prefixes(self) -> tuple[str, ...]:
        return tuple(f"{name}." for name, m in self.named_children() if isinstance(m, BANKS))

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Client slots are rebuilt from the global halves at every round start: not saved."""
        prefixes = self._bank_prefixes()
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if not k.startswith(prefixes)}
        checkpoint["lightning_sfl"] = {"algorithm": f"lightning_sfl.algorithms.{type(self).__name__}"}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        for name, m in self.named_children():
            if isinstance(m, BANKS):
                checkpoint["state_dict"].update({f"{name}.{k}": v for k, v in m.state_dict().items()})
