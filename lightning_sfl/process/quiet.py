"""A normal run of the command line prints no warnings: what our code caused is fixed where it is caused (e.g. the W&B
logger no longer passes W&B an ``anonymous`` setting it warns about); what our dependencies print about themselves,
with nothing for a user to do, is filtered here, each filter with its reason. Installed by :func:`quiet_dependencies`
when the command line starts (a library import changes no global filter)."""

from __future__ import annotations

import logging
import os
import warnings

from typing_extensions import override

__all__ = ["quiet_dependencies"]

#: Lines Lightning logs to advertise optional packages of its own (``litlogger``, ``litmodels``): no setting of ours
#: turns them off, and they are not about the run. And its notes on Ctrl-C and SIGTERM: the command line says in one
#: line what was interrupted, what was kept and how to continue (``SFLCLI._run_subcommand``).
_TIPS = (
    "💡 Tip:",
    "\nDetected KeyboardInterrupt",
    "Detected KeyboardInterrupt",
    "Received SIGTERM",
    "[rank: 0] Received SIGTERM",
)


class _NoTips(logging.Filter):
    @override
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith(_TIPS)


def quiet_dependencies() -> None:
    """Install the filters (idempotent)."""
    # Lightning 2.6's own pytree helper builds torch's LeafSpec, which newer torch deprecates; nothing of ours calls it
    # and nothing can be changed on our side (Lightning's helper runs on every logged metric).
    leafspec = r"`isinstance\(treespec, LeafSpec\)` is deprecated"
    warnings.filterwarnings("ignore", message=leafspec, category=FutureWarning)
    # Under DDP Lightning recommends sync_dist=True for every epoch-level value; every value our methods and callbacks
    # log is already the same on every process (losses summed over processes, accuracy synced by torchmetrics, bytes
    # and simulated times computed alike), so syncing again would change nothing.
    warnings.filterwarnings("ignore", message=r"It is recommended to use `self\.log\(.*sync_dist=True\)`")
    # Lightning's model summary knows the parameter sizes of the ``*-true`` precisions only and warns under ``16-mixed``
    # and ``bf16-mixed`` that it counts 32 bits: mixed precision keeps the parameters in float32, so that count is the
    # right one (Lightning's own TODO at the warning).
    warnings.filterwarnings("ignore", message=r"Precision (bf)?16-mixed is not supported by the model summary")
    # The processes a run starts anew (``--trainer.strategy ddp_spawn``'s, which run no command line of their own) take
    # the two filters of every step through the environment (Python's ``-W`` form: a message's literal beginning).
    inherited = ("ignore:`isinstance(treespec", "ignore:It is recommended to use `self.log(")  # (no comma: -W splits)
    given = [w for w in os.environ.get("PYTHONWARNINGS", "").split(",") if w]
    os.environ["PYTHONWARNINGS"] = ",".join(dict.fromkeys([*given, *inherited]))
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.pytorch.trainer.connectors.signal_connector"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _NoTips) for f in logger.filters):
            logger.addFilter(_NoTips())
