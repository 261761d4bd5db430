"""Shared test settings: one torch thread (small models on a shared 2-core CPU run fastest that way) and W&B
offline so no test can reach a server."""

import os

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
torch.set_num_threads(1)


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    """Run CLI commands inside a fresh directory (relative ``runs/`` and ``data/`` land there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
