"""Checks of a command's settings that run before anything is built or written: trainer settings a run of this
library cannot take (:data:`TRAINER_RULES`), ``--config`` files that hold no settings, a resume with fewer rounds than
its checkpoint holds, and which errors are a user's (:func:`user_error_line`: one ``error:`` line, no traceback)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightning.fabric.utilities.exceptions import MisconfigurationException

from lightning_sfl.errors import ConfigError, NonFiniteError, out_of_memory_line, reported_cause, yaml_problem

__all__ = [
    "TRAINER_RULES",
    "check_config_files",
    "check_rounds_to_resume",
    "check_trainer_settings",
    "lacking_package_line",
    "resolve_algorithm_names",
    "user_error_line",
    "with_config_file",
]


def check_rounds_to_resume(checkpoint: dict, max_epochs: int | None) -> None:
    """Resuming ``checkpoint`` must continue: ``trainer.max_epochs`` (the rounds in all) may not be fewer than the
    rounds it already holds (one-line :class:`~lightning_sfl.errors.ConfigError`; Lightning would fail deep in the fit).

    >>> check_rounds_to_resume({"epoch": 99}, 200)
    >>> try:
    ...     check_rounds_to_resume({"epoch": 99}, 2)
    ... except ConfigError as err:
    ...     print(err)
    trainer.max_epochs=2 is fewer than the 100 rounds the checkpoint holds: give --trainer.max_epochs 101 or more to ...
    """
    done = int(checkpoint.get("epoch", -1)) + 1
    if max_epochs is not None and 0 <= max_epochs < done:
        raise ConfigError(
            f"trainer.max_epochs={max_epochs} is fewer than the {done} rounds the checkpoint holds: give "
            f"--trainer.max_epochs {done + 1} or more to continue it"
        )


def _not_one_point_zero(value) -> bool:
    return value is not None and not (isinstance(value, float) and value == 1.0)


_MANUAL = "every method steps its own optimisers (manual optimisation)"
#: ``(trainer setting, whether a value is refused, what it must be and why)``: what a run of this library cannot take.
#:
#: :meta hide-value:
TRAINER_RULES: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("max_epochs", lambda v: v is not None and v < 1, "must be >= 1 (the number of global rounds)"),
    ("check_val_every_n_epoch", lambda v: v is not None and v < 1,
     "must be >= 1 (test every that many rounds) or null"),
    ("val_check_interval", _not_one_point_zero, "must be null or 1.0: a test inside a round sees clients not yet "
     "aggregated and changes the run (test every N rounds: --trainer.check_val_every_n_epoch N)"),
    ("max_steps", lambda v: v is not None and v != -1 and v < 1, "must be >= 1 or -1 (no limit)"),
    ("overfit_batches", bool, "must be 0: a round is its clients' whole plan of steps"),
    ("limit_train_batches", _not_one_point_zero, "must be null or 1.0: a round is its clients' whole plan of steps, "
     "which ends with the aggregation (fewer rounds: --trainer.max_epochs; fewer steps: --model.local_iters)"),
    ("limit_val_batches", lambda v: v == 0, "must be > 0 or null: the test accuracy is taken on them"),
    ("limit_test_batches", lambda v: v == 0, "must be > 0 or null: the test accuracy is taken on them"),
    ("accumulate_grad_batches", lambda v: v is not None and v != 1,
     f"must be 1: {_MANUAL}; a larger client minibatch is --data.batch_size"),
    ("gradient_clip_val", lambda v: v is not None and v != 0,
     f"must be null or 0: {_MANUAL}, which Lightning does not clip"),
)  # fmt: skip


def check_trainer_settings(trainer: dict) -> None:
    """Trainer settings a run of this library cannot take (:data:`TRAINER_RULES`), as a one-line
    :class:`ConfigError` before anything is built: a round count below 1, validation every 0 rounds or inside a round,
    a step limit of 0, a cut round (part of its steps, without the aggregation), no test batches, and what Lightning's
    manual optimisation refuses once the run has started (every method steps its own optimisers, client by client)."""
    for name, refused, requirement in TRAINER_RULES:
        if refused(trainer.get(name)):
            raise ConfigError(f"trainer.{name}={trainer[name]} {requirement}")
    precision, accelerator = str(trainer.get("precision")), trainer.get("accelerator")
    if precision in ("16", "16-mixed") and _on_the_cpu(accelerator):  # (Lightning would warn and run bf16-mixed)
        raise ConfigError(
            f"trainer.precision={precision!r} needs a CUDA device: on the CPU, float16 mixed precision is not run "
            "(give --trainer.precision bf16-mixed)"
        )


def _on_the_cpu(accelerator) -> bool:
    """Whether a trainer with ``accelerator`` runs on the CPU (``auto``: this machine has no CUDA device)."""
    if accelerator == "cpu":
        return True
    if accelerator in (None, "auto"):
        import torch

        return not torch.cuda.is_available()
    return False


#: Accelerators Lightning runs with torch alone; another one that fails to start lacks a package.
_TORCH_ACCELERATORS = (None, "auto", "cpu", "gpu", "cuda", "mps")


def lacking_package_line(trainer: dict, message: str) -> str:
    """The line for a trainer setting that needs a package this machine lacks, from Lightning's ``ImportError``
    ``message`` (``Requirement 'torch_xla>=1.13' not met. HINT: …``): the setting and the package, no pip hint.

    >>> lacking_package_line({"accelerator": "tpu"}, "Requirement 'torch_xla>=1.13' not met. HINT: Try running …")
    "accelerator='tpu' needs a package this machine lacks (torch_xla>=1.13)"
    """
    found = re.search(r"Requirement '([^']+)' not met", message)
    package = found.group(1) if found else message.split(". HINT")[0]
    accelerator = trainer.get("accelerator")
    name = "accelerator" if isinstance(accelerator, str) and accelerator not in _TORCH_ACCELERATORS else "strategy"
    return f"{name}={trainer.get(name)!r} needs a package this machine lacks ({package})"


def user_error_line(exc: BaseException) -> tuple[str, int] | None:
    """The one ``error:`` line and exit code of an error a user's setting caused, else ``None``: ours
    (:func:`~lightning_sfl.errors.reported_cause`; 1 for NaN/Inf, else 2), a setting Lightning refuses as its classes
    are built (``MisconfigurationException``, e.g. a callback's), a user's EarlyStopping watching a metric the run does
    not log (Lightning's ``RuntimeError`` at the first test)."""
    cause = reported_cause(exc)
    if cause is not None:
        return str(cause), 1 if isinstance(cause, NonFiniteError) else 2
    if isinstance(exc, MisconfigurationException):
        return (str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__), 2
    if str(exc).startswith("Early stopping conditioned on metric"):
        return " ".join(str(exc).split()), 2
    memory = out_of_memory_line(exc)
    if memory is not None:
        return memory, 2
    if isinstance(exc, RuntimeError) and "Error(s) in loading state_dict" in str(exc):
        return checkpoint_mismatch_line(str(exc)), 2
    return None


def checkpoint_mismatch_line(text: str) -> str:
    """One line for a checkpoint whose weights do not fit the model (what ``load_state_dict`` found first).

    >>> checkpoint_mismatch_line("Error(s) in loading state_dict for SCALA:\\n\\tsize mismatch for "
    ...     "server.net.11.weight: copying a param with shape torch.Size([2, 128]) from checkpoint, the shape in "
    ...     "current model is torch.Size([10, 128]).")
    "the checkpoint does not fit this configuration's model (server.net.11.weight is [2, 128] in the checkpoint, [10, \
128] here): give the fit's options"
    """
    found = re.search(r"size mismatch for ([\w.]+): copying a param with shape torch\.Size\((\[[^\]]*\])\) from "
                      r"checkpoint, the shape in current model is torch\.Size\((\[[^\]]*\])\)", text)  # fmt: skip
    if found:
        detail = f"{found.group(1)} is {found.group(2)} in the checkpoint, {found.group(3)} here"
    else:
        keys = re.search(r"(Missing|Unexpected) key\(s\) in state_dict: \"([^\"]+)\"", text)
        detail = f"{keys.group(1).lower()} {keys.group(2)}" if keys else "its weights differ"
    return f"the checkpoint does not fit this configuration's model ({detail}): give the fit's options"


def check_config_files(argv) -> None:
    """Each ``--config FILE`` of ``argv`` that is a file must hold a YAML mapping of settings: an empty file, a list
    or broken YAML is a one-line :class:`ConfigError` naming the file (jsonargparse would say "Unexpected config")."""
    import yaml

    if not isinstance(argv, list | tuple):
        return
    for name in _config_files(argv):
        path = Path(name).expanduser()
        if not path.is_file():
            continue  # not a file: jsonargparse's own message (missing file, or settings given inline)
        try:
            content = yaml.safe_load(path.read_text())
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ConfigError(f"--config {name}: not valid YAML ({yaml_problem(exc)})") from None
        if not isinstance(content, dict):
            found = "an empty file" if content is None else f"a YAML {type(content).__name__}"
            raise ConfigError(f"--config {name}: expected a YAML mapping of settings (model:, data:, …), found {found}")


def _config_files(argv) -> list[str]:
    """The ``--config FILE`` arguments of ``argv``, in order.

    >>> _config_files(["fit", "--config", "a.yaml", "--config=b.yaml", "--model.lr=1", "--config", "c.yaml"])
    ['a.yaml', 'b.yaml', 'c.yaml']
    """
    argv = [str(a) for a in argv]
    files = []
    for i, arg in enumerate(argv):
        if arg.startswith("--config="):
            files.append(arg.removeprefix("--config="))
        elif arg == "--config" and i + 1 < len(argv):
            files.append(argv[i + 1])
    return files


def _holds(settings, keys: list[str]) -> bool:
    """Whether the nested mapping ``settings`` sets the dotted path ``keys`` (through a class's ``init_args``).

    >>> _holds({"data": {"nclients": 3}}, ["data", "nclients"]), _holds({"data": {"nclients": 3}}, ["data", "alpha"])
    (True, False)
    >>> _holds({"model": {"class_path": "SCALA", "init_args": {"lr": 0.1}}}, ["model", "lr"])
    True
    """
    for key in keys:
        if isinstance(settings, dict) and key not in settings and isinstance(settings.get("init_args"), dict):
            settings = settings["init_args"]
        if not isinstance(settings, dict) or key not in settings:
            return False
        settings = settings[key]
    return True


def with_config_file(line: str, argv) -> str:
    """The parser's error ``line`` about an option it does not accept (a section's or a class's), with the
    ``--config`` file of ``argv`` that sets it (the last one that does), so that a typo in a config file names the
    file."""
    import yaml

    unknown = re.search(r"does not accept option '([\w.]+)'", line) or re.match(r"--([\w.]+): not an option of", line)
    if not unknown or not isinstance(argv, list | tuple):
        return line
    for name in reversed(_config_files(argv)):
        try:
            settings = yaml.safe_load(Path(name).expanduser().read_text())
        except (OSError, yaml.YAMLError, UnicodeDecodeError):
            continue
        if _holds(settings, unknown.group(1).split(".")):
            return f"{line} (set in --config {name})"
    return line


def _method_path(cls: type) -> str:
    """The class path ``--model`` gets for ``cls``: ``lightning_sfl.algorithms.<Name>`` for the library's methods (as
    the configs spell them), the defining module's for a plugin's."""
    import lightning_sfl.algorithms as algorithms

    if getattr(algorithms, cls.__name__, None) is cls:
        return f"lightning_sfl.algorithms.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def resolve_algorithm_names(argv: list[str]) -> list[str]:
    """Let ``--model scala`` (a registry name) or ``--model SCALA`` stand for the class path, and the same for
    ``--model.help``; an unknown name is a one-line error listing the valid ones."""
    from lightning_sfl.algorithms import ALGORITHMS

    names = {**{k: cls for k, cls in ALGORITHMS.items()}, **{cls.__name__: cls for cls in ALGORITHMS.values()}}
    out = list(argv)
    for i, arg in enumerate(out):
        option = arg.split("=", 1)[0]
        if option not in ("--model", "--model.help"):
            continue
        if "=" in arg:
            j, value = i, arg.split("=", 1)[1]
        elif i + 1 < len(out):
            j, value = i + 1, out[i + 1]
        else:
            continue
        if "." in value or value.startswith(("{", "-")) or value.endswith((".yaml", ".yml", ".json")):
            continue  # class path, inline dict or config file: jsonargparse's business
        if value not in names:
            raise ConfigError(
                f"{option.removeprefix('--')}={value!r} is not one of: {', '.join(ALGORITHMS)} (or their class names)"
            )
        path = _method_path(names[value])
        out[j] = path if j != i else f"{option}={path}"
    return out
