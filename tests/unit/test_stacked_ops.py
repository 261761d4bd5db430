"""The batched client path: per-layer rules of StackedProgram against a per-slot reference, the group planner against
a brute-force optimum, the placement of slots after a round's reset, the choice of ``client_bank="auto"``, and the
allocator settings that keep the stacked gradients' pages."""

from __future__ import annotations

import copy
import itertools
import subprocess
import sys
import textwrap

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from lightning_sfl.errors import ConfigError
from lightning_sfl.models import build_model, split_model
from lightning_sfl.runtime.client_bank import SequentialBank
from lightning_sfl.runtime.stacked_bank import StackedBank, make_bank
from lightning_sfl.runtime.stacked_ops import StackedProgram
from lightning_sfl.runtime.stacked_plan import plan_groups


class Scale(nn.Module):
    """A layer no rule knows (runs through the vmap fallback)."""

    def __init__(self) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.tensor(1.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gain


def _every_rule() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(2, 6, 3, stride=2, padding=1, dilation=1, groups=2),
        nn.BatchNorm2d(6),
        nn.LeakyReLU(0.1),
        nn.Conv2d(6, 4, 3, padding=2, dilation=2, bias=False),
        nn.Sequential(nn.AvgPool2d(2), Scale()),  # nested Sequential, fallback layer
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(16, 5, bias=False),
        nn.BatchNorm1d(5),
        nn.Tanh(),
        nn.Dropout(0.5),
        nn.Linear(5, 3),
    )


def _slot_weights(net: nn.Module, slots: int) -> tuple[dict, dict]:
    torch.manual_seed(0)
    params = {n: (p.detach() + 0.1 * torch.randn(slots, *p.shape)).requires_grad_() for n, p in net.named_parameters()}
    buffers = {n: b.detach().expand(slots, *b.shape).clone() for n, b in net.named_buffers()}
    for name, b in buffers.items():
        if name.endswith("running_var"):
            b.mul_(1 + torch.rand_like(b))
    return params, buffers


@pytest.mark.parametrize("training", [True, False])
def test_program_rules_equal_each_slot_run_alone(training):
    """Every rule (grouped conv with stride, dilation and groups, Linear with and without bias, BatchNorm 1d/2d with
    running statistics, pooling, Flatten, elementwise layers, the vmap fallback in a nested Sequential) against
    ``functional_call`` of each slot on its own rows: outputs, parameter gradients and running statistics (float64)."""
    net = _every_rule().double().train(training)
    program = StackedProgram(net)
    assert [s.rule for s in program.steps] == [
        "conv2d", "batch_norm", "as_is", "conv2d", "per_sample", "vmap", "per_sample", "per_sample", "linear",
        "batch_norm", "as_is", "as_is", "linear",
    ]  # fmt: skip
    if training:  # dropout masks are random: compare without them
        net[10].p = 0.0
    slots, rows = 3, 4
    params, buffers = _slot_weights(net.double(), slots)
    params = {n: p.detach().double().requires_grad_() for n, p in params.items()}
    buffers = {n: b.double() if b.is_floating_point() else b for n, b in buffers.items()}
    ref_params = {n: p.detach().clone().requires_grad_() for n, p in params.items()}
    ref_buffers = {n: b.clone() for n, b in buffers.items()}
    x = torch.randn(rows, slots, 2, 8, 8, dtype=torch.float64)
    out = program(params, buffers, x)
    out.square().sum().backward()
    for g in range(slots):
        p = {n: t[g] for n, t in ref_params.items()}
        b = {n: t[g] for n, t in ref_buffers.items()}
        want = torch.func.functional_call(net, (p, b), (x[:, g],))
        torch.testing.assert_close(out[:, g], want)
        want.square().sum().backward()
    for name in params:
        torch.testing.assert_close(params[name].grad, ref_params[name].grad, msg=name)
    for name in buffers:
        torch.testing.assert_close(buffers[name], ref_buffers[name], msg=name)
    assert training == bool((buffers["1.num_batches_tracked"] == 1).all())


def _plan_cost(plan: list[tuple[list[int], int]], group_cost: float) -> float:
    return sum(group_cost + len(idx) * rows for idx, rows in plan)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 7), min_size=1, max_size=9), st.sampled_from([0.0, 1.0, 2.5, 6.0]))
def test_plan_groups_is_the_cheapest_partition_into_size_ranges(sizes, group_cost):
    """Against brute force over every way to cut the sorted distinct sizes into consecutive ranges; every block with
    rows is in exactly one group, padded to at least its size."""
    plan = plan_groups(sizes, group_cost=group_cost)
    placed = sorted(k for idx, _ in plan for k in idx)
    assert placed == [k for k, b in enumerate(sizes) if b > 0]
    assert all(sizes[k] <= rows for idx, rows in plan for k in idx)
    distinct = sorted({b for b in sizes if b > 0})
    best = float("inf")
    for cuts in itertools.product([False, True], repeat=max(len(distinct) - 1, 0)):
        cost, members = 0.0, 0
        for i, d in enumerate(distinct):
            members += sizes.count(d)
            if i == len(distinct) - 1 or cuts[i]:
                cost, members = cost + group_cost + members * d, 0
        best = min(best, cost)
    assert _plan_cost(plan, group_cost) == pytest.approx(best if distinct else 0.0)
    equal = plan_groups(sizes, equal_sizes=True)
    assert all(sizes[k] == rows for idx, rows in equal for k in idx)


def _round(bank, opt, x, sizes, cotangent_seed: int, steps: int = 2) -> list[torch.Tensor]:
    outs = []
    for i in range(steps):
        opt.zero_grad()
        out = bank(x, sizes)
        cot = torch.randn(out.shape, generator=torch.Generator().manual_seed(cotangent_seed + i), dtype=out.dtype)
        out.backward(cot)
        opt.step()
        outs.append(out.detach())
    return outs


@pytest.mark.parametrize("write_a_slot", [False, True])
def test_slots_placed_after_a_reset_compute_what_the_reference_does(write_a_slot):
    """A round: reset every slot and its optimiser state, then unequal ``B_k`` whose groups are not slices. The bank
    places the slots (``rows`` changes) unless a slot was written after the reset; either way outputs, momentum steps,
    slot views, snapshots and the aggregate equal the sequential bank's (float64)."""
    net = split_model(build_model("cnn_small", 10, (1, 8, 8)), "s2")[0].double()
    sizes = torch.tensor([2, 1, 1, 2, 1])  # group_cost 0: sizes 1 (slots 1, 2, 4) and 2 (slots 0, 3)
    seq, stk = SequentialBank(net, 5), StackedBank(net, 5, group_cost=0.0)
    x = torch.randn(7, 1, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    global_half = copy.deepcopy(net)
    with torch.no_grad():
        for p in global_half.parameters():
            p.add_(0.01)
    outs = {}
    for name, bank in (("seq", seq), ("stk", stk)):
        opt = torch.optim.SGD(bank.parameters(), lr=0.1, momentum=0.9)
        _round(bank, opt, x, sizes, 0)  # a previous round: momentum state, slots differ
        bank.reset(global_half)
        bank.reset_optimizer_state(opt)
        if write_a_slot:  # SplitFedV3 loads a client's own half into its slot after the reset
            new = torch.nn.utils.parameters_to_vector(bank.slots[3].parameters()).detach() + 0.5
            torch.nn.utils.vector_to_parameters(new, bank.slots[3].parameters())
        outs[name] = _round(bank, opt, x, sizes, 10)
    assert stk.rows == ([0, 1, 2, 3, 4] if write_a_slot else [3, 0, 1, 4, 2])
    for a, b in zip(outs["seq"], outs["stk"]):
        torch.testing.assert_close(b, a)
    for k in range(5):
        for key, value in seq.slots[k].state_dict().items():
            torch.testing.assert_close(stk.slots[k].state_dict()[key], value, msg=f"slot {k} {key}")
            torch.testing.assert_close(stk.snapshot(k)[key], value)
    weights = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    targets = [copy.deepcopy(net), copy.deepcopy(net)]
    seq.aggregate_into(targets[0], weights)
    stk.aggregate_into(targets[1], weights)
    for key, value in targets[0].state_dict().items():
        torch.testing.assert_close(targets[1].state_dict()[key], value, msg=key)
    subset = copy.deepcopy(net)
    stk.aggregate_into(subset, weights[[4, 1]], slots=[4, 1])
    seq.aggregate_into(targets[0], weights[[4, 1]], slots=[4, 1])
    for key, value in targets[0].state_dict().items():
        torch.testing.assert_close(subset.state_dict()[key], value, msg=key)


def test_auto_bank_is_stacked_on_cpu_from_ten_slots_without_batch_norm():
    half = split_model(build_model("cnn_small", 10, (1, 8, 8)), "s2")[0]
    assert isinstance(make_bank(half, 9, "auto", device="cpu"), SequentialBank)
    assert isinstance(make_bank(half, 10, "auto", device="cpu"), StackedBank)
    resnet = split_model(build_model("resnet18", 10, (3, 32, 32)), "s2")[0]
    assert isinstance(make_bank(resnet, 50, "auto", device="cpu"), SequentialBank)
    assert isinstance(make_bank(resnet, 2, "auto", device="cuda"), StackedBank)


FAULTS = textwrap.dedent(
    """
    import resource, sys, torch
    from lightning_sfl.runtime.stacked_bank import StackedBank
    from lightning_sfl.models import build_model, split_model
    from lightning_sfl.process.memory import retain_freed_memory
    torch.set_num_threads(1)
    if sys.argv[1] == "retain":
        assert retain_freed_memory()
    half = split_model(build_model("cnn_small", 10, (1, 8, 8)), "s2")[0]
    bank = StackedBank(half, 50)
    opt = torch.optim.SGD(bank.parameters(), lr=0.01)
    sizes = torch.tensor([1, 2] * 25)
    x = torch.randn(int(sizes.sum()), 1, 8, 8)
    for i in range(12):
        if i == 4:
            start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        opt.zero_grad()
        bank(x, sizes).square().sum().backward()
        opt.step()
    print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start) / 8)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
@pytest.mark.extended  # ~30 s on two cores: a memory benchmark
def test_retained_memory_removes_the_page_faults_of_the_stacked_gradients():
    """Page faults per local iteration of a 50-slot stacked bank (a count, not a timing): glibc's defaults give the
    bank-sized gradients fresh pages every step; with :func:`retain_freed_memory` they are reused."""
    faults = {}
    for mode in ("default", "retain"):
        env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("MALLOC_")}
        proc = subprocess.run(
            [sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, env=env, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        faults[mode] = float(proc.stdout.split()[-1])
    assert faults["retain"] < 0.1 * faults["default"], faults


def test_group_cost_is_estimated_from_the_templates_flops_per_row():
    """A bigger model per row makes padding dearer against an extra group: cnn_small pays ~4 rows for one more
    group on a CPU, AlexNet's client half ~1 (so its groups are nearly unpadded); on CUDA padding is nearly free."""
    cnn = StackedBank(split_model(build_model("cnn_small", 10, (1, 8, 8)), "s2")[0], 4)
    alex = StackedBank(split_model(build_model("alexnet_cifar", 10, (3, 32, 32)), "s2")[0], 4)
    x_cnn, x_alex = torch.zeros(5, 1, 8, 8), torch.zeros(5, 3, 32, 32)
    assert 2 < cnn._group_cost(x_cnn) < 8  # 5 layers x 2 MFLOP / 2.4 MFLOP per row
    assert 0.5 < alex._group_cost(x_alex) < 2  # 6 layers x 2 MFLOP / 11.2 MFLOP per row
    assert plan_groups([1, 2, 1, 2, 6], group_cost=alex._group_cost(x_alex)) == [([0, 2], 1), ([1, 3], 2), ([4], 6)]
    with pytest.raises(ConfigError, match="group_cost=-1"):
        StackedBank(nn.Linear(2, 2), 2, group_cost=-1)
