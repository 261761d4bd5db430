"""Small helpers shared by the tests."""

from __future__ import annotations

import lightning as L


def quiet_trainer(max_epochs: int = 1, **overrides) -> L.Trainer:
    """A Trainer with no logger, checkpoints, progress bar or model summary (override any of them)."""
    kwargs = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    return L.Trainer(max_epochs=max_epochs, **{**kwargs, **overrides})
