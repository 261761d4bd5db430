"""Per-round client sampling and per-client minibatch sizes (pure functions).

>>> client_batch_sizes(torch.tensor([100, 300, 600]), batch_size=10).tolist()
[1, 3, 6]
"""

from __future__ import annotations

import torch

from lightning_sfl.errors import ConfigError


def round_generator(seed: int, round_idx: int, stream: int = 0) -> torch.Generator:
    """A CPU generator seeded by ``(seed, round, stream)`` so that a resumed run draws the same clients and
    minibatches as an uninterrupted one, whatever happened in the process before."""
    g = torch.Generator()
    g.manual_seed(((seed * 1_000_003 + round_idx) * 1_000_033 + stream) % (2**63 - 1))
    return g


def clients_per_round(num_clients: int, participation: float) -> int:
    """``S = max(1, round(ρ·K))``: number of clients selected per round."""
    return max(1, int(round(participation * num_clients)))


def sample_clients(num_clients: int, participation: float, seed: int, round_idx: int) -> torch.Tensor:
    """The sorted client ids ``C^i`` of round ``round_idx``: ``S`` distinct clients, uniformly at random, ``[S]``."""
    g = round_generator(seed, round_idx)
    chosen = torch.randperm(num_clients, generator=g)[: clients_per_round(num_clients, participation)]
    return chosen.sort().values


def client_batch_sizes(client_sizes: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Eq. (3): ``B_k = |D_k|·B / Σ_{j∈C} |D_j|`` rounded to whole numbers with ``Σ B_k = B`` and ``B_k ≥ 1``.

    Rounding is by largest remainder (ties to the lower position); clients that would get zero rows get one,
    taken from the clients with the largest ``B_k``. Requires ``B ≥ S``. Returns ``[S]`` int64.
    """
    sizes = client_sizes.to(torch.float64)
    s = len(sizes)
    if batch_size < s:
        raise ConfigError(f"batch_size={batch_size} is smaller than the {s} clients per round; each needs >= 1 row")
    exact = sizes * batch_size / sizes.sum()
    b = exact.floor().long()
    rest = exact - b
    order = torch.argsort(-rest, stable=True)
    b[order[: batch_size - int(b.sum())]] += 1
    while (b < 1).any():
        b[int(torch.argmax(b))] -= 1
        b[int(torch.nonzero(b < 1)[0])] += 1
    return b


def minibatch_indices(shard: torch.Tensor, rows: int, local_iters: int, generator: torch.Generator) -> torch.Tensor:
    """Row indices for ``local_iters`` minibatches of ``rows`` samples from one client's ``shard``, ``[T, rows]``.

    Samples are drawn without replacement from a random permutation of the shard; when the shard is used up
    a fresh permutation follows (like a shuffling DataLoader over the client's data).
    """
    need = rows * local_iters
    perms = [shard[torch.randperm(len(shard), generator=generator)] for _ in range(-(-need // len(shard)))]
    return torch.cat(perms)[:need].view(local_iters, rows)
