"""The base of the split methods whose clients upload ``h(w_c; X)`` of the half they download: the base plus the
clients' defences (:mod:`lightning_sfl.defences`), the one option plain FL methods and Semi-SFL do not have."""

from __future__ import annotations

from lightning_sfl.algorithms.base import SplitFedAlgorithm
from lightning_sfl.defences import Defence, Defences, resolve_defences

__all__ = ["SplitMethod", "defend"]


def defend(method: SplitFedAlgorithm, defences: list[Defence] | None, default: list[Defence] | None = None) -> None:
    """Give ``method``'s clients ``defences`` (``None``: ``default``), from its constructor, right after the base's: the
    halves they change (a bottleneck), then each attached to the final client half; the hyperparameters record them
    as configs."""
    method.defences = Defences(resolve_defences(list(default or []) if defences is None else defences))
    method.hparams["defences"] = method.defences.configs()
    shape = tuple(method.hparams.input_shape)
    method.client.net, method.server.net = method.defences.build_halves(method.client.net, method.server.net, shape)
    method.defences.attach(type(method).__name__, method.client.net, shape, method.keeps_client_halves)


class SplitMethod(SplitFedAlgorithm):
    """A split method (see the module docstring).

    Args:
        defences: the clients' defences, in order (:mod:`lightning_sfl.defences`: ``NoPeek``, ``ActivationNoise``,
            ``Bottleneck``, ``InversionRegulariser``), e.g. ``--model.defences+=NoPeek --model.defences.weight=10``;
            ``None``: the method's own (:meth:`default_defences`: none; SCALA-PE a bottleneck and the regulariser), so
            that a config written for one method and run with another keeps each method's default; ``[]``: none.
        **kwargs: the options of :class:`~lightning_sfl.algorithms.base.SplitFedAlgorithm`.
    """

    def __init__(self, defences: list[Defence] | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        defend(self, defences, self.default_defences())

    @classmethod
    def default_defences(cls) -> list[Defence]:
        """The defences when ``defences`` is not given: none here."""
        return []
