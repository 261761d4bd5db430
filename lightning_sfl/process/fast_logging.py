"""A cheaper ``LightningModule.log``: Lightning 2.6 moves a logged metric's whole state to the value's device on EVERY
call, even when it is already there.

``_ResultCollection.log`` ends with ``self[key].to(value.device)``, and ``_ResultMetric.to`` runs
``apply_to_collection`` over the metric's ``__dict__``, which deep-copies its ``_Metadata`` dataclass (reduction
function, sync settings) every time: four times the cost of a ``self.log`` without it. A round of the digits main
job logs about 30 values (losses, per-class accuracy, traffic, simulated time), so this was a few percent of a
round.

:func:`skip_redundant_metric_moves` wraps ``_ResultMetric.to``: a call with one device argument returns at once when
the metric was moved to that device by the previous such call and its logged value is still there; every other call
(``to(device="cpu")`` at the end of a loop, dtypes, the first call) runs Lightning's own ``to``. The state, the values
and what reaches the loggers are unchanged (``tests/integration/test_fast_logging.py`` compares a fit with and without
it).
"""

from __future__ import annotations

import torch

__all__ = ["skip_redundant_metric_moves"]

_MARK = "_lightning_sfl_on"  # the device the metric was last moved to by a one-device ``to`` call


def skip_redundant_metric_moves() -> bool:
    """Install the fast path on Lightning's ``_ResultMetric.to`` (once per process); ``False`` if Lightning has no
    such class (another version: nothing is changed)."""
    try:
        from lightning.pytorch.trainer.connectors.logger_connector.result import _ResultMetric
    except ImportError:
        return False
    original = _ResultMetric.to
    if getattr(original, "_lightning_sfl", False):
        return True

    def to(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and isinstance(args[0], torch.device):
            state = self.__dict__
            value = state.get("value")
            if state.get(_MARK) == args[0] and (not isinstance(value, torch.Tensor) or value.device == args[0]):
                return self
            result = original(self, *args)
            state[_MARK] = args[0]
            return result
        self.__dict__.pop(_MARK, None)
        return original(self, *args, **kwargs)

    to._lightning_sfl = True
    to.__doc__ = original.__doc__
    _ResultMetric.to = to
    return True
