"""``lightning-sfl compare``: train several methods over several seeds and tabulate the results.

::

    lightning-sfl compare --config configs/digits/scala.yaml --methods scala fedavg --seeds 0 1 2 \\
        --out runs/digits_alpha1 --target_acc 0.9 --overrides --data.alpha=1 --trainer.max_epochs=50

Every method × seed is one ``fit`` run on the same configs. Each run's config is resolved by the CLI's own parser
(jsonargparse, as ``--print_config`` does) from the configs followed by ``--model <method's class>``: a class
change keeps only the ``init_args`` the new class accepts, so e.g. SCALA's ``concat_activations`` is dropped for
FedAvg; ``--model.*`` overrides a class does not accept (its own parameters plus, through ``**kwargs``, those of
its parent classes) are dropped for it. The seed
sets both ``--seed_everything`` and ``--data.seed``, so for a given seed all methods train on identical client
shards and identical per-round client and minibatch draws.

Outputs in ``--out`` (made before anything is written: one that cannot be made is one ``error:`` line):
``metrics.csv`` (per-round metrics of every run), ``results.md`` (one row per method) and ``accuracy.png`` (test
accuracy vs round, mean over seeds with a min-max band). Each run lives in ``runs/<method>/seed<seed>/``:
``run_config.yaml`` (the generated config), ``command.txt`` (the equivalent ``lightning-sfl fit`` command),
``log.txt`` (its output), ``logs/`` (Lightning's ``metrics.csv``, which the comparison reads, and resolved
``config.yaml``; checkpoints are deleted unless ``--keep_checkpoints``) and ``wandb/`` (its W&B run).

W&B, as for ``fit`` (offline unless W&B's own switches, ``WANDB_MODE`` or ``wandb online``, say otherwise): every run
is a W&B run named as a fit's run folder, ``<method>-<dataset>-<partition>-s<seed>-<key>``, grouped with the other
seeds of its method (``<method>-<dataset>-<partition>-<key>``, ``key`` a hash of the setting without its seeds;
``WANDB_RUN_GROUP`` if set), tagged with method, dataset, partition, seed and ``compare-<OUT's name>``, ``job_type``
fit (:func:`wandb_env`); the comparison itself is a W&B run in ``OUT/wandb/`` (``job_type`` compare, its command as
config and notes, its table as a ``wandb.Table``, its plots as images; W&B's messages about it in ``OUT/log.txt``;
:mod:`.tracking`). ``--wandb false``: CSV logs only. ``--trainer.logger`` is not an override (the comparison needs
its CSV log).

While runs train, a terminal shows a status line on stderr (runs finished, running and failed, the best final test
accuracy so far and its method: :class:`~lightning_sfl.trials.status.StatusLine`), cleared before each run's line and
before the table; in a log or captured output there is none.

``--reuse`` skips runs whose folder holds a finished run of the same config and command, and continues an
unfinished one from its last checkpoint (``fit --ckpt_path last``); ``--add`` adds ``--methods`` to the
comparison already in ``--out`` (produced by the same command but for its methods): the other methods' runs are
read back from its ``metrics.csv``, not run again, and the report (whose command lists every method) covers all.
Runs are independent trials seeded by their seed (in warm workers of :class:`~lightning_sfl.trials.TrialPool` by
default, ``--isolate`` for a process each, ``--launcher slurm``), so adding a method gives what the full command
would.

The aggregation (:func:`read_lightning_metrics`, :func:`summarize`, :func:`~lightning_sfl.compare.summary.format_table`,
:func:`accuracy_curves`) is pure and works on plain per-round records, without training.

Modules: :mod:`.records` (per-round records, per-run statistics, ``metrics.csv``), :mod:`.summary` (aggregation
over seeds, the table), :mod:`.config` (configs, overrides, the run plan), :mod:`.runner` (running the plan),
:mod:`.report` (``results.md``, ``accuracy.png``), :mod:`.tracking` (the comparison's W&B run), :mod:`.options` (the
command line) and :mod:`.cli` (:func:`~lightning_sfl.compare.cli.main`). Every public name is importable from
``lightning_sfl.compare``.
"""

from lightning_sfl.trials import error_from_output

from .cli import main, run_compare
from .config import (
    FIT_FLAGS,
    LINKED_MODEL_ARGS,
    LOG_SUBDIR,
    RESERVED_OVERRIDES,
    Plan,
    RunSpec,
    check_overrides,
    class_path,
    fit_args,
    group_overrides,
    init_parameters,
    method_config,
    method_overrides,
    non_model_overrides,
    plan_runs,
    resolve_config,
    resolve_method,
    wandb_env,
)
from .config import _dir_name as _dir_name  # a run's folder name (used by the tests)
from .options import OPTIONS, build_parser, command_line, parse_args, split_overrides
from .records import (
    ACC_KEY,
    CSV_COLUMNS,
    CUM_BYTES_KEY,
    ROUND_BYTES_KEY,
    Reach,
    RunResult,
    best_acc,
    divergence_round,
    final_acc,
    reach,
    read_lightning_metrics,
    read_metrics_csv,
    rounds_to_target,
    total_bytes,
    write_metrics_csv,
)
from .report import plot_accuracy, results_markdown, write_report
from .runner import execute, run_spec, trial_of
from .summary import (
    MethodSummary,
    accuracy_curves,
    describe_data,
    format_acc,
    format_bytes,
    format_percent,
    format_reached,
    format_rounds,
    format_table,
    mean_std,
    plural,
    summarize,
    summary_cells,
    table_header,
    targets_of,
)
from .tracking import ComparisonRun, comparison_payload

__all__ = [
    "ACC_KEY",
    "ComparisonRun",
    "comparison_payload",
    "CSV_COLUMNS",
    "CUM_BYTES_KEY",
    "FIT_FLAGS",
    "LINKED_MODEL_ARGS",
    "LOG_SUBDIR",
    "OPTIONS",
    "RESERVED_OVERRIDES",
    "ROUND_BYTES_KEY",
    "MethodSummary",
    "Plan",
    "RunResult",
    "RunSpec",
    "accuracy_curves",
    "best_acc",
    "build_parser",
    "check_overrides",
    "class_path",
    "command_line",
    "describe_data",
    "divergence_round",
    "error_from_output",
    "execute",
    "final_acc",
    "fit_args",
    "format_acc",
    "format_bytes",
    "format_percent",
    "format_reached",
    "format_rounds",
    "format_table",
    "group_overrides",
    "init_parameters",
    "non_model_overrides",
    "resolve_config",
    "main",
    "mean_std",
    "method_config",
    "method_overrides",
    "parse_args",
    "plan_runs",
    "plot_accuracy",
    "plural",
    "read_lightning_metrics",
    "read_metrics_csv",
    "resolve_method",
    "results_markdown",
    "Reach",
    "reach",
    "rounds_to_target",
    "run_compare",
    "run_spec",
    "trial_of",
    "split_overrides",
    "summarize",
    "summary_cells",
    "table_header",
    "targets_of",
    "total_bytes",
    "wandb_env",
    "write_metrics_csv",
    "write_report",
]
