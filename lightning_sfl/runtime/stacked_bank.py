"""Client slots with stacked parameters: the ``S`` per-client copies run as one batched computation.

:class:`StackedBank` has the interface of :class:`~lightning_sfl.runtime.client_bank.SequentialBank` (the
reference it is tested against) but keeps, for every parameter ``p`` of the template, ONE ``nn.Parameter`` of
shape ``[S, *p.shape]``, and likewise one stacked buffer per buffer (BatchNorm running statistics are per client).
Slot ``j`` lives in row ``rows[j]`` of those tensors (the identity unless the bank moved its slots, see below).

A forward pass runs the template's layers for many slots at once on a tensor ``[R, G, ...]`` (``R`` rows of each
of ``G`` slots), layer by layer (:class:`~lightning_sfl.runtime.stacked_ops.StackedProgram`: a grouped
convolution, a batched matmul, BatchNorm over ``G·C`` channels; ``vmap`` of ``functional_call`` for any layer
without a rule, as in PyTorch's "model ensembling" tutorial).

Unequal client batch sizes ``B_k`` (eq. 3)
    The slots' rows are cut from the row-concatenated ``x``. :func:`plan_groups` splits the slots into groups;
    within a group every client's rows are padded with zeros to the group's largest ``B_k``, and the valid rows
    are gathered back into ``[B, ...]`` order, so padded rows never reach a loss (they receive a zero gradient).
    The plan weighs the padded rows against the fixed cost of one more group (``group_cost``). Layers that mix the
    rows of a batch (``batch_coupled``, default: every BatchNorm in train mode or without running statistics) would
    see padded rows in their batch statistics, so then only slots of equal ``B_k`` share a group (no padding).
    Outputs, gradients and the running-statistic updates equal the reference's.

Where slots live
    Right after a full reset of the slots and of their optimiser state every row holds the same state, so at the
    next forward the bank may move the slots (``rows``) so that each group is a slice of the stacked tensors,
    cut by one ``split`` whose backward writes the bank's gradient once (a gather per group would allocate, fill
    and add a bank-sized gradient per group). Every per-slot operation (views, subsets, snapshots, aggregation in
    slot order) goes through ``rows``; slots never move in a checkpointed bank or across processes.

Optimisers
    ``bank.parameters()`` yields ``S`` times fewer, ``S`` times larger tensors than SequentialBank's. SGD (with
    momentum, weight decay, Nesterov), Adam, AdamW, RMSprop... are elementwise, so one optimiser over the stacked
    parameters performs exactly each client's own update — PROVIDED every slot receives a gradient each step
    (true for one backward over all slots). Two things are NOT equivalent:

    * per-client gradient-norm clipping with ``clip_grad_norm_`` over a stacked tensor (it mixes all clients' norms;
      :meth:`StackedBank.clip_grad_norms_` clips each row on its own);
    * stepping the optimiser after backpropagating only SOME slots (e.g. SplitFedV2's client-after-client
      loop): the other slots then hold a zero gradient instead of ``None`` and momentum / weight decay still
      move them, where the reference skips them.

Per-slot access (:attr:`StackedBank.slots`)
    A read-only sequence of module-like views of the slots (:mod:`~lightning_sfl.runtime.stacked_slots`).

The template is kept on the ``meta`` device (not registered: it holds no state); only the stacked tensors are.
Mixed train/eval flags inside one slot are not supported: the template follows the bank's ``training`` flag.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from typing_extensions import override

from lightning_sfl.errors import ConfigError
from lightning_sfl.runtime.aggregate import normalized_weights
from lightning_sfl.runtime.client_bank import ClientBank, SequentialBank, Slots, slot_list
from lightning_sfl.runtime.stacked_ops import StackedProgram
from lightning_sfl.runtime.stacked_optim import keep_rows, reset_rows_, row_index, sgd_rows_, sgd_settings
from lightning_sfl.runtime.stacked_plan import Plan, build_plan, group_cost_rows, plan_groups
from lightning_sfl.runtime.stacked_slots import SlotTensor, StackedSlot, StackedSlots

__all__ = ["AUTO_STACKED_MIN_SLOTS_ASYNC_CPU", "AUTO_STACKED_MIN_SLOTS_CPU", "BANK_KINDS", "SlotTensor", "StackedBank"]
__all__ += ["StackedSlot", "StackedSlots", "make_bank"]

Tensors = dict[str, torch.Tensor]
#: ``(params [G, ...], buffers [G, ...], x [R, G, ...]) -> outputs [R, G, ...]``: a group of ``G`` slots at once.
_Apply = Callable[[Tensors, Tensors, torch.Tensor], tuple[torch.Tensor, ...]]

BANK_KINDS: tuple[str, ...] = ("auto", "sequential", "stacked")


def _uses_batch_statistics(module: nn.Module, training: bool) -> bool:
    if isinstance(module, _BatchNorm):
        return training or module.running_mean is None
    return True


class StackedBank(ClientBank):
    """``S`` copies of ``template`` as stacked tensors; slot ``k`` holds client ``C^i[k]``'s weights ``w_{c,k}``.

    Args:
        template: the module to copy (not modified, not kept: a ``meta``-device copy drives ``functional_call``).
        num_slots: ``S >= 1``.
        batch_coupled: module types whose output mixes the rows of a batch (default: BatchNorm, coupled in train
            mode or without running statistics). When one is active, slots are grouped by equal ``B_k`` instead
            of being padded (see the module docstring).
        group_cost: price of running one more group, in rows, when the slots' ``B_k`` differ (:func:`plan_groups`
            weighs it against the padded rows it saves); ``None``: estimated per input shape and device
            (:func:`.stacked_plan.group_cost_rows`: the template's layers times a device's per-layer cost over its
            forward FLOPs per row; cnn_small on a CPU: ~4 rows, AlexNet's client half ~1 row, so its groups are
            nearly unpadded and its memory that of the sequential bank).

    Attributes:
        stacked_params: one ``nn.Parameter`` ``[S, *p.shape]`` per template parameter, in template order.
        param_names: the template's names of the stacked parameters.
        buffer_names: the template's names of its buffers (registered here as ``buffer_<i>``, persistent iff the
            template's buffer is).
    """

    def __init__(
        self,
        template: nn.Module,
        num_slots: int,
        *,
        batch_coupled: tuple[type[nn.Module], ...] = (_BatchNorm,),
        group_cost: float | None = None,
    ) -> None:
        super().__init__()
        if num_slots < 1:
            raise ConfigError(f"num_slots={num_slots} must be >= 1")
        if group_cost is not None and not group_cost >= 0:
            raise ConfigError(f"group_cost={group_cost} must be >= 0 rows (or None: estimated from the template)")
        self.group_cost = group_cost
        self.num_slots = num_slots
        named_params = list(template.named_parameters())
        named_buffers = list(template.named_buffers())
        self.param_names: tuple[str, ...] = tuple(n for n, _ in named_params)
        self.buffer_names: tuple[str, ...] = tuple(n for n, _ in named_buffers)
        self.state_keys: tuple[str, ...] = tuple(template.state_dict().keys())
        self.stacked_params = nn.ParameterList(
            nn.Parameter(_repeat(p, num_slots), requires_grad=p.requires_grad) for _, p in named_params
        )
        for i, (name, b) in enumerate(named_buffers):
            self.register_buffer(f"buffer_{i}", _repeat(b, num_slots), persistent=name in self.state_keys)
        # Unregistered on purpose: its (meta) tensors must not show up in parameters()/state_dict()/.to().
        self.__dict__["template"] = copy.deepcopy(template).to("meta")
        self.__dict__["_coupled"] = [m for m in self.template.modules() if isinstance(m, batch_coupled)]
        self.__dict__["_compiled"] = None  # StackedPrograms of the template (whole, body, head), built on first use
        self.__dict__["_template_mode"] = None  # the training flag last given to the template's modules (_sync_mode)
        #: Row of the stacked tensors holding each slot (slot ``j`` lives in row ``rows[j]``): the identity until a
        #: forward right after a full reset re-places the slots so that its groups are slices (``_place``).
        self.rows: list[int] = list(range(num_slots))
        self._fresh = self._fresh_state = False  # every row reset (parameters / optimiser state) since the last forward
        self.__dict__["_plans"] = {}  # forward plans by pattern (_plan)
        self.__dict__["_costs"] = {}  # group cost in rows by input shape (_group_cost)

    # ------------------------------------------------------------------ structure
    def __len__(self) -> int:
        return self.num_slots

    @property
    def slots(self) -> StackedSlots:
        return StackedSlots(self)

    def stacked_buffers(self) -> list[torch.Tensor]:
        return [getattr(self, f"buffer_{i}") for i in range(len(self.buffer_names))]

    def named_stacked_buffers(self) -> Tensors:
        return dict(zip(self.buffer_names, self.stacked_buffers()))

    def named_stacked(self) -> Tensors:
        """Template name -> stacked tensor ``[S, ...]``, parameters then buffers."""
        return {**dict(zip(self.param_names, self.stacked_params)), **self.named_stacked_buffers()}

    @override
    def extra_repr(self) -> str:
        return f"num_slots={self.num_slots}, template={type(self.template).__name__}"

    def _sync_mode(self) -> None:
        """The template's train/eval flags follow the bank's (walked only when the bank's flag changed: this runs
        in every forward)."""
        if self._template_mode is not self.training:
            for m in self.template.modules():
                m.training = self.training
            self.__dict__["_template_mode"] = self.training

    # ------------------------------------------------------------------ round structure
    @torch.no_grad()
    @override
    def reset(self, source: nn.Module, slots: Slots = None) -> None:
        """Broadcast: the ``slots`` (default all) take ``source``'s parameters and buffers (in place: the Parameter
        objects, hence an optimiser built over ``bank.parameters()``, stay valid)."""
        if slots is not None:  # as the slots' load_state_dict(source.state_dict()) would, rows at once
            state = source.state_dict()
            if set(state) != set(self.state_keys):
                raise KeyError(f"state keys {sorted(state)} do not match the slot's {list(self.state_keys)}")
            targets, rows = self.named_stacked(), sorted(set(self._rows_of(slots)))
            for key, value in state.items():
                if key in targets and rows:
                    t = targets[key]
                    t[row_index(rows, t.device)] = value.to(t.device, t.dtype)
            self._fresh = False
            return
        src = {**dict(source.named_parameters()), **dict(source.named_buffers())}
        mine = self.named_stacked()
        if set(src) != set(mine):
            raise ValueError(f"source tensors {sorted(src)} do not match the bank's {sorted(mine)}")
        for name, t in mine.items():
            t.copy_(src[name].detach().unsqueeze(0).expand_as(t))
        self._fresh = True  # every row holds the same state: the next forward may choose where each slot lives

    @override
    def reset_optimizer_state(self, optimizer: torch.optim.Optimizer, slots: Slots = None) -> None:
        """All slots: drop the state of the stacked parameters. A subset: zero the slots' rows of every per-element
        state tensor (:func:`~lightning_sfl.runtime.stacked_optim.reset_rows_`: a fresh state for SGD without
        dampening; any other state cannot be reset per slot here: use ``client_bank=sequential``)."""
        if slots is None:
            for p in self.stacked_params:
                optimizer.state.pop(p, None)
            self._fresh_state = True
            return
        self._fresh = False
        reset_rows_(self.stacked_params, optimizer, self._rows_of(slots))

    @contextlib.contextmanager
    @override
    def steps_only(self, optimizer: torch.optim.Optimizer, slots: Slots = None):
        """``optimizer.step()`` inside moves only ``slots`` (bitwise what the sequential bank's optimiser does, which
        skips modules without a gradient; a momentum buffer the step creates starts at zero for the others, as
        :meth:`reset_optimizer_state` has it). Plain SGD: when the optimiser steps (a pre-step hook, so after whatever
        runs before it, such as a precision plugin's unscaling, and not at all when that skips the step), the slots'
        rows take SGD's step (:func:`~lightning_sfl.runtime.stacked_optim.sgd_rows_`) and the stacked parameters
        hide their gradients from the optimiser's own step; another optimiser: the other rows are copied before and
        written back after (:func:`~lightning_sfl.runtime.stacked_optim.keep_rows`; other per-parameter state,
        such as Adam's shared step count, cannot be kept per slot: ``ConfigError``)."""
        rows = sorted(set(self._rows_of(slots))) if slots is not None else list(range(len(self)))
        if len(rows) == len(self):
            yield
            return
        settings = sgd_settings(optimizer, self.stacked_params)
        if settings is None:
            absent = torch.tensor(sorted(set(range(len(self))) - set(rows)), dtype=torch.long)
            with keep_rows(self.stacked_params, optimizer, absent):
                yield
            return
        hidden: list[tuple[torch.Tensor, torch.Tensor]] = []  # (parameter, its gradient) while the optimiser steps

        def step_rows(opt, args, kwargs) -> None:
            grads = [(p, p.grad) for p in self.stacked_params if p.grad is not None]
            index = row_index(rows, grads[0][0].device) if grads else None
            for p, g in grads:
                sgd_rows_(p, g, opt.state[p], index, **settings)
                p.grad = None  # the step above was theirs
            hidden.extend(grads)

        def restore(opt=None, args=None, kwargs=None) -> None:
            for p, g in hidden:
                p.grad = g
            hidden.clear()

        handles = (optimizer.register_step_pre_hook(step_rows), optimizer.register_step_post_hook(restore))
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
            restore()  # a step that raised

    @torch.no_grad()
    @override
    def clip_grad_norms_(self, max_norm: float, slots: Slots = None) -> torch.Tensor:
        """Per-slot clipping on the stacked gradients: slot ``k``'s norm is over row ``k`` of every stacked
        gradient, and only that row is scaled."""
        rows = torch.tensor(self._rows_of(slots), dtype=torch.long)
        grads = [p.grad for p in self.stacked_params if p.grad is not None]
        if not grads:
            return torch.zeros(len(rows))
        rows = rows.to(grads[0].device)
        squares = sum(g.index_select(0, rows).float().flatten(1).pow(2).sum(1) for g in grads)
        norms = squares.sqrt()
        scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
        for g in grads:
            g[rows] *= scale.to(g.dtype).view(-1, *([1] * (g.dim() - 1)))
        return norms

    @override
    def snapshot(self, slot: int) -> dict[str, torch.Tensor]:
        """A detached copy of slot ``slot``'s state (its row of every stacked tensor of the state dict)."""
        row, stacked = self.rows[slot], self.named_stacked()
        return {key: stacked[key].detach()[row].clone() for key in self.state_keys}

    @torch.no_grad()
    @override
    def aggregate_into(self, target: nn.Module, weights: torch.Tensor, slots: Slots = None) -> None:
        """FL phase, eq. (10): ``target ← Σ_k w_k · slot_k / Σ_k w_k`` over ``slots`` (default all; float64 sum,
        cast back); integer buffers (``num_batches_tracked``) are not averaged: the first slot's value is kept, as
        in SequentialBank."""
        rows = self._rows_of(slots)  # summed in the order of the slots, wherever they live
        chosen = None if rows == list(range(self.num_slots)) else torch.tensor(rows, dtype=torch.long)
        count = len(rows)
        w = torch.as_tensor(weights)
        if w.shape != (count,):
            raise ValueError(f"weights must have shape [{count}], got {tuple(w.shape)}")
        stacked = self.named_stacked()
        p = None
        state: Tensors = {}
        for key in self.state_keys:
            t = stacked[key] if chosen is None else stacked[key].index_select(0, chosen.to(stacked[key].device))
            if t.is_floating_point():
                if p is None:
                    p = normalized_weights(w).to(t.device)
                state[key] = torch.tensordot(p, t.to(torch.float64), dims=1).to(t.dtype)
            else:
                state[key] = t[0].clone()
        target.load_state_dict(state)

    # ------------------------------------------------------------------ forward
    @override
    def forward(self, x: torch.Tensor, sizes: torch.Tensor, slots: Slots = None) -> torch.Tensor:
        """Run slot ``slots[i]`` (default ``i``) on its ``sizes[i]`` rows. ``x``: ``[B, ...]`` in that order."""
        program = self._programs()[0]
        return self._run(x, sizes, lambda p, b, xg: (program(p, b, xg),), slots)[0]

    @override
    def forward_features(
        self, x: torch.Tensor, sizes: torch.Tensor, slots: Slots = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Like :meth:`forward` for an ``nn.Sequential`` template, also returning the input of the last layer
        (the features ``z`` before the classifier): ``([B, D], [B, N])``."""
        _, body, head = self._programs()
        if body is None or head is None:
            raise TypeError("forward_features needs an nn.Sequential template")

        def apply(params: Tensors, buffers: Tensors, xg: torch.Tensor) -> tuple[torch.Tensor, ...]:
            feats = body(params, buffers, xg)
            return feats, head(params, buffers, feats)

        feats, logits = self._run(x, sizes, apply, slots)
        return feats, logits

    def _programs(self) -> tuple[StackedProgram, StackedProgram | None, StackedProgram | None]:
        """The template compiled (:class:`StackedProgram`), and for ``forward_features`` its body (all layers but
        the last) and head (the last layer), built on first use."""
        if self._compiled is None:
            whole = StackedProgram(self.template)
            body = head = None
            if isinstance(self.template, nn.Sequential) and len(self.template) >= 1:
                last = list(self.template._modules)[-1]
                body, head = StackedProgram(self.template[:-1]), StackedProgram(self.template[-1], f"{last}.")
            self.__dict__["_compiled"] = (whole, body, head)
        return self._compiled

    def _batch_coupled(self) -> bool:
        return any(_uses_batch_statistics(m, self.training) for m in self._coupled)

    def _run(self, x: torch.Tensor, sizes: torch.Tensor, apply: _Apply, slots: Slots) -> tuple[torch.Tensor, ...]:
        """Evaluate ``apply`` for every chosen slot on its rows; outputs concatenated in row order (see
        ``_plan``)."""
        self._sync_mode()
        plan = self._plan(x, sizes, slots)
        if plan.whole:  # one group of every block, none padded: the rows as they are
            g, r = len(plan.groups[0][0]), plan.groups[0][1]
            ys = self._apply_group(plan.groups[0][0], x.view(g, r, *x.shape[1:]).transpose(0, 1), apply)
            return tuple(y.transpose(0, 1).reshape(len(x), *y.shape[2:]) for y in ys)
        if plan.padded:
            x = torch.cat([x, x.new_zeros((1, *x.shape[1:]))])  # row len(x): the padding
        parts = self._split_params(plan)
        outs: list[tuple[torch.Tensor, ...]] = []
        # index_select, not x[index]: a quarter of the cost of advanced indexing here, and half of its backward
        for (idx, rows), part, (pos, valid) in zip(plan.groups, parts, plan.gathers):
            ys = self._apply_group(idx, x.index_select(0, pos).view(rows, len(idx), *x.shape[1:]), apply, part)
            outs.append(tuple(y.reshape(-1, *y.shape[2:]) if valid is None
                              else y.reshape(-1, *y.shape[2:]).index_select(0, valid) for y in ys))  # fmt: skip
        result = []
        for i in range(len(outs[0])):
            y = torch.cat([o[i] for o in outs]) if len(outs) > 1 else outs[0][i]
            result.append(y if plan.inverse is None else y.index_select(0, plan.inverse))
        return tuple(result)

    def _plan(self, x: torch.Tensor, sizes: torch.Tensor, slots: Slots) -> Plan:
        """How the row blocks of ``x`` (``sizes[k]`` rows for slot ``slots[k]``) run: the groups of
        :func:`plan_groups` with the rows of the stacked tensors that run them, the gather of each group's input in
        ``[R, G]`` order (padding: row ``len(x)``), and the permutation back to row order. Right after a full reset the
        slots are first placed so that the groups are slices (``_place``). Cached per pattern (a synchronous
        round repeats its ``B_k`` every local iteration)."""
        sizes_l = [int(s) for s in torch.as_tensor(sizes).tolist()]
        slot_of = slot_list(slots, self.num_slots)
        if len(sizes_l) != len(slot_of) or sum(sizes_l) != len(x) or min(sizes_l) < 0:
            raise ValueError(f"sizes {sizes_l} do not split {len(x)} rows into {len(slot_of)} slots")
        coupled = self._batch_coupled()
        cost = self._group_cost(x) if self.group_cost is None else self.group_cost
        positions = None
        if self._fresh and self._fresh_state and self._may_move_slots():
            positions = plan_groups(sizes_l, equal_sizes=coupled, group_cost=cost)
            self._place(positions, slot_of)
        self._fresh = self._fresh_state = False
        rows_of = [self.rows[j] for j in slot_of]  # from here on: rows of the stacked tensors
        key = (tuple(sizes_l), tuple(rows_of), coupled, cost, x.device)
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        if positions is None:
            positions = plan_groups(sizes_l, equal_sizes=coupled, group_cost=cost)
        if len(self._plans) >= 8:
            self._plans.clear()
        plan = self._plans[key] = build_plan(positions, sizes_l, rows_of, x.device, self.num_slots)
        return plan

    def _group_cost(self, x: torch.Tensor) -> float:
        """The price of one more group in rows for inputs like ``x`` (:func:`.stacked_plan.group_cost_rows`), once per
        input shape and device type."""
        key = (tuple(x.shape[1:]), x.device.type)
        if key not in self._costs:
            self._costs[key] = group_cost_rows(self.template, len(self._programs()[0].steps), x)
        return self._costs[key]

    def _may_move_slots(self) -> bool:
        """Slots may change rows when nothing outside the bank depends on where they live: not in a checkpointed bank
        (its state dict is saved row by row) and not across processes (DDP sums gradients row by row, and every
        process sees other ``B_k``)."""
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        return not self.checkpointed and not (distributed and torch.distributed.get_world_size() > 1)

    def _place(self, groups: list[tuple[list[int], int]], slot_of: list[int]) -> None:
        """Right after a full reset of the slots and of their optimiser state every row holds the same state, so the
        slots can move to any rows: put each group's slots in consecutive rows, in the group's order (a group is then
        a slice of the stacked tensors: no gather of its parameters, whose backward would allocate and add a gradient
        the size of the whole bank per group)."""
        order = [slot_of[k] for idx, _ in groups for k in idx]
        placed = set(order)
        order += [j for j in range(self.num_slots) if j not in placed]
        rows = [0] * self.num_slots
        for row, j in enumerate(order):
            rows[j] = row
        self.rows = rows

    def _rows_of(self, slots: Slots) -> list[int]:
        """The rows of the stacked tensors that hold ``slots`` (default all), in that order."""
        return [self.rows[j] for j in slot_list(slots, self.num_slots)]

    def _split_params(self, plan: Plan) -> list[Tensors | None]:
        """When the groups' rows are disjoint ranges (as ``_place`` arranges them), the stacked parameters cut
        into those ranges by ONE ``torch.split`` each (``plan.cuts``), whose backward writes the bank's gradient once
        (a slice per group would allocate, fill and add a bank-sized gradient per group); otherwise ``None`` per
        group."""
        if plan.cuts is None:
            return [None] * len(plan.groups)
        cuts, chunk_of = plan.cuts
        chunks = {n: t.split(cuts) for n, t in zip(self.param_names, self.stacked_params)}
        return [{n: c[chunk_of[i]] for n, c in chunks.items()} for i in range(len(plan.groups))]

    def _apply_group(
        self, idx: list[int], xg: torch.Tensor, apply: _Apply, params: Tensors | None = None
    ) -> tuple[torch.Tensor, ...]:
        """``apply`` for the slots in rows ``idx`` on ``xg`` ``[R, G, ...]`` (row ``r`` of the slot in row ``idx[g]``:
        ``xg[r, g]``).

        Parameters are differentiable slices of the stacked ones (``params``: already cut, see ``_split_params``);
        buffers are views (in-place running-statistic updates write through) except for a non-contiguous group,
        whose buffers are gathered and written back.
        """
        stacked, buffers = self.stacked_params, self.stacked_buffers()
        contiguous = idx == list(range(idx[0], idx[-1] + 1))
        if contiguous:
            sl = slice(idx[0], idx[-1] + 1)
            whole = sl == slice(0, self.num_slots)
            p = params or {n: t if whole else t[sl] for n, t in zip(self.param_names, stacked)}
            b = {n: t if whole else t[sl] for n, t in zip(self.buffer_names, buffers)}
        else:
            index = torch.tensor(idx, device=xg.device)
            p = {n: t.index_select(0, index.to(t.device)) for n, t in zip(self.param_names, stacked)}
            b = {n: t.index_select(0, index.to(t.device)) for n, t in zip(self.buffer_names, buffers)}
        ys = apply(p, b, xg)
        if not contiguous:
            with torch.no_grad():
                for name, t in zip(self.buffer_names, buffers):
                    t.index_copy_(0, index.to(t.device), b[name])
        return ys


def _repeat(t: torch.Tensor, num_slots: int) -> torch.Tensor:
    """``[S, *t.shape]`` copy of ``t`` repeated along a new leading dimension (contiguous, detached)."""
    return t.detach().unsqueeze(0).expand(num_slots, *t.shape).clone()


#: ``client_bank="auto"`` on a CPU: the stacked bank from this many slots on (for models without BatchNorm).
AUTO_STACKED_MIN_SLOTS_CPU = 10
#: The same for the asynchronous arrivals of a split method in waves (``C`` slots, a few arriving a step):
#: ``benchmarks/async_arrivals.py`` (GAS, digits) measured the sequential bank faster at ``C`` = 10, the two even at 15,
#: the stacked bank faster at 20 and 50.
AUTO_STACKED_MIN_SLOTS_ASYNC_CPU = 16


def make_bank(
    template: nn.Module,
    num_slots: int,
    kind: str = "auto",
    device: torch.device | str | None = None,
    min_slots_cpu: int = AUTO_STACKED_MIN_SLOTS_CPU,
) -> SequentialBank | StackedBank:
    """Build the client bank ``kind``: ``"sequential"`` (:class:`SequentialBank`), ``"stacked"``
    (:class:`StackedBank`) or ``"auto"``, what ``benchmarks/client_scaling.py`` measured faster: stacked on CUDA; on a
    CPU stacked from ``min_slots_cpu`` slots on (default :data:`AUTO_STACKED_MIN_SLOTS_CPU`; the asynchronous arrivals
    in waves pass :data:`AUTO_STACKED_MIN_SLOTS_ASYNC_CPU`), unless the template has BatchNorm layers (their batch
    statistics need groups of equal ``B_k``, i.e. many small groups), else sequential (the benchmarks measure both).
    Other steps that leave slots out train one client a step and run the sequential bank
    (:func:`~lightning_sfl.runtime.federated.checked_schedule`).
    ``device``: where the bank will run; default the template's, but in a LightningModule's ``setup`` the template is
    still on the CPU: pass ``trainer.strategy.root_device``."""
    if kind not in BANK_KINDS:
        raise ConfigError(f"client_bank={kind!r} is not one of: {', '.join(BANK_KINDS)}")
    if kind == "auto":
        if device is None:
            ref = next(iter(template.parameters()), None)
            device = ref.device if ref is not None else "cpu"
        if torch.device(device).type == "cuda":
            kind = "stacked"
        else:
            batch_norm = any(isinstance(m, _BatchNorm) for m in template.modules())
            kind = "stacked" if num_slots >= min_slots_cpu and not batch_norm else "sequential"
    return StackedBank(template, num_slots) if kind == "stacked" else SequentialBank(template, num_slots)
