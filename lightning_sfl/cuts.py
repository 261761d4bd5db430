"""``lightning-sfl cuts``: what each cut point of a zoo model costs, so that the choice of cut is visible (Semi-SFL
§V-D5, Fig. 11 chooses the cut by the traffic of features plus bottom model).

Per cut point: the client half's layers, parameters and size as sent, the activation's shape and bytes per sample,
and the training FLOPs per sample (forward and backward) on each side — the client's half from
:func:`~lightning_sfl.system.flops.cut_costs`, the server's as the whole model's minus the client's (the server also
computes the gradient of the activations it sends back), and the cut points that can end the server's body when the
cut is a U-shaped run's ``split_point`` (``--model.tail_point``). With ``--samples N``, the traffic of one client in
one round that trains on ``N`` samples: its half down and up, activations up and their gradients down.

Run::

    lightning-sfl cuts --arch alexnet_cifar
    lightning-sfl cuts --arch cnn_fedlc --samples 160 --format csv
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CutRow:
    """One cut point of a model: the client half ``layers[:client_layers]`` and what it costs per sample; the cut points
    that can end the server's body when it is the ``split_point`` of a U-shaped run (``--model.tail_point``)."""

    cut: str
    client_layers: int
    client_params: int
    client_bytes: int
    activation_shape: tuple[int, ...]
    activation_bytes: int
    client_flops: float
    server_flops: float
    tail_points: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()

    def round_bytes(self, samples: int) -> int:
        """Traffic of one client in a round over ``samples`` samples: its half down and up, activations up,
        their gradients down."""
        return 2 * self.client_bytes + 2 * self.activation_bytes * samples


def cut_table(arch: object, num_classes: int = 10, input_shape: Sequence[int] | None = None) -> list[CutRow]:
    """The :class:`CutRow` of every cut of model ``arch``: a zoo name (``input_shape`` default: the zoo's
    ``EXAMPLE_SHAPES[arch]``), a class path with init args or a module, as ``--model.arch`` takes it
    (:class:`~lightning_sfl.models.source.ModelSource`; its cuts are its modules' names, see
    :mod:`~lightning_sfl.models.graph_cut`).

    >>> rows = cut_table("cnn_fedlc")
    >>> [(r.cut, r.activation_shape, r.activation_bytes) for r in rows]
    [('s1', (10, 12, 12), 5760), ('s2', (20, 4, 4), 1280), ('s3', (50,), 200)]
    """
    import torch

    from lightning_sfl.class_paths import NAMED
    from lightning_sfl.errors import ConfigError
    from lightning_sfl.models import activation_shape, split_model
    from lightning_sfl.models.source import ModelSource
    from lightning_sfl.models.split import tail_points
    from lightning_sfl.models.zoo import EXAMPLE_SHAPES
    from lightning_sfl.system.flops import cut_costs, training_flops_per_sample

    if isinstance(arch, str) and arch not in EXAMPLE_SHAPES and "." not in arch and arch not in NAMED["arch"]:
        names = ", ".join([*EXAMPLE_SHAPES, *NAMED["arch"]])
        raise ConfigError(f"arch={arch!r} is not one of: {names}, nor a class path (module.Class)")
    if input_shape is None:
        if not isinstance(arch, str) or arch not in EXAMPLE_SHAPES:
            raise ConfigError("input_shape: give one sample's shape (--input_shape C H W) for a model outside the zoo")
        input_shape = EXAMPLE_SHAPES[arch]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = ModelSource(arch, num_classes, tuple(input_shape)).model
    whole = training_flops_per_sample(model, model.input_shape)
    rows = []
    for cut, cost in cut_costs(model).items():
        client, server = split_model(model, cut)
        client_flops = cost.forward + cost.backward
        rows.append(
            CutRow(
                cut=cut,
                client_layers=model.cut_points[cut],
                client_params=sum(p.numel() for p in client.parameters()),
                client_bytes=cost.model_bytes,
                activation_shape=tuple(activation_shape(model, cut)),
                activation_bytes=cost.activation_bytes,
                client_flops=client_flops,
                server_flops=whole - client_flops,
                tail_points=tuple(tail_points(model.cut_points, cut, server)),
                aliases=tuple(a for a, c in model.aliases.items() if c == cut),
            )
        )
    return rows


#: Rows of the batch a compressor of the ``cuts`` column encodes (a scheme that binds rows together, C3-SL, sends
#: per row its batch's bytes over 64).
COMPRESSED_BATCH = 64


def compressed_row_bytes(compressor, activation_shape: Sequence[int]) -> float:
    """Bytes one sample's activation ``activation_shape`` (float32) sends through ``compressor``
    (:mod:`lightning_sfl.compression`), in a batch of :data:`COMPRESSED_BATCH` rows.

    >>> from lightning_sfl.compression import TopK
    >>> compressed_row_bytes(TopK(ratio=0.1), (64, 4, 4))  # 103 float32 values and uint16 indices
    618.0
    """
    import torch

    rows = torch.randn(COMPRESSED_BATCH, *activation_shape, generator=torch.Generator().manual_seed(0))
    generator = torch.Generator().manual_seed(0) if compressor.draws else None
    _, sent = compressor.compress(rows, generator, torch.tensor([COMPRESSED_BATCH]))
    return float(sent.sum()) / COMPRESSED_BATCH if isinstance(sent, torch.Tensor) else float(sent)


def format_table(
    rows: Sequence[CutRow], samples: int | None = None, fmt: str = "md", compressor=None
) -> str:
    """``rows`` as a Markdown table (``fmt="md"``) or CSV; sizes in KB (10^3 B), FLOPs in MFLOP per sample;
    ``compressor``: a column of the activation's bytes through it (:func:`compressed_row_bytes`)."""
    head = ["cut", "client layers", "client params", "client half (KB)", "activation shape", "activation (KB/sample)"]
    if compressor is not None:
        head.append(f"activation through {type(compressor).__name__} (KB/sample)")
    head += ["client train MFLOP/sample", "server train MFLOP/sample", "tail points (U-shaped)"]
    if samples is not None:
        head.append(f"traffic per client and round, {samples} samples (KB)")
    lines = []
    for r in rows:
        cells = [r.cut, str(r.client_layers), f"{r.client_params:,}", f"{r.client_bytes / 1e3:.1f}"]
        cells += ["×".join(map(str, r.activation_shape)), f"{r.activation_bytes / 1e3:.2f}"]
        if compressor is not None:
            cells.append(f"{compressed_row_bytes(compressor, r.activation_shape) / 1e3:.3f}")
        cells += [f"{r.client_flops / 1e6:.3f}", f"{r.server_flops / 1e6:.3f}", " ".join(r.tail_points) or "-"]
        if samples is not None:
            cells.append(f"{r.round_bytes(samples) / 1e3:.1f}")
        lines.append(cells)
    if fmt == "csv":
        return "\n".join(",".join(c.replace(",", "") for c in row) for row in [head, *lines]) + "\n"
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(out + ["| " + " | ".join(row) + " |" for row in lines]) + "\n"


def _positive(text: str) -> int:
    value = int(text) if text.lstrip("-").isdigit() else 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


#: The prefixes of the model's and the compressor's init args on the ``cuts`` command line.
ARCH_PREFIXES = ("--model.arch.init_args.", "--arch.init_args.", "--model.arch.", "--arch.")
COMPRESSION_PREFIXES = ("--compression.init_args.", "--compression.")


def _init_args(extra: Sequence[str], parser) -> tuple[dict, dict]:
    """``--model.arch.KEY VALUE`` (or ``--arch.KEY``, ``--model.arch.init_args.KEY``; ``=`` too) and
    ``--compression.KEY VALUE`` as the model's and the compressor's init args, each value read as YAML
    (``[2,2,2,2]``, ``true``, a class path)."""
    import yaml

    found: tuple[dict, dict] = ({}, {})
    items = list(extra)
    while items:
        token = items.pop(0)
        key, eq, value = token.partition("=")
        for prefix in (*ARCH_PREFIXES, *COMPRESSION_PREFIXES):
            if key.startswith(prefix) and key[len(prefix) :].isidentifier():
                break
        else:
            parser.error(f"unrecognized arguments: {token}")
        args = found[prefix in COMPRESSION_PREFIXES]
        if not eq:
            if not items:
                parser.error(f"argument {key}: expected one value")
            value = items.pop(0)
        try:
            args[key[len(prefix) :]] = yaml.safe_load(value)
        except yaml.YAMLError:
            args[key[len(prefix) :]] = value
    return found


def main(argv: Sequence[str] | None = None) -> None:
    """``lightning-sfl cuts``: print the cost of every cut of ``--model.arch`` (a zoo name or a class path)."""
    from lightning_sfl.errors import OneLineArgumentParser
    from lightning_sfl.models.zoo import EXAMPLE_SHAPES, MODELS

    parser = OneLineArgumentParser(
        prog="lightning-sfl cuts",
        description="Per cut of a model (a zoo model's s1…s5, any other model's module names): client half size, "
        "activation size and FLOPs on each side.",
    )
    parser.add_argument(
        "--model.arch", "--arch", dest="arch", required=True, metavar="ARCH",
        help=f"a zoo model ({', '.join(MODELS)}) or the class path of any nn.Module, its init args as "
        "--model.arch.NAME VALUE (e.g. --model.arch torchvision.models.ResNet --model.arch.block "
        "torchvision.models.resnet.BasicBlock --model.arch.layers [2,2,2,2] --input_shape 3 32 32)",
    )  # fmt: skip
    parser.add_argument("--num_classes", type=_positive, default=10, help="output classes (default 10)")
    parser.add_argument(
        "--input_shape", type=_positive, nargs=3, metavar=("C", "H", "W"), help="one sample's shape (default, for a "
        "zoo model: the dataset it is for: "
        + ", ".join(f"{k} {'x'.join(map(str, v))}" for k, v in EXAMPLE_SHAPES.items()) + ")",
    )  # fmt: skip
    parser.add_argument("--samples", type=_positive, help="samples a client trains on per round: adds its traffic")
    parser.add_argument("--format", choices=("md", "csv"), default="md", help="output format (default md)")
    from lightning_sfl.compression import COMPRESSORS

    parser.add_argument(
        "--compression", choices=tuple(COMPRESSORS), help="adds a column: the activation's bytes through this "
        "compressor, its options as --compression.NAME VALUE (e.g. --compression TopK --compression.ratio 0.1)",
    )  # fmt: skip
    args, extra = parser.parse_known_args(argv)
    init_args, compression_args = _init_args(extra, parser)
    if compression_args and args.compression is None:
        parser.error(f"argument --compression.{next(iter(compression_args))}: give --compression too")
    compressor = None
    if args.compression is not None:
        import inspect

        from lightning_sfl.errors import ConfigError

        cls = COMPRESSORS[args.compression]
        takes = [n for n in inspect.signature(cls.__init__).parameters if n != "self"]
        unknown = [n for n in compression_args if n not in takes]
        if unknown:
            parser.error(f"argument --compression.{unknown[0]}: {cls.__name__} takes: {', '.join(takes)}")
        try:
            compressor = cls(**compression_args)
        except ConfigError as exc:
            parser.error(f"argument --compression: {exc}")
    arch = {"class_path": args.arch, "init_args": init_args} if init_args else args.arch
    if init_args and args.arch in MODELS:
        parser.error(f"argument --model.arch: {args.arch!r} is a zoo model: it takes no init args")
    if args.arch not in MODELS and "." in args.arch:  # (the user's own module, on PYTHONPATH, or an installed one)
        _import_module_of(args.arch, parser)
    from lightning_sfl.errors import ConfigError

    try:
        rows = cut_table(arch, args.num_classes, args.input_shape)
    except ConfigError as exc:
        parser.error(str(exc))
    shape = "x".join(map(str, args.input_shape or EXAMPLE_SHAPES[args.arch]))
    if args.format == "md":
        sys.stdout.write(f"{args.arch}, input {shape}, {args.num_classes} classes; float32\n\n")
    sys.stdout.write(format_table(rows, args.samples, args.format, compressor))


def _import_module_of(path: str, parser) -> None:
    """Import the module of the class path the command line names (the user's command line names code to import)."""
    import importlib

    module = path.rpartition(".")[0]
    try:
        importlib.import_module(module)
    except ImportError as exc:
        parser.error(f"argument --model.arch: {path!r}: its module {module!r} cannot be imported ({exc})")
