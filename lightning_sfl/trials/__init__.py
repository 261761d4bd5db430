"""Trials: ``lightning-sfl`` commands (a ``fit`` of ``compare`` or of a ``sweep``) run by a pool that both commands
share (:class:`TrialPool`).

::

    from lightning_sfl.trials import Trial, TrialPool

    trial = Trial(["fit", "--config", "configs/digits/scala.yaml"], cwd="runs/t0", log="runs/t0/log.txt")
    with TrialPool(jobs=2) as pool:  # two warm workers
        outcome = pool.run(trial)
    outcome.exit_code, outcome.error, outcome.seconds

Launchers (``TrialPool(launcher=...)``):

``warm`` (default)
    ``jobs`` long-lived worker processes. Each imports torch, Lightning and the package once, then runs trial after
    trial: the trial's command (``fit``, ``validate``, ``test``, ``attack`` or ``cuts``) through the modules the
    command line dispatches to (:func:`lightning_sfl.trials.worker.run_command`, without the console script's fast
    exit) in a fresh Trainer, in the trial's folder, with its environment, its output in its log; then it finishes
    the trial's W&B runs and puts back what a trial may change in the process (working folder, environment, torch's
    threads and matmul precision, deterministic-algorithm switch, warning filters). Workers use as many torch threads
    as the process that made the pool (a trial's ``--torch_threads`` sets its own).
    A trial's exception or error exit is its outcome; a worker that dies (a crash, ``os._exit``) fails its trial
    alone and is replaced.
``isolate``
    each trial in a process of its own (``python -m lightning_sfl.cli ...``), as a user would type it.
``slurm`` / ``submitit-local``
    each trial a job of `submitit <https://github.com/facebookincubator/submitit>`_ (``pip install
    'lightning-sfl[slurm]'``) on SLURM, or on this machine with submitit's local executor (the same code path
    without a cluster); its logs and pickles in the pool's ``folder``.

Beside the pool: :mod:`.status` (the live status line both commands show on a terminal while trials run),
:mod:`.folders` (their ``--out``, made for real before anything is written) and :mod:`.options` (the launcher's
command-line options).
"""

from .pool import LAUNCHERS, TrialPool, one_thread_before_fork
from .spec import Outcome, Trial, error_from_output

__all__ = ["LAUNCHERS", "Outcome", "Trial", "TrialPool", "error_from_output", "one_thread_before_fork"]
