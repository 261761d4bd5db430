"""Any ``nn.Module`` as a :class:`~lightning_sfl.models.zoo.SplittableModel`, cut at named modules with ``torch.fx``.

The model is traced (:func:`torch.fx.symbolic_trace`) into a graph of operations in execution order. Cutting *after
module* ``M`` (a name of ``model.named_modules()``: ``layer2``, ``features.3``, ``encoder.layers.encoder_layer_1``)
puts every operation up to the last one that ``M`` runs on the client and the rest on the server. Such a cut is
valid when exactly one tensor crosses it — no residual (a skip connection around the cut is a second tensor), no
other value, and no parameter or buffer used on both sides (a tied weight). :func:`named_cuts` lists the valid ones;
:func:`traced_splittable` rebuilds the model as a sequence of ``torch.fx.GraphModule`` segments between consecutive
valid cuts, so that ``model.cut_points`` maps each cut to a number of segments as for the zoo's models and every part
of the library (the halves, the bytes ledger, FLOPs, U-shaped tails, ``lightning-sfl cuts``) works on it unchanged.

The segments share the model's modules (no copy): ``traced(x)`` equals ``model(x)`` exactly, with the same
parameters. Several names can end at the same place (``layer2``, ``layer2.1`` and ``layer2.1.relu`` in torchvision's
ResNet): the shallowest names the cut in ``cut_points``, the others are its :attr:`SplittableModel.aliases`.

>>> import torch
>>> from torch import nn
>>> class Net(nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.conv, self.head = nn.Conv2d(1, 4, 3), nn.Linear(4 * 6 * 6, 10)
...     def forward(self, x):
...         return self.head(torch.flatten(torch.relu(self.conv(x)), 1))
>>> model = traced_splittable(Net(), (1, 8, 8), 10, "Net")
>>> model.cut_points
{'conv': 1}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import fx, nn

from lightning_sfl.errors import ConfigError
from lightning_sfl.models.zoo import SplittableModel

__all__ = ["TracedCuts", "named_cuts", "traced_splittable"]


@dataclass(frozen=True)
class TracedCuts:
    """A traced model and where it can be cut.

    Attributes:
        graph: the traced model (a ``GraphModule`` sharing the model's modules).
        body: its operations in execution order (no input, no output).
        crossing: position ``p`` (cut before ``body[p]``) -> the one value crossing it, for the valid positions.
        names: module name -> position of the cut after it, for every module whose cut is valid.
    """

    graph: fx.GraphModule
    body: tuple[fx.Node, ...]
    crossing: dict[int, fx.Node]
    names: dict[str, int]


def _trace(model: nn.Module, label: str) -> fx.GraphModule:
    try:
        return fx.symbolic_trace(model)
    except Exception as exc:  # (tracing runs the model's forward on proxies: any error of it)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"arch={label!r} cannot be cut: torch.fx cannot trace it ({reason[:160]}); give a traceable model or an "
            "nn.Sequential, or cut it yourself into a SplittableModel"
        ) from None


def _tensors_of(graph: fx.GraphModule, node: fx.Node) -> set[str]:
    """The parameters and buffers (qualified names) ``node`` reads."""
    if node.op == "get_attr":
        return {str(node.target)}
    if node.op == "call_module":
        module = graph.get_submodule(str(node.target))
        prefix = f"{node.target}."
        return {prefix + n for n, _ in module.named_parameters()} | {prefix + n for n, _ in module.named_buffers()}
    return set()


def _module_paths(node: fx.Node) -> set[str]:
    """The modules ``node`` runs inside (its module and every module above it)."""
    stack = node.meta.get("nn_module_stack") or {}
    paths = {str(value[0]) for value in stack.values()}
    if node.op == "call_module":
        parts = str(node.target).split(".")
        paths |= {".".join(parts[: i + 1]) for i in range(len(parts))}
    return paths


def named_cuts(model: nn.Module, label: str = "") -> TracedCuts:
    """Trace ``model`` and find its valid cuts (see the module docstring); ``label`` names it in errors."""
    graph = _trace(model, label or type(model).__name__)
    nodes = list(graph.graph.nodes)
    inputs = [n for n in nodes if n.op == "placeholder"]
    output = nodes[-1]
    if len(inputs) != 1 or output.op != "output" or not isinstance(output.args[0], fx.Node):
        raise ConfigError(
            f"arch={label!r} cannot be cut: its forward must take one tensor and return one tensor of logits"
        )
    body = tuple(n for n in nodes if n.op not in ("placeholder", "output"))
    index = {n: i for i, n in enumerate(body)}
    index[inputs[0]] = -1
    end = len(body)
    last_use = {n: max((index.get(u, end) for u in n.users), default=index[n]) for n in index}
    live: dict[int, list[fx.Node]] = {p: [] for p in range(1, end)}
    for n, i in index.items():
        for p in range(max(i + 1, 1), min(last_use[n], end - 1) + 1):
            live[p].append(n)
    shared: set[int] = set()  # positions a parameter or buffer is used on both sides of
    first: dict[str, int] = {}
    for i, n in enumerate(body):
        for t in _tensors_of(graph, n):
            if t in first:
                shared.update(range(first[t] + 1, i + 1))
            else:
                first[t] = i
    crossing = {p: vals[0] for p, vals in live.items() if len(vals) == 1 and p not in shared}
    ends: dict[str, int] = {}
    for i, n in enumerate(body):
        for path in _module_paths(n):
            ends[path] = i + 1
    names = {name: ends[name] for name, _ in model.named_modules() if name and ends.get(name) in crossing}
    return TracedCuts(graph, body, crossing, names)


def _segment(cuts: TracedCuts, start: int, stop: int) -> fx.GraphModule:
    """Operations ``body[start:stop]`` as a module of one tensor in, one out (sharing the traced model's modules)."""
    graph = fx.Graph()
    first_in = cuts.crossing[start] if start else next(n for n in cuts.graph.graph.nodes if n.op == "placeholder")
    env = {first_in: graph.placeholder("x")}
    for node in cuts.body[start:stop]:
        env[node] = graph.node_copy(node, lambda n: env[n])
    last = cuts.crossing[stop] if stop < len(cuts.body) else list(cuts.graph.graph.nodes)[-1].args[0]
    graph.output(env[last])
    return fx.GraphModule(cuts.graph, graph, class_name="Segment")


def _canonical(names: Sequence[str]) -> str:
    return min(names, key=lambda n: (n.count("."), names.index(n)))


def traced_splittable(model: nn.Module, input_shape: Sequence[int], num_classes: int, name: str) -> SplittableModel:
    """``model`` as a :class:`SplittableModel` of segments between its valid named cuts (see the module docstring):
    ``cut_points`` maps the shallowest name of each cut to its number of segments, ``aliases`` the other names; a
    model with no valid cut is one :class:`~lightning_sfl.errors.ConfigError`."""
    cuts = named_cuts(model, name)
    by_position: dict[int, list[str]] = {}
    for module_name, position in cuts.names.items():
        by_position.setdefault(position, []).append(module_name)
    positions = sorted(by_position)
    if not positions:
        raise ConfigError(
            f"arch={name!r} has no module after which exactly one tensor crosses (every cut is crossed by a residual "
            "or shares a parameter): it cannot be split"
        )
    bounds = [0, *positions, len(cuts.body)]
    segments = [_segment(cuts, a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    cut_points = {_canonical(by_position[p]): i + 1 for i, p in enumerate(positions)}
    aliases = {alias: canonical for canonical, i in cut_points.items() for alias in by_position[positions[i - 1]]}
    traced = SplittableModel(
        segments, cut_points=cut_points, input_shape=input_shape, num_classes=num_classes, name=name
    )
    traced.aliases = {a: c for a, c in aliases.items() if a != c}
    with torch.no_grad():
        was = [(m, m.training) for m in model.modules()]
        model.eval()
        x = torch.zeros(1, *input_shape, dtype=next((p.dtype for p in model.parameters()), torch.float32))
        try:
            same = torch.equal(traced(x), model(x))
        finally:
            for m, training in was:
                m.training = training
    if not same:  # (a forward that branches on values fx cannot see: the trace is not the model)
        raise ConfigError(f"arch={name!r}: its torch.fx trace does not compute what the model does; it cannot be cut")
    return traced
