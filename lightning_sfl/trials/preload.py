"""What the fork server of the warm workers imports first (``multiprocessing``'s forkserver preload,
:func:`lightning_sfl.trials.pool.start_method`): torch, Lightning and the package, once for every worker it forks.

And its exit without the interpreter's teardown of those modules: the server shares the command's standard output and
error, so a pipe reading them (a shell pipeline, a ``subprocess`` that captures them) would otherwise see the command
end about a second after it has. The workers it forks end with ``os._exit`` anyway and skip this handler.
"""

import atexit
import os

import lightning_sfl.lightning_cli  # noqa: F401

atexit.register(os._exit, 0)
