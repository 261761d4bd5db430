"""The option audit (issue 67, item 4): no option silently does nothing.

For every registered method, in every topology it runs in (:func:`topologies`: plain; U-shaped, ``tail_point``, where
its class supports a tail; with a server copy per client where an option of the method chooses the copies, SCALA's
``concat_activations=False``, plain and U-shaped), each constructor option that is the method's choice
(:data:`NOT_CHOICES` lists the others, with why) is set to a value other than the run's (:func:`other_value`: a bool
flipped, a number halved or one more, another of the choices its one-line error lists, or :data:`VALUES`). The run
must then differ from the same run without it — in the state (SHA-256 of the ``state_dict`` and the per-client
state), the traffic, the simulated clock or any logged metric — or be refused before training by a one-line
:class:`~lightning_sfl.errors.ConfigError` naming the option (at construction or when the federation is built).

Options depend on each other: every boolean option is also audited with each other boolean option of its method
flipped (the pairs). That is what catches U-shaped SCALA's ``pooled_label_counts=True`` with
``server_logit_adjustment=False`` (the clients sent their label counts for a ``P_s`` the body never used, and the label
attack credited the server with them). An option that acts only with another one, or after the first round, is also
run where it acts (:data:`WHERE_IT_ACTS`: other options given, more rounds, another clock); :data:`ALLOWED` lists, each
with its reason, the cases that change nothing measurable by design.

What runs where. CI: 275 cases of one to three rounds on the smallest settings of the registry-driven tests (digits,
8 clients, 4 a round, B = 16, two local iterations, float64; :data:`CHEAPER` for three methods; each reference run
shared by every option audited against it, :func:`fingerprint_of`), ~65 s of runs on two cores (under a minute with
``-n auto``): for each method, the options its own class declares, refuses or handles (:func:`in_ci`), and those a
family's methods inherit from a shared base on one method of the family (:data:`REPRESENTATIVES`), in every topology,
with the pairs whose two options both qualify. ``-m extended`` (1,877 cases more, ~8 min on two cores): every option
of every method in every topology and pair, every option (not only the booleans) with each boolean option of its
method flipped, and the costlier places where options act (eq. 9's three rounds, a BatchNorm model).
"""

from __future__ import annotations

import functools
import inspect
import re
from dataclasses import dataclass, field

import pytest
import torch
from _helpers import data_kwargs, method_kwargs, quiet_trainer
from fingerprints import fingerprint

from lightning_sfl.algorithms import REGISTRY, methods
from lightning_sfl.algorithms.split_method import SplitMethod
from lightning_sfl.callbacks import CommunicationBytes, SimulatedClock
from lightning_sfl.data import FederatedDataModule
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import Federation
from lightning_sfl.loop.selection import UniformSelection
from lightning_sfl.runtime.options import option_parameters
from lightning_sfl.system.wireless import WirelessCell

#: The data of every audited run: the registry-driven tests' digits setting, smaller (B = 16, a test batch of 64).
DATA = dict(
    dataset="digits", num_clients=8, partition="quantity", alpha=2, participation=0.5, batch_size=16, seed=1,
    test_batch_size=64,
)  # fmt: skip
#: The method's settings of every audited run, on top of the registry-driven tests' (``method_kwargs``): two local
#: iterations (momentum and FedProx's proximal term act from a client's second step).
RUN = dict(local_iters=2, lr=0.05)
#: ... and cheaper settings of a few methods (each also audited away from them, by :func:`other_value`).
CHEAPER: dict[str, dict] = {
    "scala_pe": {"defences": [
        {"class_path": "lightning_sfl.defences.Bottleneck", "init_args": {"channels": 8}},
        {"class_path": "lightning_sfl.defences.InversionRegulariser", "init_args": {"warmup_epochs": 0}},
    ]},  # its decoders' warm-up: 30 passes over each client's shard
    "fsha": {"scored_images": 16},  # the SSIM of 256 images every round
    "gas": {"covariance": "diag"},  # a full covariance of 1,024 dimensions per label, sampled by eigendecomposition
}  # fmt: skip
#: The second cut of the U-shaped topology (the clients keep the layers from it on): a cut of both architectures
#: audited (``cnn_small``'s s3, and ``cnn_svhn``'s, the other one :data:`VALUES` gives).
TAIL_POINT = "s3"

#: Constructor arguments that are not the method's choice, and why they are not audited.
NOT_CHOICES: dict[str, str] = {
    "num_classes": "the data's: the CLI links it from the data module",
    "input_shape": "the data's: the CLI links it from the data module",
    "client_bank": "how the client copies run, not what they compute: test_stacked_client_bank_equals_sequential "
    "checks that the banks agree",
    "batch_arrivals": "how arrivals run, not what they compute: a batched step equals its arrivals one at a time "
    "(test_gas.py)",
    "tail_point": "a topology of its own: every option is audited U-shaped too",
}

#: Values :func:`other_value` cannot pick (an option whose default is ``None`` or a list, or whose neighbours would
#: not act in the audited runs), by ``(method or "*", option)``.
VALUES: dict[tuple[str, str], object] = {
    ("*", "arch"): "cnn_svhn",  # 8x8 inputs, cuts s1-s3: a convolutional cut at s2 and a tail at s3
    ("*", "split_point"): "s1",  # shallower than the tail point
    ("*", "defences"): [{"class_path": "lightning_sfl.defences.NoPeek", "init_args": {"weight": 1.0}}],
    ("scala_pe", "defences"): [],  # its own are a bottleneck and the inversion regulariser
    ("*", "compression"): [{"class_path": "lightning_sfl.compression.TopK", "init_args": {"ratio": 0.5}}],
    ("*", "local_epochs"): 0.05,  # a few steps over each client's shard
    ("*", "local_batch_size"): 3,
    ("*", "initial_second_moment"): 0.0,
    ("*", "encoder_rounds"): 2,  # the default for a run of 2 rounds is 1
    ("*", "client_batch_size"): 3,
    ("*", "public_size"): 50,  # digits hold fewer test images than the default 1000
    ("*", "proj_hidden"): 16,
    ("*", "shift"): 2,
    ("*", "grad_clip"): 0.01,
    ("*", "missing_class_floor"): 0.5,
    ("*", "ks_max"): 2,  # the runs' K_s is 2: it may not double
    ("*", "helper_interval"): 3,  # helpers in the second round (h = 1) at intervals 1 and 2 alike
    ("semifl", "client_teacher"): "ema",  # its own is frozen
    ("fedbuff", "aggregation"): "uniform",  # refused before its choices are listed
    ("ca2fl", "aggregation"): "uniform",
    ("fedmatch", "client_teacher"): "frozen",
}


@dataclass(frozen=True)
class Where:
    """Where an option acts: with ``given`` options set in both runs, over ``rounds`` rounds, on a
    :class:`~lightning_sfl.system.wireless.WirelessCell` of ``clock`` options (else the method's default system).
    ``alone``: whether the option must also change the audited run without them (or be refused there); ``False`` for
    one that acts only after the first round (a schedule that starts later), audited only here. ``extended``: run with
    ``-m extended`` only (costly: more rounds of a semi-supervised method, a bigger model)."""

    given: dict = field(default_factory=dict)
    rounds: int = 1
    alone: bool = True
    clock: dict | None = None
    extended: bool = False


#: Eq. 9 of Semi-SFL (the ``ks_*`` options) acts at a milestone with ``2w`` rounds of losses: a window of one round and
#: a milestone every 2 rounds change ``K_s`` for the third. On the audited runs ``|Δℓ_s|`` is above 1 (FedMatch's,
#: diverging at the audit's rate, above 100): ``K_s`` doubles unless ``ϱ2`` is larger, and halves when ``ϱ1`` is.
_EQ9 = {"ks_window": 1, "ks_milestone_every": 2}
#: ... three rounds of a semi-supervised method: with ``-m extended`` (in CI, ``test_semi_losses.py`` and
#: ``test_phases.py`` check eq. 9, and supervised-only's refusals of the ``ks_*`` options run).
_EQ9_ACTS = dict(rounds=3, alone=False, extended=True)
#: Options that act only with another option, or after the first round, by ``(method or "*", option)``: each is audited
#: there (and alone, unless ``alone=False``). A case whose ``given`` options its method does not take is left out.
WHERE_IT_ACTS: dict[tuple[str, str], list[Where]] = {
    ("*", "nesterov"): [Where({"momentum": 0.5})],
    ("*", "tail_aggregation"): [Where()],  # "none" too (each client keeps its own tail): "separate" is ALLOWED's
    ("*", "local_batch_size"): [Where({"local_epochs": 0.05})],
    ("*", "local_iters"): [Where({"local_epochs": 0.05})],  # E local epochs take their own steps
    ("*", "rank"): [Where({"covariance": "lowrank"})],
    ("*", "nonnegative"): [Where(rounds=3, alone=False)],  # GAS generates once every label has arrived: later
    ("*", "ridge"): [Where(rounds=3, alone=False)],
    ("*", "adaptive_split"): [Where(clock={"barrier": "iteration"})],  # S²FL's sliding split
    ("*", "lr_min"): [Where({"lr_schedule": "cosine"}, rounds=2)],
    ("*", "lr_schedule"): [Where(rounds=2, alone=False)],  # cosine: round 0 runs at lr
    ("*", "encoder_rounds"): [Where(rounds=2, alone=False)],
    ("*", "server_momentum"): [Where(rounds=2, alone=False)],  # m_0 = 0: the first step is the plain average's
    ("*", "helpers"): [Where(rounds=2, alone=False)],  # helpers are the models of earlier rounds
    ("*", "helper_interval"): [Where(rounds=2, alone=False)],
    ("*", "mask_kl"): [Where(rounds=2, alone=False)],  # the KL term is the helpers'
    # SemiFL's clients train on confident pseudo-labels: none reach τ = 0.95 in the first rounds
    ("semifl", "mix_alpha"): [Where({"threshold": 0.1}, alone=False)],
    ("semifl", "global_lr"): [Where({"threshold": 0.1}, alone=False)],
    ("semifl", "global_momentum"): [Where({"threshold": 0.1}, rounds=2, alone=False)],
    ("semifl", "static_bn"): [Where({"arch": "resnet18"}, extended=True)],  # cnn_small has no BatchNorm
    ("*", "adaptive_steps"): [Where(_EQ9, **_EQ9_ACTS)],
    ("*", "ks_window"): [Where({"ks_milestone_every": 2}, **_EQ9_ACTS)],
    ("*", "ks_milestone_every"): [Where({"ks_window": 1}, **_EQ9_ACTS)],
    ("*", "ks_low"): [Where({**_EQ9, "ks_high": 1e7}, **_EQ9_ACTS)],
    ("*", "ks_high"): [Where(_EQ9, **_EQ9_ACTS)],
    ("*", "ks_min"): [Where({**_EQ9, "ks_low": 1e6, "ks_high": 1e7}, **_EQ9_ACTS)],  # K_s halves
    ("*", "ks_max"): [Where(_EQ9, **_EQ9_ACTS)],  # K_s doubles
}
#: The values of :data:`WHERE_IT_ACTS`' cases where they differ from :data:`VALUES` and :func:`other_value`'s.
VALUES_WHERE_IT_ACTS: dict[tuple[str, str], object] = {
    ("*", "tail_aggregation"): "none",
    ("*", "local_iters"): 3,
    ("*", "ks_window"): 1,
    ("*", "ks_milestone_every"): 2,
    ("*", "ks_low"): 1e6,
    ("*", "ks_high"): 1e6,
    ("*", "ks_min"): 2,
    ("*", "ks_max"): 2,  # the runs' K_s is 2: it may not double
}

#: Cases that change nothing measurable by design, by ``(method or "*", topology or "*", option)``, with why.
ALLOWED: dict[tuple[str, str, str], str] = {
    ("*", "*", "tail_aggregation"): "who averages the tails, not what: 'separate' is the same average by an aggregator "
    "the body's server never sees (the label attack then reports no known-tail accuracy; test_label_attack.py)",
    ("semifl", "plain", "static_bn"): "sBN recomputes BatchNorm statistics, and cnn_small has none (audited with "
    "resnet18, -m extended)",
}

#: The method of each family that audits, in CI, the options its family's methods inherit from a shared base (the
#: others audit them with ``-m extended``): the plain one of the split methods, FedAvg, the asynchronous split and FL
#: methods, the cheapest semi-supervised one, FSHA.
REPRESENTATIVES = ("minibatch_sfl", "fedavg", "async_sfl", "fedbuff", "fedswitch_sl", "fsha")


# ------------------------------------------------------------------------------------------------ the cases
@functools.cache
def options(cls: type) -> dict[str, inspect.Parameter]:
    """The keyword arguments ``cls(...)`` accepts, as ``compare`` and the checkpoints read them."""
    return option_parameters(cls)


@functools.cache
def declared_by(cls: type, option: str) -> type:
    """The class of ``cls``'s MRO whose ``__init__`` declares ``option`` nearest to ``cls``."""
    return next(k for k in cls.__mro__ if "__init__" in vars(k) and option in inspect.signature(k.__init__).parameters)


@functools.cache
def _source(cls: type) -> str:
    return inspect.getsource(cls)


def in_ci(case: Case) -> bool:
    """Whether ``case`` runs in CI: an option its method's class declares, refuses (``unused_options``) or handles in
    its code (``self.<option>``, ``"<option>"``, ``<option>=``), or one it inherits, on its family's representative
    (:data:`REPRESENTATIVES`, then registry order); a pair, when both of its options do."""
    cls = REGISTRY[case.method].cls
    flips = [o for o in case.where.given if o not in lookup_given(case)]  # a pair: its other option too
    if any(not in_ci(Case(case.method, case.topology, o, None)) for o in flips):
        return False
    owner = declared_by(cls, case.option)
    handled = rf"self\.{case.option}\b|[\"']{case.option}[\"']|\b{case.option}="  # read, refused or passed on
    if owner is cls or case.option in cls.unused_options() or re.search(handled, _source(cls)):
        return True
    family = REGISTRY[case.method].family
    heirs = [n for n in methods(family) if case.option in options(REGISTRY[n].cls)]
    heirs = [n for n in heirs if declared_by(REGISTRY[n].cls, case.option) is owner]
    ranked = sorted(heirs, key=lambda n: REPRESENTATIVES.index(n) if n in REPRESENTATIVES else len(REPRESENTATIVES))
    return ranked[0] == case.method


def lookup_given(case: Case) -> set[str]:
    """The options :data:`WHERE_IT_ACTS` gives ``case``'s option (the others of its ``given`` are a pair's flip)."""
    return {o for w in lookup(WHERE_IT_ACTS, case.method, case.option, []) for o in w.given}


def base_kwargs(name: str) -> dict:
    """The settings of every audited run of ``name``."""
    return method_kwargs(name, **RUN, **CHEAPER.get(name, {}))


def build(name: str, **kwargs):
    """``name`` constructed with the audit's settings and ``kwargs``, seeded."""
    torch.manual_seed(0)
    return REGISTRY[name].cls(**{**base_kwargs(name), **kwargs})


_CHOICES = re.compile(r"one of: ([\w, ]+)")


@functools.cache
def choices(name: str, option: str) -> list[str]:
    """The values a string option allows, as its one-line error lists them (``... one of: a, b``)."""
    try:
        build(name, **{option: "\x00"})
    except ConfigError as error:
        found = _CHOICES.search(str(error))
        if found:
            return [c.strip() for c in found.group(1).split(",")]
    return []


def lookup(table: dict, name: str, option: str, missing=None):
    return table.get((name, option), table.get(("*", option), missing))


def current(name: str, option: str, param: inspect.Parameter, given: dict):
    """The option's value in a run with ``given`` (else the audit's settings, else its default)."""
    return {**base_kwargs(name), **given}.get(option, param.default)


_NONE = object()


def other_value(name: str, option: str, param: inspect.Parameter, given: dict | None = None):
    """A value of ``option`` other than the run's: :data:`VALUES`, a bool flipped, a number halved (an int one more),
    another choice; :data:`_NONE` where none can be picked (the audit then fails: add one to :data:`VALUES`)."""
    explicit = lookup(VALUES, name, option, _NONE)
    if explicit is not _NONE:
        return explicit
    value = current(name, option, param, given or {})
    if option == "client_selection":
        return "class_balanced" if REGISTRY[name].cls.default_selection is UniformSelection else "uniform"
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value / 2 if value else 0.5
    if isinstance(value, str):
        others = [c for c in choices(name, option) if c != value]
        return others[0] if others else _NONE
    return _NONE


def _copies_with(name: str, option: str, default: bool) -> bool:
    try:
        return build(name, **{option: not options(REGISTRY[name].cls)[option].default}).shape.server_copies != default
    except ConfigError:
        return False


@functools.cache
def topologies(name: str) -> dict[str, dict]:
    """The topologies ``name`` runs in, each as the options that make it: ``plain``; ``u_shaped`` where its class
    supports a tail; ``copies`` (and ``u_copies``) where a boolean option, flipped, gives a server copy per client."""
    cls = REGISTRY[name].cls
    found = {"plain": {}}
    if not issubclass(cls, SplitMethod):
        return found
    if cls.supports_tail:
        found["u_shaped"] = {"tail_point": TAIL_POINT}
    default = build(name).shape.server_copies
    flips = [o for o, p in options(cls).items() if isinstance(p.default, bool) and o not in NOT_CHOICES]
    for option in (o for o in flips if _copies_with(name, o, default)):
        found["copies"] = {option: not options(cls)[option].default}
        if cls.supports_tail:
            found["u_copies"] = {"tail_point": TAIL_POINT, **found["copies"]}
    return found


@dataclass(frozen=True)
class Case:
    """One audited run: ``option=value`` for ``method`` in ``topology``, where it acts (:class:`Where`: other options
    given in both runs, rounds, a clock)."""

    method: str
    topology: str
    option: str
    value: object
    where: Where = field(default_factory=Where)
    acting: bool = False  # a case of WHERE_IT_ACTS: never allow-listed

    @property
    def id(self) -> str:
        given = "".join(f"+{k}={_short(v)}" for k, v in self.where.given.items())
        clock = "".join(f"+clock.{k}={v}" for k, v in (self.where.clock or {}).items())
        rounds = f"/{self.where.rounds}r" if self.where.rounds > 1 else ""
        return f"{self.method}-{self.topology}-{self.option}={_short(self.value)}{given}{clock}{rounds}"


def _short(value) -> str:
    if isinstance(value, list):
        return "[" + ",".join(str(v["class_path"]).rpartition(".")[2] for v in value) + "]"
    return str(value)


@functools.cache
def cases(extended: bool = False) -> tuple[Case, ...]:
    """Every audited case, :data:`WHERE_IT_ACTS` and the pairs included; with ``extended``, every option also with each
    boolean option of its method flipped (else the booleans only)."""
    found: list[Case] = []
    for name in sorted(REGISTRY):
        params = {o: p for o, p in options(REGISTRY[name].cls).items() if o not in NOT_CHOICES}
        booleans = [o for o, p in params.items() if isinstance(p.default, bool)]
        for topology, shape in topologies(name).items():
            for option in (o for o in params if o not in shape):
                wheres = [w for w in lookup(WHERE_IT_ACTS, name, option, []) if set(w.given) <= set(params)]
                value = other_value(name, option, params[option], shape)
                if all(w.alone for w in wheres) or option in REGISTRY[name].cls.unused_options():  # refused alone
                    found.append(Case(name, topology, option, value))
                for where in wheres:
                    acting = lookup(VALUES_WHERE_IT_ACTS, name, option, value)
                    found.append(Case(name, topology, option, acting, where, acting=True))
                if not (extended or option in booleans):
                    continue
                for flip in (b for b in booleans if b != option and b not in shape):
                    for where in [w for w in wheres if not w.alone] or [Where()]:  # a pair where the option acts
                        given = {**where.given, flip: not current(name, flip, params[flip], shape)}
                        paired = Where(given, where.rounds, clock=where.clock, extended=where.extended)
                        value = other_value(name, option, params[option], {**shape, **given})
                        value = lookup(VALUES_WHERE_IT_ACTS, name, option, value) if where.given else value
                        found.append(Case(name, topology, option, value, paired))
    return tuple({c.id: c for c in found}.values())


# ------------------------------------------------------------------------------------------------ the runs
_RUNS: dict[tuple, dict | ConfigError] = {}


def fingerprint_of(name: str, kwargs: dict, rounds: int, clock: dict | None = None) -> dict | ConfigError:
    """The fingerprint of ``name`` trained ``rounds`` rounds with ``kwargs`` (on a wireless cell of ``clock`` options,
    else the method's default system), cached: a reference run serves every option audited against it; or the
    :class:`ConfigError` that refused it before training."""
    key = (name, repr(sorted(kwargs.items())), rounds, repr(clock))
    if key not in _RUNS:
        _RUNS[key] = _run(name, kwargs, rounds, clock)
    return _RUNS[key]


def _run(name: str, kwargs: dict, rounds: int, clock: dict | None) -> dict | ConfigError:
    try:
        model = build(name, **kwargs)
    except ConfigError as error:
        return error
    dm = FederatedDataModule(**DATA, **data_kwargs(name))
    trainer = quiet_trainer(
        rounds, callbacks=[CommunicationBytes(), SimulatedClock()], precision="64-true", num_sanity_val_steps=0,
        limit_val_batches=1,
    )  # fmt: skip
    try:
        if clock is not None:
            Federation.build(model, dm, system=WirelessCell(**clock))
        trainer.fit(model, dm)
    except ConfigError as error:
        assert trainer.global_step == 0, f"refused after {trainer.global_step} steps, not before training: {error}"
        return error
    logged = {k: float(v).hex() for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    return {**logged, **fingerprint(model, trainer)}


def allowed(case: Case) -> str | None:
    """Why ``case`` may change nothing (:data:`ALLOWED`), or ``None``."""
    for method in (case.method, "*"):
        for topology in (case.topology, "*"):
            if (method, topology, case.option) in ALLOWED and not case.acting:
                return ALLOWED[method, topology, case.option]
    return None


def _params() -> list:
    refused = {(c.method, c.option) for c in cases() if c.option in REGISTRY[c.method].cls.unused_options()}
    ci = {c.id for c in cases() if in_ci(c) and (not c.where.extended or (c.method, c.option) in refused)}
    return [pytest.param(c, id=c.id, marks=() if c.id in ci else pytest.mark.extended) for c in cases(extended=True)]


@pytest.mark.parametrize("case", _params())
def test_an_option_changes_the_run_or_is_refused(case: Case):
    assert case.value is not _NONE, f"no value to audit {case.option} of {case.method} with: add one to VALUES"
    where, shape = case.where, topologies(case.method)[case.topology]
    reference = fingerprint_of(case.method, {**shape, **where.given}, where.rounds, where.clock)
    if isinstance(reference, ConfigError):
        assert where.given, f"the audited run of {case.method} ({case.topology}) is refused: {reference}"
        return  # refused with the other options given: the combination is not a run
    found = fingerprint_of(case.method, {**shape, **where.given, case.option: case.value}, where.rounds, where.clock)
    if isinstance(found, ConfigError):
        named = [case.option, *where.given]
        assert any(re.search(rf"\b{n}\b", str(found)) for n in named), f"refused without naming {case.option}: {found}"
        assert "\n" not in str(found), f"a refusal is one line: {found!r}"
        return
    changed = sorted(k for k in set(found) | set(reference) if found.get(k) != reference.get(k))
    reason = allowed(case)
    if reason is not None:
        assert not changed, f"allow-listed ({reason}) but changes {changed}: remove it from ALLOWED"
        return
    with_what = "".join(f" with {k}={v!r}" for k, v in where.given.items())
    assert changed, (
        f"{case.method} ({case.topology}): {case.option}={case.value!r}{with_what} changed nothing (state, traffic, "
        f"clock, metrics): refuse it with a one-line ConfigError saying why, or make it act"
    )


def test_the_audit_holds_the_pooled_label_counts_case_in_ci():
    """Issue 67's case, U-shaped SCALA with ``pooled_label_counts=True`` and ``server_logit_adjustment=False``, is one
    of CI's (and of its pairs, not a table's)."""
    ids = {c.id for c in cases() if in_ci(c)}
    assert "scala-u_shaped-pooled_label_counts=True+server_logit_adjustment=False" in ids
    assert "scala-u_copies-server_logit_adjustment=False+pooled_label_counts=True" in ids


def test_the_audit_tables_name_options_of_the_methods():
    """Every entry of the tables names an option (and a method) the audit audits: none is left over from a rename."""
    audited = {(c.method, c.option) for c in cases(extended=True)} | {("*", c.option) for c in cases(extended=True)}
    tables = [*VALUES, *WHERE_IT_ACTS, *VALUES_WHERE_IT_ACTS, *((m, o) for m, _, o in ALLOWED)]
    assert not [key for key in tables if key not in audited]
    every = {o for name in REGISTRY for o in options(REGISTRY[name].cls)}
    assert set(REPRESENTATIVES) <= set(REGISTRY) and set(NOT_CHOICES) <= every
