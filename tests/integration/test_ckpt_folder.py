"""``--ckpt_path <a folder>`` is one line saying it is a folder and naming the checkpoints in it, for ``fit``,
``validate``, ``test`` and ``attack``; nothing is written."""

from __future__ import annotations

from pathlib import Path

import pytest
from _helpers import REPO
from cli_in_one_process import run_in_one_process

from lightning_sfl.checkpoint import check_checkpoint
from lightning_sfl.errors import ConfigError

CONFIG = str(REPO / "configs/digits/scala.yaml")


def _run_folder(root: Path) -> Path:
    """A run folder whose ``checkpoints/`` holds three checkpoint names (the folder check comes before any read)."""
    folder = root / "run" / "checkpoints"
    folder.mkdir(parents=True)
    for name in ("epoch=9-step=50.ckpt", "last.ckpt", "epoch=10-step=55.ckpt", "epoch=8-step=45.ckpt"):
        (folder / name).write_bytes(b"")
    return folder.parent


def test_a_folder_is_not_a_checkpoint_and_its_checkpoints_are_named(tmp_path):
    run = _run_folder(tmp_path)
    (tmp_path / "empty").mkdir()
    expected = {
        run / "checkpoints": "(it holds last.ckpt, epoch=10-step=55.ckpt, epoch=9-step=50.ckpt and 1 more)",
        run: "(it holds checkpoints/last.ckpt, checkpoints/epoch=10-step=55.ckpt, checkpoints/epoch=9-step=50.ckpt and "
        "1 more)",
        tmp_path / "empty": "(it holds no .ckpt file)",
    }
    for folder, holds in expected.items():
        with pytest.raises(ConfigError) as err:
            check_checkpoint(folder)
        assert str(err.value) == f"ckpt_path={str(folder)!r} is a folder, not a checkpoint file {holds}"


@pytest.mark.extended  # ~30 s on two cores; the message is checked in CI above
def test_every_command_says_so_in_one_line_and_writes_nothing(tmp_path):
    _run_folder(tmp_path)
    evaluate = [[command, "--config", CONFIG, "--ckpt_path", "run/checkpoints", "--trainer.logger", "false"]
                for command in ("fit", "validate", "test")]  # fmt: skip
    commands = [*evaluate, ["attack", "--ckpt_path", "run"]]
    runs = run_in_one_process([(tmp_path, argv) for argv in commands])
    holds = "last.ckpt, epoch=10-step=55.ckpt, epoch=9-step=50.ckpt and 1 more"
    for run in runs[:3]:
        assert run.code == 2 and run.stderr == (
            f"error: ckpt_path='run/checkpoints' is a folder, not a checkpoint file (it holds {holds})\n"
        ), run.stderr[-2000:]
    assert runs[3].code == 2 and runs[3].stderr.startswith("error: ckpt_path='run' is a folder, not a checkpoint file")
    assert runs[3].stderr.count("\n") == 1
    assert [p.name for p in tmp_path.iterdir()] == ["run"]
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["checkpoints"]
