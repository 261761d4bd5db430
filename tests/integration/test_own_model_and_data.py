"""Your model, your data (issue 68): from the command line, with nothing in the package edited, SCALA on a model class
of a file of your own (``PYTHONPATH``), cut at a named module, on an ImageFolder of generated images with a Dirichlet
skew; ``validate`` and ``attack`` read its checkpoint (that its ``config.yaml`` re-runs it is checked by the tutorial's
page). From Python: the central
identity (SplitFedV1 with plain SGD = FedAvg) on torchvision's ResNet cut at ``layer2``, a U-shaped run on it, and the
stacked client bank equal to the sequential one on a traced model."""

from __future__ import annotations

import os
import re
import textwrap

import numpy as np
import pytest
import torch
from _helpers import quiet_trainer
from cli_in_one_process import run_in_one_process
from PIL import Image
from torch.utils.data import TensorDataset

from lightning_sfl.algorithms import ALGORITHMS
from lightning_sfl.data import FederatedDataModule

#: A model of the user's own: a residual block (no cut inside it), and cuts after ``stem``, ``block`` and ``pool``.
MODEL = '''
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        return x + torch.relu(self.conv(x))


class MyNet(nn.Module):
    def __init__(self, width: int = 8, num_classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.block = Block(width)
        self.pool = nn.AdaptiveAvgPool2d(2)
        self.head = nn.Linear(4 * width, num_classes)

    def forward(self, x):
        return self.head(torch.flatten(self.pool(self.block(torch.relu(self.stem(x)))), 1))
'''
RESNET = {
    "class_path": "torchvision.models.ResNet",
    "init_args": {"block": "torchvision.models.resnet.BasicBlock", "layers": [1, 1, 1, 1]},
}


def _generated_images(folder, classes=4, per_class=30, size=12) -> None:
    """Class ``c``'s images are noise with a bright band at columns ``3c..3c+2``: learnable in a few rounds."""
    rng = np.random.default_rng(0)
    for c in range(classes):
        (folder / f"class{c}").mkdir(parents=True)
        for i in range(per_class):
            a = rng.integers(0, 60, (size, size, 3), dtype=np.uint8)
            a[:, 3 * c : 3 * c + 3] = 230
            Image.fromarray(a).save(folder / f"class{c}" / f"{i}.png")


def test_scala_on_your_model_and_your_images_from_the_command_line(tmp_path):
    (tmp_path / "mynet.py").write_text(textwrap.dedent(MODEL))
    _generated_images(tmp_path / "images")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
           "WANDB_MODE": "disabled"}  # fmt: skip
    fit = ["fit", "--model", "scala", "--model.arch", "mynet.MyNet", "--model.arch.width", "6", "--model.split_point",
           "block", "--model.lr", "0.05", "--data.dataset", "torchvision.datasets.ImageFolder", "--data.dataset.root",
           "images", "--data.partition", "dirichlet", "--data.num_clients", "8", "--data.batch_size", "32",
           "--trainer.max_epochs", "4", "--trainer.default_root_dir", "runs"]  # fmt: skip
    run = "runs/scala-imagefolder-dirichlet0.5-s0-"
    first, = run_in_one_process([(tmp_path, fit)], env=env)
    assert first.code == 0, first.stderr[-2000:]
    (folder,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    assert folder.name.startswith(run.split("/")[1])
    config = (folder / "config.yaml").read_text()
    assert "class_path: mynet.MyNet" in config and "class_path: torchvision.datasets.ImageFolder" in config
    accuracy = re.search(r"final test accuracy: (\S+) after 4 rounds", first.stdout).group(1)
    assert float(accuracy) >= 0.5  # (chance: 0.25)
    # (its config.yaml re-runs it to the same accuracy: the tutorial's page, your-model-and-data.md, checks it)
    validated, attacked, refused = run_in_one_process(
        [
            (tmp_path, ["validate", "--config", str(folder / "config.yaml"), "--ckpt_path", "last"]),
            (tmp_path, ["attack", "--import", "mynet", "--ckpt_path", str(folder / "checkpoints/last.ckpt"),
                        "--epochs", "1", "--no_wandb", "--out", "attacked"]),  # fmt: skip
            (tmp_path, ["attack", "--ckpt_path", str(folder / "checkpoints/last.ckpt"), "--no_wandb"]),
        ],
        env=env,
    )
    assert validated.code == 0 and f"test accuracy: {accuracy} at round 4" in validated.stdout
    assert attacked.code == 0 and "inversion attack on SCALA after 4 rounds (imagefolder" in attacked.stdout
    assert refused.code == 2 and "arch names 'mynet.MyNet', which the library does not know" in refused.stderr
    assert "(attack: --import its module)" in refused.stderr.strip().splitlines()[-1]


def _rgb_data(**kwargs) -> FederatedDataModule:
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(240, 3, 16, 16, generator=g), torch.arange(240) % 6
    x[torch.arange(240), y % 3, :, :4] += 2.0  # (a little signal)
    return FederatedDataModule(dataset=TensorDataset(x, y), num_clients=6, partition="quantity", alpha=2,
                               participation=0.5, batch_size=24, seed=1, **kwargs)  # fmt: skip


def _train(name, precision="32-true", **kwargs):
    dm = _rgb_data()
    torch.manual_seed(0)
    kwargs = {"local_iters": 2, "lr": 0.05, **kwargs}
    model = ALGORITHMS[name](arch=RESNET, num_classes=dm.num_classes, input_shape=dm.input_shape, **kwargs)
    quiet_trainer(2, precision=precision).fit(model, dm)
    return model


def _weights(model) -> torch.Tensor:
    halves = [model.client, model.server] + ([model.tail] if getattr(model, "tail", None) is not None else [])
    return torch.cat([p.detach().flatten() for half in halves for p in half.parameters()])


@pytest.mark.extended  # (CI: the tutorial's page, your-model-and-data.md, checks the same identity on ResNet-18)
def test_splitfedv1_with_plain_sgd_equals_fedavg_on_torchvisions_resnet_cut_at_layer2():
    split = _train("splitfedv1", split_point="layer2")
    whole = _train("fedavg")
    assert split.hparams.arch == {**RESNET, "init_args": {**RESNET["init_args"], "num_classes": 6}}
    assert sum(p.numel() for p in split.client.parameters()) < sum(p.numel() for p in whole.client.parameters())
    torch.testing.assert_close(_weights(split), _weights(whole), rtol=0, atol=1e-6)
    assert not torch.allclose(_weights(split), _weights(_train("splitfedv1", split_point="layer2", lr=0.01)))


def test_a_u_shaped_run_on_a_traced_model_and_both_banks_agree():
    """The clients keep layer4 and the classifier (U-shaped), the server trains layer2 to layer3; in float64, so that
    the stacked bank's sums in another order agree with the sequential one's to 1e-9."""
    runs = {
        bank: _train("scala", "64-true", split_point="layer1", tail_point="layer3", client_bank=bank)
        for bank in ("sequential", "stacked")
    }
    tail = runs["stacked"].tail.net
    assert runs["stacked"].u_shaped and any(".layer4." in n for n, _ in tail.named_parameters())
    torch.testing.assert_close(_weights(runs["stacked"]), _weights(runs["sequential"]), rtol=0, atol=1e-9)
