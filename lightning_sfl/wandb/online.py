"""Whether an online W&B run can start here, found before the run does: without a network, a reachable server or an
API key, ``wandb.init`` in online mode fails (or waits for a minute) and the run's W&B record is lost; the command line
logs such a run offline instead and says why in one line (:func:`offline_reason`, :func:`offline_line`).

Imports neither torch nor Lightning, and W&B only to read its settings when a run would be online.
"""

from __future__ import annotations

import netrc
import os
import urllib.error
import urllib.request
from urllib.parse import urlparse

from lightning_sfl.wandb.process import wandb_switch

__all__ = ["announce_offline", "logs_online", "offline_line", "offline_reason", "server_of", "where_logged"]

#: Seconds the check waits for W&B's server to answer before the run goes offline.
TIMEOUT = 3.0


def logs_online(offline: bool | None) -> bool:
    """Whether a W&B logger with this ``offline`` setting starts an online run: ``None`` (the command line's default)
    when W&B's own switches say online (:func:`~lightning_sfl.wandb.process.wandb_switch`); ``False`` unless they say
    otherwise (``WANDB_MODE`` wins in ``wandb.init``)."""
    if offline:
        return False
    switch = wandb_switch()
    return switch in ("online", "run") if offline is None else switch in (None, "online", "run")


def server_of() -> str:
    """W&B's server as W&B would use it: ``WANDB_BASE_URL``, else its settings files' ``base_url``, else its
    default."""
    if os.environ.get("WANDB_BASE_URL"):
        return os.environ["WANDB_BASE_URL"]
    import wandb

    try:
        files = wandb.Settings().read_system_settings().all()
    except Exception:  # unreadable settings files: W&B itself ignores them
        files = {}
    return str(files.get("base_url") or wandb.Settings().base_url)


def _has_key(server: str) -> bool:
    """An API key for ``server``: ``WANDB_API_KEY``, or the ``netrc`` entry ``wandb login`` writes."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
    try:
        return netrc.netrc(path).authenticators(urlparse(server).hostname or "") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _unreachable(server: str, timeout: float) -> str | None:
    """Why ``server`` does not answer an HTTP request within ``timeout`` seconds (proxies as the environment sets
    them), or ``None`` when it answers, with any status."""
    try:
        with urllib.request.urlopen(urllib.request.Request(server, method="HEAD"), timeout=timeout):
            return None
    except urllib.error.HTTPError:  # it answered (401, 404, ...): reachable
        return None
    except urllib.error.URLError as exc:
        reason = exc.reason
        text = getattr(reason, "strerror", None) or str(reason)
        return f"cannot reach {server} ({text.lower()})"
    except (OSError, ValueError) as exc:  # a timeout, a malformed address
        return f"cannot reach {server} ({exc or type(exc).__name__})"


def offline_reason(timeout: float = TIMEOUT) -> str | None:
    """Why an online W&B run cannot start from this process (no API key, the server unreachable), or ``None`` when it
    can. Call it only for a run that would be online."""
    server = server_of()
    if not _has_key(server):
        return f"no API key for {server} (wandb login, or WANDB_API_KEY)"
    return _unreachable(server, timeout)


def offline_line(reason: str) -> str:
    """The one line a command prints when it logs offline for ``reason``."""
    return f"W&B: {reason}; this run logs offline (nothing is lost: wandb sync uploads it later)"


def announce_offline() -> str | None:
    """For a command whose W&B runs W&B's own switches make online (``attack``, ``compare``): why they cannot start
    here (:func:`offline_reason`), said now in one line on stderr; ``None`` when they are offline anyway or can
    start."""
    import sys

    reason = offline_reason() if logs_online(None) else None
    if reason is not None:
        print(offline_line(reason), file=sys.stderr, flush=True)
    return reason


def where_logged(run) -> tuple[str, str | None]:
    """Where a started W&B ``run`` (``wandb.Run`` or the worker's :class:`~lightning_sfl.wandb.process.RemoteRun`) is
    recorded: ``("offline", its folder)`` (``wandb sync <folder>`` uploads it) or ``("online", its URL)``."""
    if run.offline:
        return "offline", os.path.dirname(os.path.normpath(run.dir))  # (run.dir is the run's files/ folder)
    return "online", run.url
