"""Defences of the clients of a split method, as parts the method is given: ``--model.defences`` lists them, each a
class with its own options (in LightningCLI's style, as the trainer's callbacks)::

    lightning-sfl fit --config configs/digits/scala.yaml \\
        --model.defences+=NoPeek --model.defences.weight=10 \\
        --model.defences+=ActivationNoise --model.defences.scale=0.3 --model.defences.bound=tanh

or in a config::

    model:
      init_args:
        defences:
          - class_path: lightning_sfl.defences.Bottleneck
            init_args: {channels: 8}

Only split methods have the option (a plain FL method uploads no activations; Semi-SFL's clients upload two views).
Where each defence acts in a split iteration (:func:`~lightning_sfl.runtime.iteration.split_iteration`):

=============================  ================================  ====================================================
defence                        hook                              what it does
=============================  ================================  ====================================================
:class:`Bottleneck`            ``build_halves`` (construction)   ``b`` channels cross the cut (SCALA journal §5.7)
:class:`ActivationNoise`       ``upload`` (training, inference)  ``tanh`` bound and Laplace/Gaussian noise on the
                                                                 uploads (Titcombe et al., 2021)
:class:`NoPeek`                ``client_terms`` (whole)          ``α · Σ_k DCOR(X_k, Z̃_k)`` (Vepakomma et al., 2020)
:class:`InversionRegulariser`  ``client_terms`` (rows), a        ``γ·Σ_k R_k`` of per-client simulated decoders
                               warm-up step, ``start_round``     (SCALA-PE, eq. 17; ResSFL)
:class:`GradientNoise`         ``gradient_upload`` (U-shaped)    Gaussian noise on the gradients sent up, scaled by
                                                                 the batch's largest norm (Li et al., 2022)
:class:`MaxNorm`               ``gradient_upload`` (U-shaped)    every row's expected norm raised to the batch's
                                                                 largest (Li et al., 2022)
:class:`RandomisedLabels`      ``training_labels``               each label randomised once, RR_ε (label DP; Ghazi
                                                                 et al., 2021)
=============================  ================================  ====================================================

Each is an ``nn.Module``: what it holds is saved under ``defences.<key>.`` in the method's checkpoints. Checkpoints
and configs written before defences were parts (options ``nopeek_weight``, ``activation_noise``, ``noise_distribution``,
``noise_bound``, ``bottleneck_channels``, ``inversion_*`` of every method) are read through :func:`from_legacy_options`
and :func:`renamed_legacy_state`.
"""

from __future__ import annotations

import re

from lightning_sfl.defences.activations import ActivationNoise, NoPeek
from lightning_sfl.defences.base import DEFENCES, Defence, Defences, resolve_defences
from lightning_sfl.defences.bottleneck import Bottleneck
from lightning_sfl.defences.gradients import GradientNoise, MaxNorm
from lightning_sfl.defences.inversion import InversionRegulariser
from lightning_sfl.defences.labels import RandomisedLabels
from lightning_sfl.known import register_component_kind

__all__ = [
    "DEFENCES",
    "ActivationNoise",
    "Bottleneck",
    "Defence",
    "Defences",
    "GradientNoise",
    "InversionRegulariser",
    "MaxNorm",
    "NoPeek",
    "RandomisedLabels",
    "from_legacy_options",
    "moved_option_hint",
    "renamed_legacy_state",
    "resolve_defences",
]

DEFENCES.update(
    (cls.__name__, cls)
    for cls in (NoPeek, ActivationNoise, Bottleneck, InversionRegulariser, GradientNoise, MaxNorm, RandomisedLabels)
)  # (the table resolve_defences names them from)
register_component_kind("defences", Defence, DEFENCES)  # what a checkpoint may name

#: The options every method had before defences were parts -> (defence, its option).
#:
#: :meta hide-value:
LEGACY_OPTIONS = {
    "nopeek_weight": (NoPeek, "weight"),
    "activation_noise": (ActivationNoise, "scale"),
    "noise_distribution": (ActivationNoise, "distribution"),
    "noise_bound": (ActivationNoise, "bound"),
    "bottleneck_channels": (Bottleneck, "channels"),
    **{
        f"inversion_{name}": (InversionRegulariser, option)
        for name, option in (
            ("gamma", "gamma"),
            ("threshold", "threshold"),
            ("regulariser", "regulariser"),
            ("width", "width"),
            ("lr", "lr"),
            ("every", "every"),
            ("optimizer_state", "optimizer_state"),
            ("warmup_epochs", "warmup_epochs"),
            ("warmup_batch_size", "warmup_batch_size"),
        )
    },
}
#: What turned a legacy defence on: (option, its "off" value); ``None`` was the method's default.
_SWITCHES = {NoPeek: ("weight", 0.0), Bottleneck: ("channels", 0), InversionRegulariser: ("gamma", 0.0)}


def from_legacy_options(options: dict, default: list[Defence]) -> dict:
    """``options`` (a method's hyperparameters) with the legacy defence options replaced by ``defences`` configs, as
    the method of that time built them; ``default``: the method's own defences (SCALA-PE: a bottleneck and the
    regulariser, always simulated there). Options without a legacy name come back unchanged.

    >>> from_legacy_options({"lr": 0.1, "nopeek_weight": 2.0, "activation_noise": 0.0}, default=[])
    {'lr': 0.1, 'defences': [{'class_path': 'lightning_sfl.defences.NoPeek', 'init_args': {'weight': 2.0}}]}
    """
    legacy = {k: options[k] for k in options if k in LEGACY_OPTIONS}
    if not legacy:
        return options
    kept = {k: v for k, v in options.items() if k not in LEGACY_OPTIONS}
    defaults = {type(d): d for d in default}
    chosen: dict[type[Defence], dict] = {}
    for cls in (NoPeek, ActivationNoise, Bottleneck, InversionRegulariser):  # the defences that had options
        values = {option: legacy[name] for name, (c, option) in LEGACY_OPTIONS.items() if c is cls and name in legacy}
        values = {k: v for k, v in values.items() if v is not None}
        own = defaults.get(cls)
        if cls is ActivationNoise:
            on = values.get("scale", 0.0) > 0 or values.get("bound", "none") != "none"
        else:
            switch, off = _SWITCHES[cls]
            if switch not in values and own is not None:  # None: the method's default strength
                values[switch] = getattr(own, switch)
            # SCALA-PE simulated its decoders at γ = 0 too
            on = switch in values and (values[switch] != off or (cls is InversionRegulariser and own is not None))
        if on:
            chosen[cls] = values
    kept["defences"] = [cls(**values).config() for cls, values in chosen.items()]
    return kept


#: State keys of checkpoints written before defences were parts -> their keys now (prefixes end with a dot).
LEGACY_STATE = {
    "inversion.": "defences.inversion.decoder.",
    "inversion_params": "defences.inversion.weights",
    "inversion_buffers": "defences.inversion.statistics",
    "inversion_exp_avg": "defences.inversion.exp_avg",
    "inversion_exp_avg_sq": "defences.inversion.exp_avg_sq",
    "inversion_steps": "defences.inversion.steps",
}


def renamed_legacy_state(state: dict, reverse: bool = False) -> dict:
    """``state`` (a ``state_dict``) with the keys of checkpoints written before defences were parts renamed as they
    are now (``reverse``: back, as the fingerprints of that code name them).

    >>> renamed_legacy_state({"inversion.0.weight": 1, "inversion_steps": 2, "client.net.0.weight": 3})
    {'defences.inversion.decoder.0.weight': 1, 'defences.inversion.steps': 2, 'client.net.0.weight': 3}
    """
    pairs = [(new, old) for old, new in LEGACY_STATE.items()] if reverse else list(LEGACY_STATE.items())

    def renamed(key: str) -> str:
        for old, new in pairs:
            if (old.endswith(".") and key.startswith(old)) or key == old:
                return new + key[len(old) :]
        return key

    return {renamed(k): v for k, v in state.items()}


def moved_option_hint(line: str) -> str:
    """The parser's line about an option a method does not take, with how to give it now if it is a defence's (the
    options every method had before defences were parts), or why the method has no ``defences``.

    >>> moved_option_hint("--model.nopeek_weight: not an option of SCALA (its options: ...)")
    '--model.nopeek_weight: not an option of SCALA: a defence now, --model.defences+=NoPeek --model.defences.weight=...'
    """
    found = re.match(r"--model\.(\w+): not an option of (\w+)", line)
    if not found:
        return line
    option, method = found.groups()
    if option in LEGACY_OPTIONS:
        cls, name = LEGACY_OPTIONS[option]
        given = f"--model.defences+={cls.__name__} --model.defences.{name}=..."
        return f"--model.{option}: not an option of {method}: a defence now, {given}"
    if option == "defences":
        return (
            f"--model.defences: not an option of {method}: only split methods whose clients upload activations take "
            "defences (not plain FL methods or the semi-supervised ones)"
        )
    return line
