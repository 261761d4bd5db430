"""``SplitGuard``: the clients' detector of a training-hijacking server (Erdogan, Küpçü and Çiçek, WPES 2022), run as
a probe at the start of rounds; the score is :func:`lightning_sfl.privacy.splitguard.splitguard_score`.

**What it measures.** At rounds ``i`` with ``i % every_n_rounds == 0`` (0: off), each client of the round's first step
(the first ``max_clients`` of them) takes the global client half it downloads and uploads ``fake_batches`` fake batches
(every label shifted by a random ``s ∈ 1..N−1``, mod ``N``) and ``regular_batches`` regular ones, ``batch_size`` rows
each, drawn from its shard. The server answers every upload with its gradient as it does in training
(:func:`server_gradients`: the method's own losses at the global
server half; FSHA's critic for the hijacker), the client backpropagates it through its half and keeps the first
layer's gradient. The regular gradients are split at random in two halves, and each client's score is logged::

    splitguard/score        mean over the probed clients of SplitGuard's SG (honest server: near 1; hijacker: ≲ 0.25)
    splitguard/score_min    the lowest client's SG

Uploads carry the client's defences (noise, ``tanh``) as in training.

**Departures from the authors' protocol** (``ege-erdogan/splitguard``, ``label-changing/splitguard.ipynb``): there the
client mixes fake batches into training (probability 0.1 after 20 batches), does not step on them, and scores over all
batches so far, while the server, which cannot tell, steps on every batch. Here the probe runs beside training: nobody
steps on its batches, so the training is the same with and without it (weights, buffers, random state), each score is
one round's probe at the round's global model, and the probe's traffic is not in the ledger.

**Cost.** ``(fake_batches + regular_batches) · batch_size`` rows through the client half, the server half and back per
probed client and measured round.
"""

from __future__ import annotations

import copy
from typing import ClassVar

import torch
from typing_extensions import override

from lightning_sfl.callbacks.round_callback import RoundCallback
from lightning_sfl.errors import ConfigError, whole_number
from lightning_sfl.loop import Federation, Step
from lightning_sfl.loop.step import PROBE_KIND
from lightning_sfl.privacy.splitguard import shifted_labels, splitguard_score
from lightning_sfl.runtime.iteration import activation_gradients

__all__ = ["SplitGuard", "probes", "server_gradients"]


class SplitGuard(RoundCallback):
    """SplitGuard's score of the round's clients (keys ``splitguard/*``; see the module docstring).

    Args:
        every_n_rounds: probe at rounds ``i`` with ``i % every_n_rounds == 0``; 0 (default) turns it off.
        fake_batches: fake batches a probed client sends (labels shifted).
        regular_batches: regular batches a probed client sends (split at random into ``R1`` and ``R2``; at least 2).
        batch_size: rows of every probe batch (the authors' ``b_fake``: 64); a smaller shard sends all its rows.
        max_clients: probe at most the first this many clients of the round (``None``: all).
        seed: the probe's draws (rows, shifts, the split of the regular batches, noise) come from ``(seed, round,
            client)``.
    """

    #: The command line's group of its options (``--splitguard.every_n_rounds``), named in its errors.
    cli_group: ClassVar[str] = "splitguard"

    def __init__(
        self,
        every_n_rounds: int = 0,
        fake_batches: int = 4,
        regular_batches: int = 8,
        batch_size: int = 64,
        max_clients: int | None = None,
        seed: int = 0,
    ) -> None:
        group = self.cli_group
        self.every_n_rounds = whole_number(f"{group}.every_n_rounds", every_n_rounds, low=0)
        self.fake_batches = whole_number(f"{group}.fake_batches", fake_batches)
        self.regular_batches = whole_number(f"{group}.regular_batches", regular_batches, low=2)
        self.batch_size = whole_number(f"{group}.batch_size", batch_size)
        self.max_clients = None if max_clients is None else whole_number(f"{group}.max_clients", max_clients)
        self.seed = int(seed)
        self.federation: Federation | None = None

    @override
    def on_federation(self, trainer, pl_module, federation: Federation) -> None:
        if self.every_n_rounds and not probes(pl_module):
            raise ConfigError(
                f"splitguard.every_n_rounds={self.every_n_rounds} needs a split method whose clients hold labels, "
                f"upload from the half they download and get the server's gradients; {type(pl_module).__name__} is "
                "not one (set 0 to turn SplitGuard off)"
            )
        self.federation = federation

    @override
    def on_round_start(self, trainer, pl_module, step: Step) -> None:
        if not self.every_n_rounds or step.round % self.every_n_rounds or not len(step.clients):
            return
        clients = step.clients.tolist()[: self.max_clients]
        scores = self.measure(pl_module, self.federation, clients, step.round)
        metrics = {"splitguard/score": sum(scores) / len(scores), "splitguard/score_min": min(scores)}
        pl_module.log_dict(metrics, on_step=False, on_epoch=True, batch_size=1)

    def measure(self, pl_module, federation: Federation, clients: list[int], round_index: int) -> list[float]:
        """SplitGuard's score of each of ``clients`` at the method's global halves (nothing of the method changes)."""
        device = pl_module.device
        saved = {name: b.detach().clone() for name, b in pl_module.named_buffers()}
        rng_devices = [device.index or 0] if device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=rng_devices), torch.enable_grad():
                return [self._client_score(pl_module, federation, k, round_index) for k in clients]
        finally:
            for name, buffer in pl_module.named_buffers():
                buffer.copy_(saved[name])

    def _client_score(self, pl_module, federation: Federation, client: int, round_index: int) -> float:
        data, shard = federation.data, federation.stats.shards[client]
        g = torch.Generator().manual_seed(((self.seed * 1_000_003 + round_index) * 1_000_033 + client) % (2**63 - 1))
        net = copy.deepcopy(pl_module.client.net)  # the global half; its BatchNorm statistics stay
        first = next(p for p in net.parameters() if p.requires_grad)
        noise = torch.Generator(device=pl_module.device).manual_seed(int(torch.randint(2**62, (1,), generator=g)))
        num_classes = pl_module.num_classes
        gradients = []
        for batch in range(self.fake_batches + self.regular_batches):
            rows = shard[torch.randperm(len(shard), generator=g)[: self.batch_size]]
            x = data.train_inputs(rows, pl_module.device)
            y = data.train_labels(rows).to(pl_module.device)
            if batch < self.fake_batches:
                y = shifted_labels(y, int(torch.randint(1, num_classes, (1,), generator=g)), num_classes)
            sent = pl_module.defences.upload(net(x), noise)
            answer = server_gradients(pl_module, sent, y, client, round_index)
            (grad,) = torch.autograd.grad(sent, first, answer)
            gradients.append(grad.flatten().double().cpu())
        fake, regular = torch.stack(gradients[: self.fake_batches]), torch.stack(gradients[self.fake_batches :])
        order = torch.randperm(len(regular), generator=g)
        half = len(regular) // 2
        return float(splitguard_score(fake, regular[order[:half]], regular[order[half:]]))


def probes(method) -> bool:
    """The clients of ``method`` hold labels, upload ``h`` of the global half they download and get the server's
    gradients back: what SplitGuard probes (not SFLLocalLoss, SplitFedV3, Semi-SFL or a plain FL method)."""
    from lightning_sfl.algorithms.split_method import SplitMethod  # (the method's package is imported by now)

    split = isinstance(method, SplitMethod)  # (a split method: its shape has a cut)
    return split and method.answers_with_gradients and not method.keeps_client_halves  # the probe: the global half


def server_gradients(method, sent: torch.Tensor, labels: torch.Tensor, client: int, round_index: int) -> torch.Tensor:
    """The gradient ``G`` ``[n, *act]`` the server of ``method`` answers one client's upload ``sent`` ``[n, *act]``
    (labels ``[n]``) with, computed as in training (the method's ``answer_loss``) at the global server half, without
    any update. The caller keeps the buffers (BatchNorm) and the random state."""
    n, device = len(labels), labels.device
    step = Step(
        kind=PROBE_KIND,
        round=round_index,
        index=0,
        round_end=False,
        clients=torch.tensor([client], device=device),
        sizes=torch.tensor([n], device=device),
        rows=torch.zeros(n, dtype=torch.long, device=device),
        y=labels,
        owner=torch.zeros(n, dtype=torch.long, device=device),
        local_sizes=torch.tensor([n], device=device),
        label_counts=torch.bincount(labels, minlength=method.num_classes),
    )
    a = sent.detach().requires_grad_(True)
    return activation_gradients(method.answer_loss(a, step), a, keep_graph=False)
