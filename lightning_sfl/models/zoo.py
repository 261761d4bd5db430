"""Model zoo of splittable networks for split federated learning.

Every model is a :class:`SplittableModel`: an ``nn.Sequential`` whose layer list can be cut at an index, so
that ``layers[:i]`` is the client-side model and ``layers[i:]`` the server-side model. Named cut points
``s1`` to ``s5`` go from shallow to deep.

The client half is meant to be run batched over clients with ``torch.func.functional_call`` + ``torch.vmap``,
so all layers are functional-friendly: no in-place activations, ``nn.Flatten`` instead of ``x.view``, and the
residual addition in :class:`BasicBlock` is out-of-place.

Models (default input shape in brackets):

* ``alexnet_mnist`` [1, 28, 28] and ``alexnet_cifar`` [3, 32, 32]: the 14-layer AlexNet of the SCALA paper.
* ``resnet18`` [C, H, W >= 8]: ResNet-18 with the CIFAR stem (3x3 conv, stride 1, no max-pool).
* ``vgg11`` / ``vgg16`` [C, H, W multiples of 32]: VGG configurations A and D with a small-image classifier.
* ``cnn_small`` [C, H, W >= 8]: a small CNN for 8x8 digits that trains in seconds on a CPU.
* ``cnn_svhn`` [C, H, W multiples of 4]: the CNN of Semi-SFL's SVHN setting (conv5×5×32, conv5×5×64, FC 512, FC N).
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor, nn
from typing_extensions import override

from lightning_sfl.errors import ConfigError
from lightning_sfl.models.pooling import MaxPool2d

__all__ = ["MODELS", "BasicBlock", "SplittableModel", "build_model"]

#: The model names ``--model.arch`` accepts (:func:`build_model`).
MODELS: tuple[str, ...] = (
    "alexnet_mnist", "alexnet_cifar", "resnet18", "vgg11", "vgg16", "cnn_small", "cnn_svhn", "cnn_fedlc",
    "logistic",
)  # fmt: skip

Shape = tuple[int, int, int]


class SplittableModel(nn.Sequential):
    """An ``nn.Sequential`` whose named cut points index the layer list.

    Attributes:
        cut_points: ``"s1"`` to ``"s5"`` -> number of layers on the client side (client = ``layers[:i]``),
            strictly increasing from shallow to deep.
        input_shape: ``(C, H, W)`` of one sample the model was built for.
        num_classes: size of the output logits, i.e. the model maps ``[B, C, H, W] -> [B, num_classes]``.
        name: the zoo name the model was built under (``""`` if built by hand), or the class path of the model it was
            traced from (:mod:`~lightning_sfl.models.graph_cut`).
        aliases: other names of cut points (name -> its name in ``cut_points``): modules that end where a cut does.

    Slicing (``model[a:b]``) returns a plain ``nn.Sequential`` sharing the modules and keeping their names.
    The cut points assume the layer list is not mutated after construction.
    """

    def __init__(
        self,
        layers: Iterable[nn.Module],
        *,
        cut_points: Mapping[str, int],
        input_shape: Sequence[int],
        num_classes: int,
        name: str = "",
    ) -> None:
        super().__init__(*layers)
        points = dict(cut_points)
        indices = list(points.values())
        if not all(0 < i < len(self) for i in indices) or indices != sorted(set(indices)):
            raise ConfigError(f"cut points must be strictly increasing in [1, {len(self) - 1}], got {points}")
        self.cut_points: dict[str, int] = points
        self.input_shape: Shape = tuple(int(s) for s in input_shape)  # type: ignore[assignment]
        self.num_classes: int = int(num_classes)
        self.name: str = name
        self.aliases: dict[str, str] = {}

    def canonical_cut(self, name: str) -> str | None:
        """The name in :attr:`cut_points` of the cut ``name`` (itself or an alias), ``None`` if it is no cut."""
        return name if name in self.cut_points else self.aliases.get(name)

    def __getitem__(self, idx: int | slice) -> nn.Module:
        # nn.Sequential would call ``self.__class__(OrderedDict)`` for a slice, which our __init__ does not take.
        if isinstance(idx, slice):
            return nn.Sequential(OrderedDict(list(self._modules.items())[idx]))
        return super().__getitem__(idx)

    @override
    def extra_repr(self) -> str:
        return f"name={self.name!r}, input_shape={self.input_shape}, cut_points={self.cut_points}"


# ---------------------------------------------------------------------------------------------------------------------
# Shared building blocks
# ---------------------------------------------------------------------------------------------------------------------


def _conv_block(
    in_ch: int,
    out_ch: int,
    *,
    stride: int = 1,
    bias: bool = True,
    batch_norm: bool = False,
    relu: bool = True,
) -> list[nn.Module]:
    """3x3 conv with padding 1, optionally followed by BatchNorm and a (non in-place) ReLU."""
    layers: list[nn.Module] = [nn.Conv2d(in_ch, out_ch, kernel_size=3, stride=stride, padding=1, bias=bias)]
    if batch_norm:
        layers.append(nn.BatchNorm2d(out_ch))
    if relu:
        layers.append(nn.ReLU())
    return layers


def _mlp(in_features: int, hidden: Sequence[int], num_classes: int, *, relu: bool = True) -> list[nn.Module]:
    """``Flatten`` followed by Linear layers ``in -> hidden... -> num_classes`` (ReLU between them if ``relu``)."""
    layers: list[nn.Module] = [nn.Flatten()]
    widths = [in_features, *hidden]
    for a, b in zip(widths[:-1], widths[1:]):
        layers.append(nn.Linear(a, b))
        if relu:
            layers.append(nn.ReLU())
    layers.append(nn.Linear(widths[-1], num_classes))
    return layers


def _kaiming_init(
    layers: Sequence[nn.Module], kinds: tuple[type[nn.Module], ...], *, mode: str, zero_bias: bool = False
) -> None:
    """Kaiming-normal (ReLU gain) init of the weights of all submodules of type ``kinds``, in place."""
    _init_weights(layers, kinds, partial(nn.init.kaiming_normal_, mode=mode, nonlinearity="relu"), zero_bias)


def _init_weights(
    layers: Sequence[nn.Module], kinds: tuple[type[nn.Module], ...], init: Callable[[Tensor], object], zero_bias: bool
) -> None:
    """Apply ``init`` to the weight of every submodule of type ``kinds`` (and zero its bias if asked), in place."""
    for m in nn.Sequential(*layers).modules():
        if isinstance(m, kinds):
            init(m.weight)
            if zero_bias and m.bias is not None:
                nn.init.zeros_(m.bias)


def _cuts_after(layers: Sequence[nn.Module], kind: type[nn.Module], count: int = 5) -> dict[str, int]:
    """Cut points ``s1..s{count}`` right after the first ``count`` layers of type ``kind``."""
    ends = [i + 1 for i, layer in enumerate(layers) if isinstance(layer, kind)][:count]
    return {f"s{k + 1}": end for k, end in enumerate(ends)}


# ---------------------------------------------------------------------------------------------------------------------
# AlexNet (SCALA paper)
# ---------------------------------------------------------------------------------------------------------------------


def _alexnet(num_classes: int, input_shape: Shape) -> tuple[list[nn.Module], dict[str, int]]:
    """The 14-layer AlexNet of the SCALA paper, faithful to the published architecture.

    Paper layers (1-based) -> index in the sequential, shapes for CIFAR [B, 3, 32, 32] (MNIST [B, 1, 28, 28]):

    ==  ==========================  =====  =========================
     1  Conv2d(C, 32, 3, p=1)        0     [B, 32, 32, 32] ([B, 32, 28, 28])
     2  MaxPool2d(2, 2)              1     [B, 32, 16, 16] ([B, 32, 14, 14])
     3  ReLU                         2     -> cut s1 = 3
     4  Conv2d(32, 64, 3, p=1)       3     [B, 64, 16, 16] ([B, 64, 14, 14])
     5  MaxPool2d(2, 2)              4     [B, 64, 8, 8]   ([B, 64, 7, 7])
     6  ReLU                         5     -> cut s2 = 6 (SCALA's default split)
     7  Conv2d(64, 128, 3, p=1)      6     [B, 128, 8, 8]  -> cut s3 = 7
     8  Conv2d(128, 256, 3, p=1)     7     [B, 256, 8, 8]  -> cut s4 = 8
     9  Conv2d(256, 256, 3, p=1)     8     [B, 256, 8, 8]
    10  MaxPool2d(3, 2)              9     [B, 256, 3, 3]  (both datasets)
    11  ReLU                        10     -> cut s5 = 11
    --  Flatten (not a paper layer) 11     [B, 2304]
    12  Linear(2304, 1024)          12     [B, 1024]
    13  Linear(1024, 512)           13     [B, 512]
    14  Linear(512, num_classes)    14     [B, num_classes]
    ==  ==========================  =====  =========================

    Note: as published, there is NO ReLU between conv3, conv4 and conv5, nor between the three Linear layers;
    this is kept on purpose. The GAS paper's splits "at the 3rd, 6th, 7th and 11th layers" are s1, s2, s3, s5.
    """
    c = input_shape[0]
    layers: list[nn.Module] = [
        *_conv_block(c, 32, relu=False),
        MaxPool2d(2, 2),
        nn.ReLU(),
        *_conv_block(32, 64, relu=False),
        MaxPool2d(2, 2),
        nn.ReLU(),
        *_conv_block(64, 128, relu=False),
        *_conv_block(128, 256, relu=False),
        *_conv_block(256, 256, relu=False),
        MaxPool2d(3, 2),
        nn.ReLU(),
        *_mlp(256 * 3 * 3, [1024, 512], num_classes, relu=False),
    ]
    # Glorot-uniform weights, zero biases: with no ReLU between conv3-conv5 nor between the Linear layers, PyTorch's
    # default init shrinks the signal's variance ~3x per layer and plain SGD sits at chance for the first rounds
    # (MNIST-5k, 15 central steps of B=320 at lr 0.05: 16% test accuracy with the default init, 64% with this one).
    _init_weights(layers, (nn.Conv2d, nn.Linear), nn.init.xavier_uniform_, zero_bias=True)
    return layers, {"s1": 3, "s2": 6, "s3": 7, "s4": 8, "s5": 11}


# ---------------------------------------------------------------------------------------------------------------------
# ResNet-18 (CIFAR stem)
# ---------------------------------------------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 conv+BN, identity (or 1x1 conv+BN projection) shortcut, out-of-place add.

    [B, in_ch, H, W] -> [B, out_ch, ceil(H / stride), ceil(W / stride)]
    """

    def __init__(self, in_ch: int, out_ch: int, stride: int = 1) -> None:
        super().__init__()
        self.branch = nn.Sequential(
            *_conv_block(in_ch, out_ch, stride=stride, bias=False, batch_norm=True),
            *_conv_block(out_ch, out_ch, bias=False, batch_norm=True, relu=False),
        )
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, kernel_size=1, stride=stride, bias=False), nn.BatchNorm2d(out_ch)
            )
        self.relu = nn.ReLU()

    @override
    def forward(self, x: Tensor) -> Tensor:
        return self.relu(self.branch(x) + self.shortcut(x))


def _resnet18(num_classes: int, input_shape: Shape) -> tuple[list[nn.Module], dict[str, int]]:
    """ResNet-18, CIFAR variant. Layers: stem, 8 BasicBlocks (stages of 2), avg-pool, flatten, fc.

    Shapes for [B, C, 32, 32]: stem [B, 64, 32, 32] -> layer1 [B, 64, 32, 32] -> layer2 [B, 128, 16, 16]
    -> layer3 [B, 256, 8, 8] -> layer4 [B, 512, 4, 4] -> pool [B, 512, 1, 1] -> [B, 512] -> [B, num_classes].
    Cut points: s1 after the stem, s2..s5 after stages layer1..layer4.
    """
    layers: list[nn.Module] = [nn.Sequential(*_conv_block(input_shape[0], 64, bias=False, batch_norm=True))]
    cuts = {"s1": 1}
    in_ch = 64
    for stage, (out_ch, stride) in enumerate([(64, 1), (128, 2), (256, 2), (512, 2)]):
        layers += [BasicBlock(in_ch, out_ch, stride), BasicBlock(out_ch, out_ch, 1)]
        in_ch = out_ch
        cuts[f"s{stage + 2}"] = len(layers)
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)]
    _kaiming_init(layers, (nn.Conv2d,), mode="fan_out")  # the usual torchvision ResNet init
    return layers, cuts


# ---------------------------------------------------------------------------------------------------------------------
# VGG
# ---------------------------------------------------------------------------------------------------------------------

_VGG_CFGS: dict[str, list[list[int]]] = {  # conv widths per stage; a MaxPool2d(2) closes each stage
    "vgg11": [[64], [128], [256, 256], [512, 512], [512, 512]],  # config A
    "vgg16": [[64, 64], [128, 128], [256, 256, 256], [512, 512, 512], [512, 512, 512]],  # config D
}


def _vgg(
    cfg: str, num_classes: int, input_shape: Shape, *, batch_norm: bool = False
) -> tuple[list[nn.Module], dict[str, int]]:
    """VGG for small images: 5 stages of (3x3 conv [+BN] + ReLU) x n + MaxPool2d(2), then a 3-layer MLP.

    [B, C, H, W] -> features [B, 512, H/32, W/32] -> Flatten -> 512 -> ReLU -> 512 -> ReLU -> num_classes.
    No dropout (deterministic). Cut points s1..s5 are after each of the five max-pools.
    """
    c, h, w = input_shape
    layers: list[nn.Module] = []
    for stage in _VGG_CFGS[cfg]:
        for out_ch in stage:
            layers += _conv_block(c, out_ch, batch_norm=batch_norm)
            c = out_ch
        layers.append(MaxPool2d(2, 2))
    layers += _mlp(512 * (h // 32) * (w // 32), [512, 512], num_classes)
    return layers, _cuts_after(layers, nn.MaxPool2d)


# ---------------------------------------------------------------------------------------------------------------------
# Small CNN
# ---------------------------------------------------------------------------------------------------------------------


def _cnn_small(num_classes: int, input_shape: Shape) -> tuple[list[nn.Module], dict[str, int]]:
    """Small CNN for 8x8 digits (any [B, C, H>=8, W>=8]). Shapes for [B, 1, 8, 8]:

    ==  =========================  ==============  =====
     0  Conv2d(C, 32, 3, p=1)      [B, 32, 8, 8]
     1  ReLU                                       s1 = 2
     2  Conv2d(32, 64, 3, p=1)     [B, 64, 8, 8]
     3  ReLU
     4  MaxPool2d(2)               [B, 64, 4, 4]   s2 = 5
     5  Conv2d(64, 64, 3, p=1)     [B, 64, 4, 4]
     6  ReLU                                       s3 = 7
     7  MaxPool2d(2)               [B, 64, 2, 2]   s4 = 8
     8  Flatten                    [B, 256]
     9  Linear(64*(H//4)*(W//4), 128)
    10  ReLU                       [B, 128]        s5 = 11
    11  Linear(128, num_classes)   [B, num_classes]
    ==  =========================  ==============  =====
    """
    c, h, w = input_shape
    layers: list[nn.Module] = [
        *_conv_block(c, 32),
        *_conv_block(32, 64),
        MaxPool2d(2, 2),
        *_conv_block(64, 64),
        MaxPool2d(2, 2),
        *_mlp(64 * (h // 4) * (w // 4), [128], num_classes),
    ]
    # Kaiming init (zero biases) instead of PyTorch's default: with the default init, plain SGD sits on a
    # plateau for ~100 steps on 8x8 digits; with it, 60 steps at lr=0.05 already give ~90% test accuracy.
    _kaiming_init(layers, (nn.Conv2d, nn.Linear), mode="fan_in", zero_bias=True)
    return layers, {"s1": 2, "s2": 5, "s3": 7, "s4": 8, "s5": 11}


def _cnn_svhn(num_classes: int, input_shape: Shape) -> tuple[list[nn.Module], dict[str, int]]:
    """The CNN of Semi-SFL's SVHN experiments (after FedMatch): two 5x5 conv layers with 2x2 max-pooling and a
    512-unit hidden layer. Shapes for [B, 3, 32, 32]:

    ==  ==========================  ==============  =====
     0  Conv2d(C, 32, 5, p=2)       [B, 32, 32, 32]
     1  ReLU                                        s1 = 2
     2  MaxPool2d(2)                [B, 32, 16, 16] s2 = 3
     3  Conv2d(32, 64, 5, p=2)      [B, 64, 16, 16]
     4  ReLU                                        s3 = 5
     5  MaxPool2d(2)                [B, 64, 8, 8]   s4 = 6
     6  Flatten                     [B, 4096]
     7  Linear(64*(H//4)*(W//4), 512)
     8  ReLU                        [B, 512]        s5 = 9
     9  Linear(512, num_classes)    [B, num_classes]
    ==  ==========================  ==============  =====
    """
    c, h, w = input_shape
    layers: list[nn.Module] = [
        nn.Conv2d(c, 32, 5, padding=2),
        nn.ReLU(),
        MaxPool2d(2, 2),
        nn.Conv2d(32, 64, 5, padding=2),
        nn.ReLU(),
        MaxPool2d(2, 2),
        *_mlp(64 * (h // 4) * (w // 4), [512], num_classes),
    ]
    _kaiming_init(layers, (nn.Conv2d, nn.Linear), mode="fan_in", zero_bias=True)
    return layers, {"s1": 2, "s2": 3, "s3": 5, "s4": 6, "s5": 9}


def _cnn_fedlc(num_classes: int, input_shape: Shape) -> tuple[list[nn.Module], dict[str, int]]:
    """The CNN of FedLC's MNIST and Fashion-MNIST experiments (its Table 8): two 5x5 convolutions (10 and 20
    filters, stride 1, no padding), each followed by 2x2 max-pooling, then FC 320 -> 50 -> N. Shapes for
    [B, 1, 28, 28]:

    ==  ==========================  ==============  =====
     0  Conv2d(C, 10, 5)            [B, 10, 24, 24]
     1  MaxPool2d(2)                [B, 10, 12, 12]
     2  ReLU                                        s1 = 3
     3  Conv2d(10, 20, 5)           [B, 20, 8, 8]
     4  MaxPool2d(2)                [B, 20, 4, 4]
     5  ReLU                                        s2 = 6
     6  Flatten                     [B, 320]
     7  Linear(320, 50)
     8  ReLU                        [B, 50]         s3 = 9
     9  Linear(50, num_classes)     [B, num_classes]
    ==  ==========================  ==============  =====

    Table 8 gives the parameter shapes and, for both poolings, "stride=2, padding=2"; no activation. We read the
    pooling as a 2x2 window of stride 2 without padding (the only reading that gives fc1's 320 inputs: a padding of
    2 is not even valid for a 2x2 window) and put a ReLU after each pooling and after fc1, as in PyTorch's MNIST
    example this network is. PyTorch's default init. 21,840 parameters for 10 classes.
    """
    c = input_shape[0]
    layers: list[nn.Module] = [
        nn.Conv2d(c, 10, 5),
        MaxPool2d(2, 2),
        nn.ReLU(),
        nn.Conv2d(10, 20, 5),
        MaxPool2d(2, 2),
        nn.ReLU(),
        *_mlp(20 * 4 * 4, [50], num_classes),
    ]
    return layers, {"s1": 3, "s2": 6, "s3": 9}


def _logistic(num_classes: int, input_shape: Shape) -> tuple[list[nn.Module], dict[str, int]]:
    """Multinomial logistic regression, the model of FedProx's and FedLC's Synthetic(λ, µ) (60 → 10), trained with
    softmax cross-entropy:

    ==  ==============================  ================  =====
     0  Flatten                         [B, C·H·W]        s1 = 1
     1  Linear(C·H·W, num_classes)      [B, num_classes]
    ==  ==============================  ================  =====

    Its one cut (``s1``) leaves the server the whole model: FL methods train it on the clients whole.
    """
    c, h, w = input_shape
    return [nn.Flatten(), nn.Linear(c * h * w, num_classes)], {"s1": 1}


# ---------------------------------------------------------------------------------------------------------------------
# Registry and public constructor
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Spec:
    builder: Callable[..., tuple[list[nn.Module], dict[str, int]]]
    expects: str  # human-readable expected input shape(s)
    fits: Callable[[Shape], bool]
    example: Shape  # the input of the dataset the model is for (lightning-sfl cuts' default)


def _min_hw(n: int) -> Callable[[Shape], bool]:
    return lambda s: s[1] >= n and s[2] >= n


_VGG_EXPECTS = "(C, H, W) with H and W multiples of 32, e.g. (3, 32, 32)"
_REGISTRY: dict[str, _Spec] = {
    "alexnet_mnist": _Spec(_alexnet, "(1, 28, 28)", lambda s: s == (1, 28, 28), (1, 28, 28)),
    "alexnet_cifar": _Spec(_alexnet, "(3, 32, 32)", lambda s: s == (3, 32, 32), (3, 32, 32)),
    "resnet18": _Spec(_resnet18, "(C, H, W) with H, W >= 8", _min_hw(8), (3, 32, 32)),
    "vgg11": _Spec(partial(_vgg, "vgg11"), _VGG_EXPECTS, lambda s: s[1] % 32 == 0 and s[2] % 32 == 0, (3, 32, 32)),
    "vgg16": _Spec(partial(_vgg, "vgg16"), _VGG_EXPECTS, lambda s: s[1] % 32 == 0 and s[2] % 32 == 0, (3, 32, 32)),
    "cnn_small": _Spec(_cnn_small, "(C, H, W) with H, W >= 8", _min_hw(8), (1, 8, 8)),
    "cnn_svhn": _Spec(
        _cnn_svhn,
        "(C, H, W) with H, W multiples of 4, e.g. (3, 32, 32)",
        lambda s: s[1] % 4 == 0 == s[2] % 4,
        (3, 32, 32),
    ),
    "cnn_fedlc": _Spec(_cnn_fedlc, "(1, 28, 28)", lambda s: s == (1, 28, 28), (1, 28, 28)),
    "logistic": _Spec(_logistic, "any (C, H, W), e.g. (60, 1, 1)", lambda s: True, (60, 1, 1)),
}
assert tuple(_REGISTRY) == MODELS
#: Model name -> the input shape ``(C, H, W)`` of the dataset it is for (e.g. ``(1, 28, 28)`` for ``alexnet_mnist``).
EXAMPLE_SHAPES: dict[str, Shape] = {name: spec.example for name, spec in _REGISTRY.items()}


def _dry_forward(module: nn.Module, input_shape: Sequence[int], like: nn.Module | None = None) -> Tensor:
    """Forward ``zeros([1, *input_shape])`` through ``module`` in eval mode without grad; returns the output.

    Train/eval flags are restored afterwards and BatchNorm running statistics are left untouched.
    ``like`` (default: ``module``) provides the device and dtype of the input.
    """
    ref = next((like or module).parameters(), None)
    x = torch.zeros(1, *input_shape, device=ref.device if ref is not None else None)
    if ref is not None and ref.is_floating_point():
        x = x.to(ref.dtype)
    flags = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        with torch.no_grad():
            return module(x)
    finally:
        for m, training in flags:
            m.training = training


def _as_shape(input_shape: object) -> Shape | None:
    """``input_shape`` as a tuple of 3 positive ints (lists and numpy ints accepted), else None."""
    try:
        items = list(input_shape)  # type: ignore[call-overload]
        shape = tuple(operator.index(s) for s in items)
    except TypeError:
        return None
    if len(shape) != 3 or any(isinstance(s, bool) for s in items) or min(shape) < 1:
        return None
    return shape  # type: ignore[return-value]


def build_model(name: str, num_classes: int, input_shape: Sequence[int], **kwargs: object) -> SplittableModel:
    """Build zoo model ``name`` mapping ``[B, *input_shape]`` to logits ``[B, num_classes]``.

    Args:
        name: one of :data:`MODELS`.
        num_classes: number of output logits (>= 1).
        input_shape: ``(C, H, W)`` of one sample; checked against the architecture (ValueError if it does not fit).
        **kwargs: passed to the builder (``vgg11``/``vgg16`` accept ``batch_norm: bool = False``).

    Construction is deterministic under ``torch.manual_seed``. The weights use PyTorch's default init, except
    ResNet-18's convs (Kaiming normal, fan-out), cnn_small (Kaiming normal, fan-in, zero biases) and AlexNet
    (Glorot uniform, zero biases).
    """
    if name not in _REGISTRY:
        raise ConfigError(f"model={name!r} is not one of: {', '.join(MODELS)}")
    spec = _REGISTRY[name]
    shape = _as_shape(input_shape)
    if shape is None:
        raise ConfigError(f"model={name!r} expects input shape {spec.expects}, got {input_shape!r}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ConfigError(f"num_classes must be a positive int, got {num_classes!r}")
    if not spec.fits(shape):  # type: ignore[arg-type]
        raise ConfigError(f"model={name!r} expects input shape {spec.expects}, got {shape}")
    layers, cuts = spec.builder(num_classes, shape, **kwargs)
    model = SplittableModel(layers, cut_points=cuts, input_shape=shape, num_classes=num_classes, name=name)
    try:
        out = _dry_forward(model, shape)
    except RuntimeError:
        out = None
    if out is None or tuple(out.shape) != (1, num_classes):
        raise ConfigError(f"model={name!r} expects input shape {spec.expects}, got {shape}")
    return model
