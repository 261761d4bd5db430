"""Methods from installed packages, by name (:mod:`lightning_sfl.plugins`): a distribution whose entry point in the
group ``lightning_sfl.methods`` names a method class is, once installed, ``--model <its name>`` in ``fit``,
``validate`` and ``compare``, ``--model.help <its name>``, and its checkpoints are known; a broken plugin is one line
naming it (or a taken name, or no method class). The registry (``ALGORITHMS``) is live: a method registered after
import is in it.

The distribution is installed as pip leaves one: a module and a ``*.dist-info`` folder (``METADATA``,
``entry_points.txt``) in a folder on ``PYTHONPATH``; the commands run through the entry point
(:mod:`cli_in_one_process`)."""

from __future__ import annotations

import os
import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import yaml
from _helpers import REPO
from cli_in_one_process import run_in_one_process

from lightning_sfl import plugins
from lightning_sfl.algorithms import ALGORITHMS, REGISTRY, SCALA, register
from lightning_sfl.errors import ConfigError
from lightning_sfl.plugins import METHODS_GROUP, _load

CONFIG = str(REPO / "configs" / "digits" / "scala.yaml")
#: The plugin's module: SCALA's concatenated activations with a label-smoothed server loss instead of eq. 7's
#: logit-adjusted one (an option of its own), registered by its entry point (its module does not ``@register`` it).
MODULE = '''
import torch.nn.functional as F
from lightning_sfl.algorithms import SCALA


class SmoothSCALA(SCALA):
    """SCALA whose server loss smooths the labels (``smoothing``) instead of adjusting the logits."""

    def __init__(self, smoothing: float = 0.1, **kwargs) -> None:
        super().__init__(**kwargs)
        self.smoothing = smoothing

    def server_loss(self, logits, step):
        return F.cross_entropy(logits, step.y, label_smoothing=self.smoothing)
'''


def _install(site: Path, name: str, module: str, source: str, entry: str) -> None:
    """What ``pip install`` leaves of a distribution ``name`` with one module and one method entry point."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{METHODS_GROUP}]\n{entry}\n")


def _env(site: Path) -> dict[str, str]:
    path = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, "PYTHONPATH": path, "WANDB_MODE": "disabled"}


def test_an_installed_plugin_method_runs_by_its_name_in_fit_validate_and_compare(tmp_path):
    site = tmp_path / "site"
    _install(site, "smooth-methods", "smooth_methods", MODULE, "smooth_scala = smooth_methods:SmoothSCALA")
    fit = ["fit", "--config", CONFIG, "--model", "smooth_scala", "--model.smoothing=0.2",
           "--trainer.enable_progress_bar=false"]  # fmt: skip
    compare = ["compare", "--config", CONFIG, "--methods", "smooth_scala", "scala", "--seeds", "0", "--out",
               str(tmp_path / "study"), "--wandb", "false", "--overrides", "--trainer.max_epochs=1"]  # fmt: skip
    commands = [
        (tmp_path, [*fit, "--trainer.max_epochs=1"]),
        (tmp_path, [*fit, "--trainer.max_epochs=2", "--ckpt_path=last"]),
        (tmp_path, ["fit", "--model.help", "smooth_scala"]),
        (tmp_path, ["fit", "--config", CONFIG, "--model", "smooth_scal"]),
        (tmp_path, compare),
    ]
    fitted, resumed, helped, misspelt, compared = run_in_one_process(commands, env=_env(site))
    assert fitted.code == 0, fitted.stderr[-3000:]
    assert fitted.stdout.splitlines()[-1].startswith("final test accuracy: ")
    (run,) = (tmp_path / "runs").iterdir()
    assert run.name.startswith("smoothscala-digits-"), run.name  # named by its class, as the library's methods
    recorded = yaml.safe_load((run / "config.yaml").read_text())["model"]
    assert recorded["class_path"] == "smooth_methods.SmoothSCALA" and recorded["init_args"]["smoothing"] == 0.2
    assert resumed.code == 0, resumed.stderr[-3000:]  # its checkpoint is known: the run continues for a second round
    assert resumed.stdout.splitlines()[-1].startswith("final test accuracy: ") and "after 2 rounds" in resumed.stdout
    assert helped.code == 0 and "--model.smoothing SMOOTHING" in helped.stdout, helped.stderr[-2000:]
    assert misspelt.code == 2 and "smooth_scala" in misspelt.stderr.strip().splitlines()[-1]
    assert compared.code == 0, compared.stderr[-3000:]
    table = (tmp_path / "study" / "results.md").read_text()
    assert "smooth_scala" in table and "scala" in table


def test_a_broken_plugin_is_one_line_naming_it(tmp_path, monkeypatch):
    """(In this process: what a command does first, :func:`load_plugins`; its ``ConfigError`` is the command's one
    ``error:`` line and exit code 2, as for every setting, before anything is read or written.)"""
    site = tmp_path / "site"
    _install(site, "broken-methods", "broken_methods", "raise ImportError('no such thing')\n",
             "broken = broken_methods:Method")  # fmt: skip
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(plugins, "_loaded", False)
    with pytest.raises(ConfigError) as raised:
        plugins.load_plugins()
    assert str(raised.value) == (
        "plugin 'broken' (lightning_sfl.methods entry point of broken-methods 0.1: broken_methods:Method) does not "
        "load: ImportError: no such thing"
    )
    assert "broken" not in REGISTRY


class _Unrelated:
    pass


class _Renamed(SCALA):
    pass


@pytest.mark.parametrize(
    ("value", "name", "error"),
    [
        (f"{__name__}:_Unrelated", "unrelated", "names <class '{module}._Unrelated'>, which is not a SplitFed"),
        (f"{__name__}:_Renamed", "scala", "the name 'scala' is taken by lightning_sfl.algorithms.scala.SCALA"),
        (f"{__name__}:_Renamed", "Bad-Name", "method name 'Bad-Name' must be lower case letters"),
    ],
    ids=["not-a-method", "a-taken-name", "a-bad-name"],
)
def test_a_plugin_that_names_no_new_method_is_refused(value, name, error):
    with pytest.raises(ConfigError, match="^plugin") as raised:
        _load(EntryPoint(name, value, METHODS_GROUP))
    assert error.format(module=__name__) in str(raised.value)
    assert "unrelated" not in REGISTRY and "Bad-Name" not in REGISTRY and REGISTRY["scala"].cls is SCALA


def test_the_registry_is_live_and_a_plugin_takes_the_family_of_what_it_derives_from():
    class Later(SCALA):
        pass

    assert "later_toy" not in ALGORITHMS
    try:
        _load(EntryPoint("later_toy", f"{__name__}:_Renamed", METHODS_GROUP))
        assert ALGORITHMS["later_toy"] is _Renamed and REGISTRY["later_toy"].family == "split"
        register("later_toy_two", family="fl")(Later)
        assert list(ALGORITHMS)[-1] != "later_toy_two" and ALGORITHMS["later_toy_two"] is Later  # in family order
    finally:
        REGISTRY.pop("later_toy", None)
        REGISTRY.pop("later_toy_two", None)
    assert "later_toy" not in ALGORITHMS


#: A distribution publishing a model (no ``num_classes`` default of the data's: it takes the argument) and a dataset
#: with torchvision's ``root``/``train`` convention (class ``c``'s rows are shifted by ``c``: learnable).
COMPONENTS = '''
import torch
from torch import nn


class TinyNet(nn.Module):
    def __init__(self, num_classes: int = 3):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(16, 12), nn.ReLU())
        self.head = nn.Linear(12, num_classes)

    def forward(self, x):
        return self.head(self.body(x))


class Shifted(torch.utils.data.Dataset):
    def __init__(self, root: str = "data", train: bool = True):
        g = torch.Generator().manual_seed(0 if train else 1)
        self.y = torch.arange(120 if train else 40) % 4
        self.x = torch.randn(len(self.y), 1, 4, 4, generator=g) + self.y[:, None, None, None].float()
        self.root = root

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], int(self.y[i])
'''


def test_an_installed_model_and_dataset_run_by_their_names(tmp_path):
    site = tmp_path / "site"
    _install(site, "tiny-parts", "tiny_parts", COMPONENTS, "")
    info = site / "tiny_parts-0.1.dist-info"
    (info / "entry_points.txt").write_text(
        "[lightning_sfl.models]\ntiny_net = tiny_parts:TinyNet\n\n"
        "[lightning_sfl.datasets]\nshifted = tiny_parts:Shifted\n"
    )
    fit = ["fit", "--model", "scala", "--model.arch", "tiny_net", "--model.split_point", "body", "--model.lr", "0.1",
           "--data.dataset", "shifted", "--data.partition", "iid", "--data.num_clients", "4", "--data.batch_size",
           "16", "--trainer.max_epochs", "4", "--trainer.enable_progress_bar=false"]  # fmt: skip
    cuts = ["cuts", "--model.arch", "tiny_net", "--input_shape", "1", "4", "4", "--num_classes", "4"]
    fitted, listed, misnamed = run_in_one_process(
        [(tmp_path, fit), (tmp_path, cuts), (tmp_path, [*fit[:4], "tiny_nte", *fit[5:]])], env=_env(site)
    )
    assert fitted.code == 0, fitted.stderr[-3000:]
    (run,) = (tmp_path / "runs").iterdir()
    assert run.name.startswith("scala-shifted-iid-"), run.name
    recorded = yaml.safe_load((run / "config.yaml").read_text())
    assert recorded["model"]["init_args"]["arch"] == "tiny_net" and recorded["data"]["dataset"] == "shifted"
    assert float(fitted.stdout.split("final test accuracy: ")[1].split()[0]) > 0.5  # (chance: 0.25)
    assert listed.code == 0 and "| body |" in listed.stdout, listed.stderr[-2000:]
    assert misnamed.code == 2 and "arch='tiny_nte' is not one of: alexnet_mnist" in misnamed.stderr
    assert "logistic, tiny_net, nor a class path" in misnamed.stderr.strip().splitlines()[-1]
