"""Every ``--group.option`` the docs, docstrings and study scripts name, and every flag they write after
``lightning-sfl <command>``, is one the command line offers: a user who copies one from the README, a results page, a
docstring or a script gets a run, not ``error: unrecognized arguments`` (the study scripts run for hours before a
later folder would meet a misspelt option)."""

from __future__ import annotations

import re

from _helpers import REPO
from cli_in_one_process import run_command

from lightning_sfl.defences import LEGACY_OPTIONS

#: Where options are written for users to copy (docs, scripts, config comments, docstrings and help texts).
DOCS = [
    REPO / "README.md",
    *(REPO / "docs").rglob("*.md"),
    *(REPO / "docs").rglob("*.sh"),
    *(REPO / "sweeps").rglob("*.md"),
    *(REPO / "configs").rglob("*.md"),
    *(REPO / "configs").rglob("*.yaml"),
    *(REPO / "sweeps").rglob("*.yaml"),
    *(REPO / "lightning_sfl").rglob("*.py"),
    *(REPO / "callbacks").rglob("*.py"),
    *(REPO / "benchmarks").rglob("*.py"),
]

#: Options named on purpose as mistakes (the README's one-line error example; the CLI's comment on abbreviations).
MISTAKES = {"model.nosuch", "data.num_client"}

GROUPS = "model|data|clock|checkpoint|trainer|per_class|dissimilarity|splitguard"
OPTION = re.compile(rf"--({GROUPS})\.([a-z0-9_]+)(?![a-z0-9_*])")


def named_options() -> dict[str, list[str]]:
    """``group.option`` -> where the docs name it (``file:line``); ``--model.client_selection.lam`` counts as
    ``model.client_selection``, and ``--model.inversion_*`` (a family of options) not at all."""
    found: dict[str, list[str]] = {}
    for path in DOCS:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            for group, name in OPTION.findall(line):
                found.setdefault(f"{group}.{name}", []).append(f"{path.relative_to(REPO)}:{i}")
    return found


def offered_options() -> set[str]:
    """What ``lightning-sfl fit`` accepts: the options its help lists, every registered method's constructor
    arguments (``--model.*``: the method is a subclass chosen on the command line) and every system model's
    (``--clock.*``)."""
    from lightning_sfl.algorithms import REGISTRY
    from lightning_sfl.compare.config import init_parameters
    from lightning_sfl.system.devices import EdgeDevices
    from lightning_sfl.system.wireless import WirelessCell

    out = run_command(["fit", "--help"], cwd=REPO)
    assert out.returncode == 0, out.stderr
    offered = {m.split(".", 1)[0] + "." + m.split(".")[1] for m in re.findall(r"--([a-z_]+\.[a-z0-9_.]+)", out.stdout)}
    offered |= {f"model.{p}" for entry in REGISTRY.values() for p in init_parameters(entry.cls)}
    offered |= {f"clock.{p}" for cls in (WirelessCell, EdgeDevices) for p in init_parameters(cls)}
    return offered


def test_every_option_the_docs_name_is_offered():
    named = named_options()
    offered = offered_options()
    assert len(named) > 60, sorted(named)  # the pattern still finds the docs' options
    assert {"model.lr", "data.alpha", "trainer.max_epochs", "clock.flops_high"} <= offered
    assert {key.split(".")[0] for key in offered} <= set(GROUPS.split("|")), "a new option group: add it to GROUPS"
    answered = {f"model.{name}" for name in LEGACY_OPTIONS}  # the old defence options: the CLI names their defence
    unknown = {k: where[:3] for k, where in sorted(named.items()) if k not in offered | answered and k not in MISTAKES}
    assert not unknown, unknown


COMMAND = re.compile(r"lightning-sfl (fit|validate|test|compare|sweep|attack|cuts)\b(.*)")


def documented_commands() -> dict[str, dict[str, list[str]]]:
    """Subcommand -> each ``--flag`` (no dot) written after ``lightning-sfl <subcommand>`` in the docs and scripts ->
    where; a command continues over lines ending in a backslash, and ends at a backtick (inline code), ``|``, ``;``,
    ``&&`` or ``#``. ``compare``'s flags stop at ``--overrides`` (what follows are ``fit``'s)."""
    found: dict[str, dict[str, list[str]]] = {}
    for path in DOCS:
        text = path.read_text().replace("\\\n", " ")
        for i, line in enumerate(text.splitlines(), 1):
            commands = [COMMAND.match("lightning-sfl " + part) for part in line.split("lightning-sfl ")[1:]]
            for sub, rest in (c.groups() for c in commands if c):
                rest = re.split(r"`|\||;|&&|#|\)", rest)[0]
                if sub == "compare":
                    rest = rest.split("--overrides")[0]
                for flag in re.findall(r"(?<![\w.-])--([a-z_]+)(?![\w.])", rest):
                    found.setdefault(sub, {}).setdefault(flag, []).append(f"{path.relative_to(REPO)}:{i}")
    return found


def test_every_flag_of_a_documented_command_is_offered():
    documented = documented_commands()
    assert {"fit", "compare", "attack"} <= set(documented), sorted(documented)
    helps = {sub: run_command([sub, "--help"], cwd=REPO) for sub in documented}
    unknown = {}
    for sub, flags in documented.items():
        assert helps[sub].returncode == 0, sub
        offered = set(re.findall(r"--([a-z_]+)", helps[sub].stdout))
        unknown |= {f"{sub} --{flag}": where[:3] for flag, where in flags.items() if flag not in offered}
    assert not unknown, unknown
