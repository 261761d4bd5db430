"""Semi-SFL's global updating frequency ``K_s`` (supervised server steps per round), adapted by eq. 9.

After each round ``h`` the controller records the round's mean supervised loss ``ℓ_s^h``. With ``w`` the window
(10 in the paper), ``Δℓ_s^h`` = the mean of the last ``w`` rounds' losses minus the mean of the ``w`` rounds before
them (the paper's "difference between two 10-round estimated loss averages"; it needs ``2w`` rounds of history).
At a milestone ``h ∈ M``::

    K_s ← K_s / 2   if |Δℓ_s| < ϱ1
    K_s ← 2·K_s     if |Δℓ_s| > ϱ2
    K_s unchanged   otherwise

and always ``min_steps <= K_s <= max_steps``, an integer (halving rounds down). The paper gives ϱ1 = 0.01 and
ϱ2 = 0.05 but no milestones, starting value or bounds (its ablation keeps ``K_s = 50``): ours are options — a
milestone every ``milestone_every`` rounds (default 20, the first round with ``2w`` losses), ``K_s`` starting at
``initial`` (50) within ``[1, 4·initial]``.

>>> control = SupervisedSteps(initial=8, window=2, milestone_every=4)
>>> [control.observe(loss) for loss in (1.0, 1.0, 1.0, 1.0)]  # flat loss at the milestone (round 4): halve
[8, 8, 8, 4]
>>> [control.observe(loss) for loss in (0.9, 0.5, 0.3, 0.1)]  # falling fast at round 8: double
[4, 4, 4, 8]
"""

from __future__ import annotations

from typing_extensions import override

from lightning_sfl.errors import ConfigError

__all__ = ["SupervisedSteps"]


class SupervisedSteps:
    """``K_s`` and the history eq. 9 needs (checkpointed through :meth:`state_dict`).

    Args:
        initial: ``K_s`` of the first round (``>= 1``).
        adaptive: ``False`` keeps ``initial`` (the paper's ablation "w/o").
        window: ``w``, rounds per loss average.
        low: ``ϱ1`` (halve below it).
        high: ``ϱ2`` (double above it), ``> low``.
        milestone_every: rounds between milestones (``h ∈ M`` when ``h`` is a multiple).
        min_steps: lower bound of ``K_s`` (``>= 1``).
        max_steps: upper bound (default ``4·initial``).
    """

    def __init__(
        self,
        initial: int = 50,
        adaptive: bool = True,
        window: int = 10,
        low: float = 0.01,
        high: float = 0.05,
        milestone_every: int = 20,
        min_steps: int = 1,
        max_steps: int | None = None,
    ) -> None:
        max_steps = 4 * initial if max_steps is None else max_steps
        for name, value in (("initial", initial), ("window", window), ("milestone_every", milestone_every)):
            if int(value) != value or value < 1:
                raise ConfigError(f"{name}={value!r} must be a whole number >= 1")
        if int(min_steps) != min_steps or not 1 <= min_steps <= initial <= max_steps:
            raise ConfigError(
                f"need whole numbers 1 <= min_steps <= initial <= max_steps, got {min_steps}, {initial}, {max_steps}"
            )
        if not 0 < low < high:
            raise ConfigError(f"need 0 < low < high (ϱ1 < ϱ2), got low={low}, high={high}")
        self.adaptive, self.window, self.low, self.high = bool(adaptive), int(window), float(low), float(high)
        self.milestone_every, self.min_steps, self.max_steps = int(milestone_every), int(min_steps), int(max_steps)
        self.steps = int(initial)  # K_s of the next round
        self.losses: list[float] = []  # ℓ_s^h of every round so far

    def delta(self) -> float | None:
        """``Δℓ_s`` of the rounds so far (``None`` before ``2w`` rounds)."""
        w = self.window
        if len(self.losses) < 2 * w:
            return None
        return sum(self.losses[-w:]) / w - sum(self.losses[-2 * w : -w]) / w

    def observe(self, loss: float) -> int:
        """Record round ``h``'s mean supervised loss; return ``K_s`` for round ``h + 1`` (eq. 9)."""
        self.losses.append(float(loss))
        h, delta = len(self.losses), self.delta()
        if self.adaptive and delta is not None and h % self.milestone_every == 0:
            if abs(delta) < self.low:
                self.steps = max(self.min_steps, self.steps // 2)
            elif abs(delta) > self.high:
                self.steps = min(self.max_steps, 2 * self.steps)
        return self.steps

    @override
    def state_dict(self) -> dict:
        return {"steps": self.steps, "losses": list(self.losses)}

    @override
    def load_state_dict(self, state: dict) -> None:
        self.steps, self.losses = int(state["steps"]), [float(v) for v in state["losses"]]
