"""Tests for the model zoo (lightning_sfl.models): splitting, shapes, errors, determinism, learnability."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from lightning_sfl.models import MODELS, SplittableModel, activation_shape, build_model, split_model

# A suitable (small) input shape per model.
INPUT_SHAPES: dict[str, tuple[int, int, int]] = {
    "alexnet_mnist": (1, 28, 28),
    "alexnet_cifar": (3, 32, 32),
    "resnet18": (3, 32, 32),
    "vgg11": (3, 32, 32),
    "vgg16": (3, 32, 32),
    "cnn_small": (1, 8, 8),
    "cnn_svhn": (3, 32, 32),
    "cnn_fedlc": (1, 28, 28),
    "logistic": (60, 1, 1),
}
NUM_CLASSES = 10


@pytest.fixture(scope="module")
def models() -> dict[str, SplittableModel]:
    torch.manual_seed(0)
    return {name: build_model(name, NUM_CLASSES, INPUT_SHAPES[name]).eval() for name in MODELS}


def _cases() -> list[tuple[str, str]]:
    torch.manual_seed(0)
    return [(n, p) for n in MODELS for p in build_model(n, NUM_CLASSES, INPUT_SHAPES[n]).cut_points]


def test_registry_matches_models() -> None:
    assert set(INPUT_SHAPES) == set(MODELS)


@pytest.mark.parametrize("name", MODELS)
def test_model_attributes(models: dict[str, SplittableModel], name: str) -> None:
    model = models[name]
    assert isinstance(model, nn.Sequential)
    assert model.name == name
    assert model.input_shape == INPUT_SHAPES[name]
    assert model.num_classes == NUM_CLASSES
    cuts = {"logistic": ["s1"], "cnn_fedlc": ["s1", "s2", "s3"]}.get(name, ["s1", "s2", "s3", "s4", "s5"])
    assert list(model.cut_points) == cuts
    idx = list(model.cut_points.values())
    assert idx == sorted(set(idx)) and 0 < idx[0] and idx[-1] < len(model)


@pytest.mark.parametrize(("name", "point"), _cases())
def test_split_recomposes_exactly(models: dict[str, SplittableModel], name: str, point: str) -> None:
    model = models[name]
    client, server = split_model(model, point)
    x = torch.randn(2, *model.input_shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(x)
        act = client(x)
        out = server(act)
    assert full.shape == (2, NUM_CLASSES)
    assert torch.equal(out, full)
    assert tuple(act.shape) == (2, *activation_shape(model, point))
    assert len(client) == model.cut_points[point] and len(client) + len(server) == len(model)
    # Shared, not copied: the halves' parameters are exactly the model's parameter tensors, each once.
    model_ids = [id(p) for p in model.parameters()]
    half_ids = [id(p) for p in client.parameters()] + [id(p) for p in server.parameters()]
    assert half_ids == model_ids
    # Names are kept, so the halves' state_dict keys partition the model's.
    keys = list(client.state_dict()) + list(server.state_dict())
    assert keys == list(model.state_dict())


def test_split_shares_modules_and_training_flows_back() -> None:
    torch.manual_seed(0)
    model = build_model("cnn_small", 10, (1, 8, 8))
    client, server = split_model(model, "s2")
    assert client[0] is model[0] and server[0] is model[5]
    before = model[0].weight.detach().clone()
    loss = server(client(torch.randn(4, 1, 8, 8))).sum()
    loss.backward()
    with torch.no_grad():
        client[0].weight.sub_(client[0].weight.grad)
    assert not torch.equal(model[0].weight, before)


def test_slicing_returns_plain_sequential() -> None:
    model = build_model("cnn_small", 10, (1, 8, 8))
    head = model[:5]
    assert type(head) is nn.Sequential and len(head) == 5 and head[0] is model[0]
    assert copy.deepcopy(model).cut_points == model.cut_points


def test_alexnet_paper_layers() -> None:
    for name in ("alexnet_mnist", "alexnet_cifar"):
        model = build_model(name, 10, INPUT_SHAPES[name])
        paper_layers = [m for m in model if not isinstance(m, nn.Flatten)]
        assert len(paper_layers) == 14
        kinds = [type(m).__name__ for m in paper_layers]
        assert kinds == ["Conv2d", "MaxPool2d", "ReLU"] * 2 + ["Conv2d"] * 3 + ["MaxPool2d", "ReLU"] + ["Linear"] * 3
        # Cut points in paper-layer numbering: after layers 3, 6, 7, 8, 11 (Flatten comes after all of them).
        assert model.cut_points == {"s1": 3, "s2": 6, "s3": 7, "s4": 8, "s5": 11}
    cifar = build_model("alexnet_cifar", 10, (3, 32, 32))
    mnist = build_model("alexnet_mnist", 10, (1, 28, 28))
    assert activation_shape(cifar, "s2") == (64, 8, 8)
    assert activation_shape(mnist, "s2") == (64, 7, 7)
    assert activation_shape(cifar, "s5") == activation_shape(mnist, "s5") == (256, 3, 3)


def test_alexnet_cifar_parameter_count() -> None:
    model = build_model("alexnet_cifar", 10, (3, 32, 32))

    def conv(i: int, o: int) -> int:
        return i * o * 9 + o

    def fc(i: int, o: int) -> int:
        return i * o + o

    client_s2 = conv(3, 32) + conv(32, 64)
    assert client_s2 == 19_392
    total = client_s2 + conv(64, 128) + conv(128, 256) + conv(256, 256) + fc(2304, 1024) + fc(1024, 512) + fc(512, 10)
    assert total == 3_868_746
    assert sum(p.numel() for p in model.parameters()) == total
    client, server = split_model(model, "s2")
    assert sum(p.numel() for p in client.parameters()) == client_s2
    assert sum(p.numel() for p in server.parameters()) == total - client_s2


def test_vgg_batch_norm_and_cut_points() -> None:
    plain = build_model("vgg11", 10, (3, 32, 32))
    bn = build_model("vgg11", 10, (3, 32, 32), batch_norm=True)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in plain)
    assert sum(isinstance(m, nn.BatchNorm2d) for m in bn) == 8
    for model in (plain, bn):
        assert all(isinstance(model[i - 1], nn.MaxPool2d) for i in model.cut_points.values())
    assert [activation_shape(bn, p) for p in ("s1", "s5")] == [(64, 16, 16), (512, 1, 1)]
    assert sum(isinstance(m, nn.Conv2d) for m in build_model("vgg16", 10, (3, 64, 32))) == 13


def test_resnet18_shapes_and_other_inputs() -> None:
    model = build_model("resnet18", 100, (3, 32, 32))
    shapes = [activation_shape(model, p) for p in model.cut_points]
    assert shapes == [(64, 32, 32), (64, 32, 32), (128, 16, 16), (256, 8, 8), (512, 4, 4)]
    small = build_model("resnet18", 10, (1, 8, 8))
    assert activation_shape(small, "s5") == (512, 1, 1)


def test_no_inplace_activations() -> None:
    for name in MODELS:
        model = build_model(name, 10, INPUT_SHAPES[name])
        assert not any(getattr(m, "inplace", False) for m in model.modules()), name


def test_dry_forward_leaves_batchnorm_stats_and_mode_alone() -> None:
    torch.manual_seed(0)
    model = build_model("resnet18", 10, (3, 8, 8))
    assert model.training
    stats = {k: v.clone() for k, v in model.state_dict().items()}
    activation_shape(model, "s3")
    assert model.training and all(m.training for m in model.modules())
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in stats.items())


def test_client_half_vmaps_over_clients() -> None:
    """The client half can be run batched over clients with functional_call + vmap (the SFL use case)."""
    torch.manual_seed(0)
    n_clients = 3
    for name in ("cnn_small", "alexnet_mnist"):
        model = build_model(name, 10, INPUT_SHAPES[name])
        client, _ = split_model(model, "s2")
        per_client = [copy.deepcopy(client) for _ in range(n_clients)]
        stacked = {
            k: torch.stack([dict(c.named_parameters())[k] for c in per_client]) for k, _ in client.named_parameters()
        }
        x = torch.randn(n_clients, 2, *model.input_shape)

        def run(params: dict[str, torch.Tensor], xb: torch.Tensor, client: nn.Module = client) -> torch.Tensor:
            return torch.func.functional_call(client, params, (xb,))

        out = torch.vmap(run)(stacked, x)
        for k in range(n_clients):
            torch.testing.assert_close(out[k], per_client[k](x[k]))


def test_determinism() -> None:
    for name in ("alexnet_cifar", "resnet18", "cnn_small"):
        torch.manual_seed(123)
        a = build_model(name, 10, INPUT_SHAPES[name]).state_dict()
        torch.manual_seed(123)
        b = build_model(name, 10, INPUT_SHAPES[name]).state_dict()
        torch.manual_seed(124)
        c = build_model(name, 10, INPUT_SHAPES[name]).state_dict()
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert not all(torch.equal(a[k], c[k]) for k in a)


def test_unknown_model_name() -> None:
    with pytest.raises(
        ValueError, match=r"^model='foo' is not one of: alexnet_mnist, alexnet_cifar, .*, cnn_fedlc, logistic$"
    ):
        build_model("foo", 10, (3, 32, 32))


def test_unknown_split_point() -> None:
    model = build_model("cnn_small", 10, (1, 8, 8))
    with pytest.raises(ValueError, match=r"split_point='s9' is not a cut point of model 'cnn_small'; valid: s1, s2"):
        split_model(model, "s9")
    with pytest.raises(ValueError, match="valid: s1, s2, s3, s4, s5"):
        activation_shape(model, "client")


@pytest.mark.parametrize(
    ("name", "shape", "expected"),
    [
        ("alexnet_cifar", (1, 8, 8), r"model='alexnet_cifar' expects input shape \(3, 32, 32\), got \(1, 8, 8\)"),
        ("alexnet_cifar", (1, 32, 32), r"expects input shape \(3, 32, 32\), got \(1, 32, 32\)"),
        ("alexnet_mnist", (3, 32, 32), r"model='alexnet_mnist' expects input shape \(1, 28, 28\), got \(3, 32, 32\)"),
        ("vgg11", (3, 28, 28), r"model='vgg11' expects input shape \(C, H, W\) with H and W multiples of 32"),
        ("vgg16", (3, 32, 48), r"got \(3, 32, 48\)"),
        ("resnet18", (3, 4, 4), r"model='resnet18' expects input shape \(C, H, W\) with H, W >= 8, got \(3, 4, 4\)"),
        ("cnn_small", (1, 7, 8), r"model='cnn_small' expects .* got \(1, 7, 8\)"),
        ("cnn_small", (1, 8), r"model='cnn_small' expects .* got \(1, 8\)"),
        ("cnn_small", (0, 8, 8), r"got \(0, 8, 8\)"),
    ],
)
def test_bad_input_shape(name: str, shape: tuple[int, ...], expected: str) -> None:
    with pytest.raises(ValueError, match=expected) as info:
        build_model(name, 10, shape)
    assert "\n" not in str(info.value)


def test_input_shape_as_list_and_bad_num_classes() -> None:
    assert build_model("cnn_small", 3, [1, 8, 8]).input_shape == (1, 8, 8)
    with pytest.raises(ValueError, match="num_classes"):
        build_model("cnn_small", 0, (1, 8, 8))


def test_cnn_small_learns_digits() -> None:
    """60 plain-SGD steps of batch 64 on sklearn's 8x8 digits: the test loss falls below a quarter of the untrained
    model's and the accuracy rises by more than 0.5 (measured: 2.65 -> 0.28, 0.06 -> 0.95)."""
    from sklearn.datasets import load_digits

    torch.manual_seed(0)
    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0  # [N, 1, 8, 8]
    y = torch.tensor(data.target)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    train, test = perm[:1400], perm[1400:]
    model = build_model("cnn_small", 10, (1, 8, 8))

    def evaluate() -> tuple[float, float]:
        model.eval()
        with torch.no_grad():
            logits = model(x[test])
        model.train()
        return float(nn.functional.cross_entropy(logits, y[test])), (logits.argmax(1) == y[test]).float().mean().item()

    loss0, acc0 = evaluate()  # no random draw: the training below is the same as without it
    opt = torch.optim.SGD(model.parameters(), lr=0.05)  # plain SGD, no momentum
    gen = torch.Generator().manual_seed(0)
    for _ in range(60):
        idx = train[torch.randint(len(train), (64,), generator=gen)]
        opt.zero_grad()
        nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
    loss, acc = evaluate()
    assert loss < 0.25 * loss0 and acc > acc0 + 0.5, (loss0, loss, acc0, acc)


def test_cnn_fedlc_is_fedlcs_table_8_cnn() -> None:
    """Table 8's parameter shapes ([10, 1, 5, 5], [20, 10, 5, 5], [320, 50], [50, 10] and their biases), counted by
    hand, and the activation shapes at the three cuts."""
    model = build_model("cnn_fedlc", 10, (1, 28, 28))
    shapes = [tuple(p.shape) for p in model.parameters()]
    assert shapes == [(10, 1, 5, 5), (10,), (20, 10, 5, 5), (20,), (50, 320), (50,), (10, 50), (10,)]
    assert sum(p.numel() for p in model.parameters()) == 250 + 10 + 5000 + 20 + 16000 + 50 + 500 + 10
    assert [tuple(activation_shape(model, p)) for p in ("s1", "s2", "s3")] == [(10, 12, 12), (20, 4, 4), (50,)]


def test_cnn_svhn_is_the_semi_sfl_papers_cnn() -> None:
    """conv5x5x32, conv5x5x64 (each with 2x2 max-pooling), FC 512, FC N: its parameter count by hand."""
    model = build_model("cnn_svhn", 10, (3, 32, 32))
    want = (3 * 25 * 32 + 32) + (32 * 25 * 64 + 64) + (64 * 8 * 8 * 512 + 512) + (512 * 10 + 10)
    assert sum(p.numel() for p in model.parameters()) == want
    assert [tuple(activation_shape(model, p)) for p in ("s2", "s4", "s5")] == [(32, 16, 16), (64, 8, 8), (512,)]
