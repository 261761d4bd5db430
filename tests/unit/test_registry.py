"""The method registry: every list of methods derives from it; a new method is one file, one config and its tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _helpers import REPO, method_kwargs

import lightning_sfl
from lightning_sfl.algorithms import ALGORITHMS, ASYNC_METHODS, REGISTRY, SEMI_METHODS, SemiSupervised
from lightning_sfl.algorithms.registry import FAMILIES, names, register
from lightning_sfl.lightning_cli import resolve_algorithm_names
from lightning_sfl.loop import AsyncEvents


def test_families_match_what_the_classes_are():
    """``async`` are the methods on the event clock, ``semi`` the semi-supervised ones, ``fl`` the unsplit synchronous
    ones, ``split`` the rest; the derived lists are the families."""
    for name, entry in REGISTRY.items():
        cls = entry.cls
        on_the_clock = isinstance(cls(**method_kwargs(name)).schedule, AsyncEvents)  # GAS's clock: asynchronous
        assert (entry.family == "async") == on_the_clock, name
        assert (entry.family == "semi") == issubclass(cls, SemiSupervised), name
        if entry.family in ("split", "fl"):
            assert (entry.family == "split") == cls.has_server_half, name
    assert ASYNC_METHODS == names(family="async") and SEMI_METHODS == names(family="semi")
    assert list(ALGORITHMS) == [n for f in FAMILIES for n in sorted(n for n in REGISTRY if REGISTRY[n].family == f)]


def test_every_registered_method_is_exported_and_named_on_the_command_line():
    for name, cls in ALGORITHMS.items():
        assert getattr(lightning_sfl, cls.__name__) is cls
        path = f"lightning_sfl.algorithms.{cls.__name__}"
        assert resolve_algorithm_names(["--model", name]) == ["--model", path]
        assert resolve_algorithm_names([f"--model={cls.__name__}"]) == [f"--model={path}"]


def test_a_name_is_taken_once_and_families_are_checked():
    with pytest.raises(ValueError, match="taken by lightning_sfl.algorithms.scala.SCALA"):
        register("scala", family="split")(type("Other", (), {}))
    with pytest.raises(ValueError, match="family='sync' of method 'x' is not one of: split, fl, async, semi"):
        register("x", family="sync")
    with pytest.raises(ValueError, match="must be lower case"):
        register("Bad-Name", family="split")
    assert "Other" not in {e.cls.__name__ for e in REGISTRY.values()}


TOY_METHOD = '''
"""ToySFL: MiniBatch-SFL whose server loss is halved (a method written for the registry test)."""

from typing_extensions import override

from lightning_sfl.algorithms.registry import register
from lightning_sfl.algorithms.split_method import SplitMethod


@register("toy_sfl", family="split")
class ToySFL(SplitMethod):
    """MiniBatch-SFL with the server loss (eq. 7) halved."""

    @override
    def server_loss(self, logits, step):
        return super().server_loss(logits, step) / 2
'''


@pytest.fixture(scope="module")
def copy_with_a_new_method(tmp_path_factory) -> Path:
    """A copy of the repository's package, configs and tests plus one new file (the method) and one config."""
    root = tmp_path_factory.mktemp("new_method")
    shutil.copytree(REPO / "lightning_sfl", root / "lightning_sfl", ignore=shutil.ignore_patterns("__py*", "callbacks"))
    shutil.copytree(REPO / "callbacks", root / "lightning_sfl" / "callbacks", ignore=shutil.ignore_patterns("__py*"))
    shutil.copytree(REPO / "configs", root / "configs")
    shutil.copytree(REPO / "tests", root / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    (root / "lightning_sfl" / "algorithms" / "toy_sfl.py").write_text(TOY_METHOD.lstrip())
    config = (REPO / "configs/digits/minibatch_sfl.yaml").read_text()
    (root / "configs/digits/toy_sfl.yaml").write_text(config.replace("MiniBatchSFL", "ToySFL"))
    return root


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}  # the copy comes before the installed package
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=root, env=env, timeout=600)


@pytest.mark.extended  # ~25 s on two cores: a copy of the repository
def test_a_new_method_is_one_file_and_one_config(copy_with_a_new_method):
    """With nothing else edited, the new file's method is in ``ALGORITHMS``, exported, a CLI name, one of compare's
    defaults, trains from its config through the CLI (its entry point, in the same process), and every
    registry-driven test runs it."""
    root = copy_with_a_new_method
    fit = ["fit", "--model", "toy_sfl", "--config", "configs/digits/toy_sfl.yaml", "--trainer.max_epochs=1"]
    fit += ["--trainer.logger=false", "--trainer.enable_progress_bar=false", "--dissimilarity.every_n_rounds=0"]
    check = textwrap.dedent(
        """
        import lightning_sfl
        from lightning_sfl.algorithms import ALGORITHMS
        from lightning_sfl.cli import main
        from lightning_sfl.compare.options import parse_args
        assert lightning_sfl.__file__.startswith(ROOT), lightning_sfl.__file__
        assert ALGORITHMS["toy_sfl"] is lightning_sfl.ToySFL and "ToySFL" in lightning_sfl.__all__
        assert "toy_sfl" in parse_args(["--config", "c.yaml", "--out", "o"]).methods
        main(FIT)
        """
    )
    check = check.replace("ROOT", repr(str(root))).replace("FIT", repr(fit))
    out = _run(root, "-c", check)
    assert out.returncode == 0 and "final test accuracy: " in out.stdout, out.stderr[-2000:]
    # smoke, stacked = sequential, resume, config
    files = ["integration/test_algorithms.py", "integration/test_resume.py", "integration/test_cli.py"]
    out = _run(root, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *(f"tests/{f}" for f in files))
    assert out.returncode == 0, out.stdout[-2000:]
    for f in files:
        assert any(line.startswith(f"tests/{f}::") and "toy_sfl" in line for line in out.stdout.splitlines()), f
