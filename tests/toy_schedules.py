"""Two toy schedules that prove the loop's shape for the systems to come (GAS: asynchronous events; Semi-SFL:
phases with an adaptive length), each with a toy method. Imported by the tests, and by the CLI as
``--model toy_schedules.ToyAsyncSFL`` / ``toy_schedules.ToyPhasedSFL`` (the tests folder is on ``sys.path``).

ToyAsync: ``C`` clients in flight on a simulated clock, each with its own speed. A client joins (downloads the
global client half into its slot), then runs ``E`` local iterations: each iteration's activations arrive at the
server ``seconds(k)`` after the previous one, the server takes one SGD step per arrival and sends the gradient
back; after the ``E``-th it uploads its half ``upload_seconds`` later and a client drawn uniformly from the idle
ones takes its slot. The global half is the ``|D_k|``-weighted mean of every ``uploads_per_round`` uploads: one
round per aggregation. Clients keep their slots (weights and momentum) across rounds.

ToyPhases: ``K_s`` server-only steps on data the server holds, then a synchronous client phase (the steps of
:class:`~lightning_sfl.loop.SyncRounds`, re-indexed). The method changes ``K_s`` between rounds from its training
loss (a state it declares with ``add_state``), as Semi-SFL's eq. 9 does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lightning_sfl.algorithms import SplitMethod
from lightning_sfl.loop import ClientStats, RoundEnd, Schedule, Step, SyncRounds
from lightning_sfl.loop.sampling import round_generator
from lightning_sfl.loop.selection import UniformSelection
from lightning_sfl.runtime.client_bank import ClientBank, SequentialBank
from lightning_sfl.system.comm import module_bytes

_EMPTY = torch.zeros(0, dtype=torch.long)


# ------------------------------------------------------------------------------------------- asynchronous
class ToyAsync(Schedule):
    """Asynchronous events in simulated-time order (ties: lower slot first).

    Args:
        clients_in_flight: ``C``, clients training at once (one slot each).
        iters_per_upload: ``E``, local iterations before a client uploads.
        uploads_per_round: uploads aggregated together (one round).
        rows: rows per arrival.
        seconds: seconds per local iteration of client ``k``: ``seconds[k % len(seconds)]``.
        upload_seconds: time from the last arrival to the upload.
    """

    kinds = ("join", "arrival", "upload")
    persistent_slots = True

    def __init__(
        self,
        clients_in_flight: int = 3,
        iters_per_upload: int = 2,
        uploads_per_round: int = 2,
        rows: int = 8,
        seconds: tuple[float, ...] = (1.0, 1.75, 3.0),
        upload_seconds: float = 0.5,
    ) -> None:
        self.clients_in_flight, self.iters_per_upload = clients_in_flight, iters_per_upload
        self.uploads_per_round, self.rows = uploads_per_round, rows
        self.seconds, self.upload_seconds = tuple(seconds), upload_seconds
        self.slots: list[dict] | None = None  # per slot: client, time of its next event, iterations done, next kind
        self.events = 0

    def num_slots(self, stats: ClientStats) -> int:
        return self.clients_in_flight

    def plan_round(self, round_idx: int, stats: ClientStats) -> list[Step]:
        if self.slots is None:  # clients 0..C-1 join at time 0
            self.slots = [{"client": j, "time": 0.0, "done": 0, "next": "join"} for j in range(self.clients_in_flight)]
        steps: list[Step] = []
        uploads = 0
        while uploads < self.uploads_per_round:
            j = min(range(len(self.slots)), key=lambda i: (self.slots[i]["time"], i))
            s = self.slots[j]
            k, t, kind = s["client"], s["time"], s["next"]
            g = round_generator(stats.seed, self.events, stream=7)
            rows, size = _EMPTY, 0
            if kind == "join":
                s.update(next="arrival", time=t + self.seconds[k % len(self.seconds)])
            elif kind == "arrival":
                shard = stats.shards[k]
                size = min(self.rows, len(shard))
                rows = shard[torch.randperm(len(shard), generator=g)[:size]]
                s["done"] += 1
                done = s["done"] == self.iters_per_upload
                s.update(next="upload" if done else "arrival")
                s["time"] = t + (self.upload_seconds if done else self.seconds[k % len(self.seconds)])
            else:
                uploads += 1
                busy = {o["client"] for o in self.slots}
                idle = [c for c in range(stats.num_clients) if c not in busy]
                new = idle[int(torch.randint(len(idle), (1,), generator=g))]
                self.slots[j] = {"client": new, "time": t, "done": 0, "next": "join"}
            last = kind == "upload" and uploads == self.uploads_per_round
            one = torch.tensor([k])
            steps.append(
                Step(kind, round_idx, len(steps), last, one, torch.tensor([size]), rows, torch.tensor([j]), time=t)
            )
            self.events += 1
        return steps

    def state_dict(self) -> dict:
        return {"slots": [dict(s) for s in self.slots] if self.slots else None, "events": self.events}

    def load_state_dict(self, state: dict) -> None:
        self.slots = [dict(s) for s in state["slots"]] if state.get("slots") else None
        self.events = int(state.get("events", 0))


class ToyAsyncSFL(SplitMethod):
    """Asynchronous SFL on :class:`ToyAsync`: an arrival is the base's local iteration for one client (server and
    that client's slot step once); an upload is buffered; the round's end aggregates the buffered uploads."""

    step_handlers = {"join": "join", "arrival": "local_iteration", "upload": "upload"}

    def __init__(self, clients_in_flight: int = 3, uploads_per_round: int = 2, **kwargs) -> None:
        self._toy = {"clients_in_flight": clients_in_flight, "uploads_per_round": uploads_per_round}
        super().__init__(**kwargs)
        self.uploads: list[tuple[dict[str, torch.Tensor], int]] = []  # empty at every round boundary

    def configure_schedule(self) -> Schedule:
        return ToyAsync(iters_per_upload=self.local_iters, **self._toy)

    def make_bank(self, template, num_slots) -> SequentialBank:
        return SequentialBank(template, num_slots)  # steps touch one slot: others must not move

    def start_round(self, step: Step) -> None:
        pass  # slots live across rounds; clients download when they join

    def join(self, step: Step) -> None:
        self.reset_slots(step.slots)

    def upload(self, step: Step) -> None:
        self.uploads.append((self.bank.snapshot(int(step.slots[0])), int(step.clients[0])))
        self.ledger.add("up", "client_half", module_bytes(self.client.net), step.slots)

    def aggregate(self, step: Step) -> None:
        states, clients = zip(*self.uploads)
        ClientBank.aggregate_snapshots(self.client.net, states, self.client_sizes[list(clients)])
        self.uploads.clear()


# ------------------------------------------------------------------------------------------- phases
class ToyPhases(Schedule):
    """``server_steps`` (``K_s``) server-only steps on ``server_rows`` rows the server holds (every 7th row of the
    training split), then the ``client_steps`` steps of a synchronous round."""

    kinds = ("server", "local")

    def __init__(self, server_steps: int = 2, client_steps: int = 2, server_rows: int = 16, selection=None) -> None:
        self.server_steps, self.server_rows = server_steps, server_rows
        self.client_phase = SyncRounds(client_steps, selection or UniformSelection())

    def plan_round(self, round_idx: int, stats: ClientStats) -> list[Step]:
        pool = torch.cat(stats.shards).sort().values[::7]
        g = round_generator(stats.seed, round_idx, stream=3)
        draws = [pool[torch.randperm(len(pool), generator=g)[: self.server_rows]] for _ in range(self.server_steps)]
        steps = [Step("server", round_idx, i, False, _EMPTY, _EMPTY, rows) for i, rows in enumerate(draws)]
        clients = self.client_phase.plan_round(round_idx, stats)
        return steps + [s.replace(index=len(steps) + i) for i, s in enumerate(clients)]

    def state_dict(self) -> dict:
        return {"server_steps": self.server_steps, "client_phase": self.client_phase.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.server_steps = int(state["server_steps"])
        self.client_phase.load_state_dict(state["client_phase"])


class ToyPhasedSFL(SplitMethod):
    """Server-only steps train the server half on the global client half's (frozen) features; client steps are
    the base's local iterations. After each round ``K_s`` grows by one (at most 4) when the server loss's moving
    average rose since the last round and shrinks by one (at least 1) otherwise."""

    step_handlers = {"server": "server_phase_step", "local": "local_iteration"}

    def __init__(self, server_steps: int = 2, **kwargs) -> None:
        self._server_steps = server_steps
        super().__init__(**kwargs)
        self.add_state("loss_trace", lambda: torch.zeros(2))  # [moving average, its value at the last round end]

    def configure_schedule(self) -> Schedule:
        return ToyPhases(self._server_steps, self.local_iters, selection=self.selection)

    def server_phase_step(self, step: Step) -> None:
        opt = self.optimizers()
        opt.zero_grad()
        loss = F.cross_entropy(self.server(self.client(step.x).detach()), step.y)
        self.manual_backward(loss)
        self.take_step(opt)
        self.loss_trace[0] = 0.5 * self.loss_trace[0] + 0.5 * loss.detach()
        self.log("train/server_phase_loss", loss.detach(), on_step=False, on_epoch=True, batch_size=step.num_rows)

    def on_round_end(self, event: RoundEnd) -> None:
        average, last = self.loss_trace.tolist()
        k = self.schedule.server_steps
        self.schedule.server_steps = min(k + 1, 4) if average > last else max(k - 1, 1)
        self.loss_trace[1] = self.loss_trace[0]
        self.log("schedule/server_steps", float(self.schedule.server_steps), on_step=False, on_epoch=True, batch_size=1)
