"""Any ``nn.Module`` as a method's model (``lightning_sfl.models.source``), cut at a module's name with torch.fx
(``lightning_sfl.models.graph_cut``): the traced halves compute the model exactly, a cut that a residual, a second
tensor or a tied weight crosses is no cut, what cannot be traced or does not give ``[B, N]`` logits is one line, the
data's class count reaches the model, and a record read from a file imports nothing."""

from __future__ import annotations

import sys

import pytest
import torch
import torchvision
from torch import nn

from lightning_sfl.errors import ConfigError
from lightning_sfl.known import safe_hyperparameters
from lightning_sfl.models import split_model
from lightning_sfl.models.graph_cut import named_cuts, traced_splittable
from lightning_sfl.models.source import ModelSource

RESNET = {
    "class_path": "torchvision.models.ResNet",
    "init_args": {"block": "torchvision.models.resnet.BasicBlock", "layers": [1, 1, 1, 1]},
}


class Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem, self.a, self.b = nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 1)
        self.head = nn.Linear(4 * 8 * 8, 10)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        y = self.b(torch.relu(self.a(x)))  # x skips a and b
        return self.head(torch.flatten(x + y, 1))


class Tied(nn.Module):
    """The same layer twice: a cut between its uses would put its weight on both sides."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.shared, self.middle, self.head = nn.Flatten(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.shared(self.middle(self.shared(self.first(x)))))


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        if x.sum() > 0:  # a branch on a value: not traceable
            x = -x
        return self.head(x.flatten(1))


class TwoOutputs(Residual):
    def forward(self, x):
        return super().forward(x), x


def test_every_cut_of_a_traced_resnet_computes_the_model_exactly():
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=7).eval()
    traced = traced_splittable(model, (3, 32, 32), 7, "resnet18")
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = model(x)
        for cut in traced.cut_points:
            client, server = split_model(traced, cut)
            assert torch.equal(server(client(x)), expected), cut
    # the halves share the model's parameters (no copy)
    assert {id(p) for p in traced.parameters()} == {id(p) for p in model.parameters()}
    assert list(traced.cut_points)[:6] == ["conv1", "bn1", "relu", "maxpool", "layer1.0", "layer1"]
    assert traced.aliases["layer2.1"] == "layer2" and traced.canonical_cut("layer2.1.relu") == "layer2"


def test_residuals_and_tied_weights_are_no_cuts():
    assert set(named_cuts(Residual()).names) == {"stem"}  # a and b sit inside the skip
    resnet = named_cuts(torchvision.models.resnet18())
    assert "layer1.0.conv1" not in resnet.names and "layer1.0.bn2" not in resnet.names
    # not after middle (shared is used on both sides of it); after shared: after its last use
    assert set(named_cuts(Tied()).names) == {"first", "shared"}
    with pytest.raises(ConfigError, match=r"^split_point='a' is not a cut point of model '.*Residual'; valid: stem$"):
        ModelSource(Residual(), 10, (1, 8, 8)).canonical_cut("a")


@pytest.mark.parametrize(
    "model,message",
    [
        (Branchy(), r"cannot be cut: torch.fx cannot trace it \(.*\); give a traceable model or an nn.Sequential"),
        (TwoOutputs(), r"maps one input of shape \(1, 8, 8\) to an output of shape tuple, not logits \[1, 10\]"),
        (nn.Flatten(), r"maps one input of shape \(1, 8, 8\) to an output of shape \[1, 64\], not logits \[1, 10\]"),
        (nn.Linear(3, 10), r"does not take one input of shape \(1, 8, 8\) \(the data's\): "),
    ],
)
def test_what_cannot_be_cut_is_one_line(model, message):
    with pytest.raises(ConfigError, match=message) as exc:
        ModelSource(model, 10, (1, 8, 8))
    assert "\n" not in str(exc.value)


def test_a_class_path_gets_the_datas_class_count_and_its_record_rebuilds_it():
    torch.manual_seed(0)
    source = ModelSource(RESNET, 5, (3, 16, 16))
    assert source.config() == {
        "class_path": "torchvision.models.ResNet",
        "init_args": {"block": "torchvision.models.resnet.BasicBlock", "layers": [1, 1, 1, 1], "num_classes": 5},
    }
    torch.manual_seed(0)
    again = ModelSource(source.config(), 5, (3, 16, 16))  # (what a checkpoint holds)
    first, second = source.model.state_dict(), again.model.state_dict()
    assert list(first) == list(second) and all(torch.equal(first[k], second[k]) for k in first)
    assert list(source.build().cut_points) == list(source.cut_points)
    assert source.model(torch.zeros(2, 3, 16, 16)).shape == (2, 5)
    with pytest.raises(ConfigError, match=r"with num_classes=3: the data has 5 classes \(leave num_classes out"):
        ModelSource({**RESNET, "init_args": {**RESNET["init_args"], "num_classes": 3}}, 5, (3, 16, 16))


def test_a_module_given_in_python_is_used_as_it_is_and_recorded_as_such():
    net = Residual()
    source = ModelSource(net, 10, (1, 8, 8))
    assert source.config() == {"class_path": f"{__name__}.Residual", "init_args": None, "instance": True}
    copy = source.build()
    assert copy is not source.model and all(
        torch.equal(a, b) for a, b in zip(copy.state_dict().values(), source.model.state_dict().values(), strict=True)
    )
    with pytest.raises(ConfigError, match=r"was given as an object in Python, its arguments not recorded"):
        ModelSource(source.config(), 10, (1, 8, 8))


def test_a_record_read_from_a_file_imports_nothing(tmp_path, monkeypatch):
    (tmp_path / "planted_model.py").write_text("import pathlib\npathlib.Path('ran').write_text('x')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    record = {"arch": {"class_path": "planted_model.Net", "init_args": {}}}
    with pytest.raises(ConfigError, match=r"arch names 'planted_model.Net', which the library does not know"):
        safe_hyperparameters(record, "ckpt_path='x.ckpt'")
    with pytest.raises(ConfigError, match=r"arch names 'planted_model.Net', which is not a model of the zoo"):
        ModelSource(record["arch"], 10, (1, 8, 8))
    with pytest.raises(ConfigError, match=r"names 'planted_model.Block', whose module is not imported"):
        ModelSource({**RESNET, "init_args": {"block": "planted_model.Block", "layers": [1, 1, 1, 1]}}, 10, (3, 8, 8))
    assert "planted_model" not in sys.modules and not (tmp_path / "ran").exists()
    # a torchvision model's record resolves (torchvision's modules may be imported to find it)
    assert safe_hyperparameters({"arch": RESNET}, "ckpt_path='x.ckpt'")["arch"]["class_path"].endswith(".ResNet")
