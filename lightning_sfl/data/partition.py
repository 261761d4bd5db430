"""Label-skewed client partitions as pure functions.

Every partitioner takes the training labels ``[N]`` and returns one ``int64`` index tensor per client.
Every sample is used at most once, no client is empty (an empty client is a ``ValueError``), and the
result depends only on the arguments (``seed`` included).

>>> import torch
>>> labels = torch.arange(10).repeat_interleave(10)  # 10 classes x 10 samples
>>> parts = quantity(labels, num_clients=10, alpha=2, seed=0)
>>> [len(torch.unique(labels[p])) for p in parts]
[2, 2, 2, 2, 2, 2, 2, 2, 2, 2]
>>> sum(len(p) for p in parts)
100
"""

from __future__ import annotations

import numpy as np
import torch

from lightning_sfl.errors import ConfigError

#: The partitions ``--data.partition`` accepts.
PARTITIONS: tuple[str, ...] = ("iid", "quantity", "dirichlet", "shards", "natural")


def _as_numpy(labels: torch.Tensor | np.ndarray) -> np.ndarray:
    return labels.cpu().numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)


def _grouped(owner: np.ndarray, num_clients: int, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``owner [n]`` (each row's client, ``-1``: unused) → ``(rows, sizes)``: the used rows grouped by client, in
    ascending order within a client, ``[Σ sizes]`` int64, and each client's number of rows, ``[K]`` int64. One sort
    of the rows, whatever ``K``."""
    sizes = np.bincount(owner[owner >= 0], minlength=num_clients)
    empty = np.flatnonzero(sizes == 0)
    if len(empty):
        raise ConfigError(
            f"partition={what} leaves client(s) {empty[:10].tolist()} without data; use fewer clients or a milder skew"
        )
    used = np.flatnonzero(owner >= 0)
    keys = owner[used].astype(np.int64) * len(owner) + used  # unique: sorted, client by client, rows ascending
    keys.sort()
    return torch.from_numpy(keys % len(owner)), torch.from_numpy(sizes.astype(np.int64, copy=False))


def split_rows(rows: torch.Tensor, sizes: torch.Tensor) -> list[torch.Tensor]:
    """``K × [|D_k|]``: client ``k``'s rows, ``rows[Σ_{j<k} sizes_j :][: sizes_k]``, as views of ``rows`` (one
    tensor holds every index)."""
    return list(rows.split(sizes.tolist()))


def _check_clients(num_clients: int, num_samples: int) -> None:
    if num_clients < 1:
        raise ConfigError(f"num_clients={num_clients} must be >= 1")
    if num_clients > num_samples:
        raise ConfigError(f"num_clients={num_clients} is larger than the number of training samples ({num_samples})")


def iid(labels: torch.Tensor, num_clients: int, seed: int = 0) -> list[torch.Tensor]:
    """Uniformly random, near-equal shards (sizes differ by at most one)."""
    return split_rows(*_iid(labels, num_clients, seed))


def _iid(labels: torch.Tensor, num_clients: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    y = _as_numpy(labels)
    _check_clients(num_clients, len(y))
    perm = np.random.default_rng(seed).permutation(len(y))
    # np.array_split(perm, K): the first n mod K clients one row more
    sizes = np.full(num_clients, len(y) // num_clients)
    sizes[: len(y) % num_clients] += 1
    owner = np.empty(len(y), np.int64)
    owner[perm] = np.repeat(np.arange(num_clients), sizes)
    return _grouped(owner, num_clients, "iid")


def quantity(labels: torch.Tensor, num_clients: int, alpha: int, seed: int = 0) -> list[torch.Tensor]:
    """Quantity-based label skew of the SCALA paper (§5.1): each client holds at most ``alpha`` classes.

    Each label's samples are split into about ``K·α/N`` equal portions (``K`` clients, ``N`` classes; when
    ``K·α/N`` is not whole, a seeded choice of classes gets one portion more so that there are exactly ``K·α``
    portions) and every client receives ``α`` portions of ``α`` *distinct* classes, drawn at random. The draw
    goes client by client; a class whose remaining portions equal the remaining clients is forced, which keeps
    the draw feasible. If ``K·α < N`` some classes get no portion and their samples stay unused.
    """
    return split_rows(*_quantity(labels, num_clients, alpha, seed))


def _quantity(labels: torch.Tensor, num_clients: int, alpha: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    y = _as_numpy(labels)
    _check_clients(num_clients, len(y))
    classes = np.unique(y)
    n_cls = len(classes)
    if not float(alpha).is_integer() or not 1 <= alpha <= n_cls:
        raise ConfigError(f"alpha={alpha} must be a whole number of classes per client in [1, {n_cls}]")
    alpha = int(alpha)
    rng = np.random.default_rng(seed)
    total = num_clients * alpha
    portions = np.full(n_cls, total // n_cls)
    portions[rng.permutation(n_cls)[: total % n_cls]] += 1
    remaining = portions.copy()
    owners: list[list[int]] = [[] for _ in range(n_cls)]  # owners[c] = clients holding a portion of class c
    for k, client in enumerate(rng.permutation(num_clients).tolist()):
        left = num_clients - k
        forced = np.flatnonzero(remaining == left)
        free = remaining > 0
        free[forced] = False
        picked = np.concatenate([forced, rng.choice(np.flatnonzero(free), alpha - len(forced), replace=False)])
        for c in picked.tolist():
            owners[c].append(client)
        remaining[picked] -= 1
    owner = np.full(len(y), -1, np.int64)
    for c, holders in enumerate(owners):
        idx = rng.permutation(np.flatnonzero(y == classes[c]))
        if holders and len(idx) < len(holders):
            raise ConfigError(
                f"alpha={alpha}: class {classes[c]} has {len(idx)} samples for {len(holders)} portions; "
                "use fewer clients or a smaller alpha (fewer classes per client)"
            )
        if holders:  # np.array_split(idx, H): the first len(idx) mod H portions one row more
            sizes = np.full(len(holders), len(idx) // len(holders))
            sizes[: len(idx) % len(holders)] += 1
            owner[idx] = np.repeat(np.asarray(holders, np.int64), sizes)
    return _grouped(owner, num_clients, "quantity")


def dirichlet(
    labels: torch.Tensor, num_clients: int, beta: float, seed: int = 0, max_tries: int = 100
) -> list[torch.Tensor]:
    """Distribution-based label skew of the SCALA paper (§5.1).

    Each client ``k`` draws ``p_k ~ Dir_N(β)`` and receives the share ``p_{k,y}`` of class ``y``. The papers do
    not say how the shares of a class, which need not sum to one over clients, become sample counts; here
    they are normalised per class, ``q_{k,y} = p_{k,y} / Σ_j p_{j,y}``, client ``k`` gets ``⌊q_{k,y}·n_y⌋``
    samples of class ``y``, and the leftovers of each class go one each to the clients with the largest
    fractional remainders (ties to the lower client index); a class whose shares all underflow to zero (tiny
    ``β``) is split evenly. Every sample is used exactly once. A draw that
    leaves a client empty is redrawn (up to ``max_tries`` times, from the same seeded stream), then it is an error.
    """
    return split_rows(*_dirichlet(labels, num_clients, beta, seed, max_tries))


def _dirichlet(
    labels: torch.Tensor, num_clients: int, beta: float, seed: int, max_tries: int = 100
) -> tuple[torch.Tensor, torch.Tensor]:
    y = _as_numpy(labels)
    _check_clients(num_clients, len(y))
    if not beta > 0:
        raise ConfigError(f"beta={beta} must be > 0")
    classes = np.unique(y)
    rng = np.random.default_rng(seed)
    by_class = [rng.permutation(np.flatnonzero(y == c)) for c in classes]
    clients = np.arange(num_clients)
    for _ in range(max_tries):
        p = rng.dirichlet(np.full(len(classes), float(beta)), size=num_clients)  # [K, N]
        col = p.sum(axis=0, keepdims=True)
        # for tiny β every client's share of a class can underflow to 0: that class is then split evenly
        q = np.divide(p, col, out=np.full_like(p, 1.0 / num_clients), where=col > 0)
        owner = np.empty(len(y), np.int64)
        sizes = np.zeros(num_clients, np.int64)
        for c, idx in enumerate(by_class):
            exact = q[:, c] * len(idx)
            counts = np.floor(exact).astype(np.int64)
            order = np.argsort(-(exact - counts), kind="stable")
            counts[order[: len(idx) - counts.sum()]] += 1
            owner[idx] = np.repeat(clients, counts)  # client k: the next counts[k] rows of the class's permutation
            sizes += counts
        if sizes.min() > 0:
            return _grouped(owner, num_clients, "dirichlet")
    raise ConfigError(
        f"partition=dirichlet with beta={beta} left a client empty in {max_tries} draws; "
        "use fewer clients or a larger beta"
    )


def shards(labels: torch.Tensor, num_clients: int, shards_per_client: int = 2, seed: int = 0) -> list[torch.Tensor]:
    """Pathological non-IID split of McMahan et al. (used by GAS): sort by label, cut into
    ``num_clients·shards_per_client`` equal shards, give each client ``shards_per_client`` random shards.
    The ``N mod (K·shards_per_client)`` samples left at the end of the sorted order stay unused."""
    return split_rows(*_shards(labels, num_clients, shards_per_client, seed))


def _shards(
    labels: torch.Tensor, num_clients: int, shards_per_client: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    y = _as_numpy(labels)
    _check_clients(num_clients, len(y))
    if shards_per_client < 1:
        raise ConfigError(f"shards_per_client={shards_per_client} must be >= 1")
    n_shards = num_clients * shards_per_client
    size = len(y) // n_shards
    if size == 0:
        raise ConfigError(f"shards_per_client={shards_per_client}: {n_shards} shards do not fit {len(y)} samples")
    rng = np.random.default_rng(seed)
    # sorted by label, random within a label: np.lexsort((permutation, y)), as one sort of unique keys
    order = np.argsort(y.astype(np.int64) * len(y) + rng.permutation(len(y)))
    assignment = rng.permutation(n_shards).reshape(num_clients, shards_per_client)  # client k: the shards of row k
    shard_owner = np.empty(n_shards, np.int64)
    shard_owner[assignment.ravel()] = np.repeat(np.arange(num_clients), shards_per_client)
    owner = np.full(len(y), -1, np.int64)
    owner[order[: n_shards * size]] = np.repeat(shard_owner, size)
    return _grouped(owner, num_clients, "shards")


def partition(
    labels: torch.Tensor,
    method: str,
    num_clients: int,
    *,
    alpha: int = 2,
    beta: float = 0.5,
    shards_per_client: int = 2,
    seed: int = 0,
) -> list[torch.Tensor]:
    """Dispatch to one of :data:`PARTITIONS` by name."""
    return split_rows(
        *partition_rows(
            labels, method, num_clients, alpha=alpha, beta=beta, shards_per_client=shards_per_client, seed=seed
        )
    )


def partition_rows(
    labels: torch.Tensor,
    method: str,
    num_clients: int,
    *,
    alpha: int = 2,
    beta: float = 0.5,
    shards_per_client: int = 2,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`partition` as ``(rows, sizes)``: every client's rows in one tensor, client after client, ``[Σ |D_k|]``,
    and ``|D_k|``, ``[K]`` (:func:`split_rows` gives the list). Its cost grows with the rows and the clients, never
    with their product.

    >>> rows, sizes = partition_rows(torch.arange(4).repeat(3), "iid", 4, seed=0)
    >>> sizes.tolist(), sorted(rows.tolist())
    ([3, 3, 3, 3], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
    """
    if method == "iid":
        return _iid(labels, num_clients, seed)
    if method == "quantity":
        return _quantity(labels, num_clients, alpha, seed)
    if method == "dirichlet":
        return _dirichlet(labels, num_clients, beta, seed)
    if method == "shards":
        return _shards(labels, num_clients, shards_per_client, seed)
    if method == "natural":
        raise ConfigError("partition='natural' is the dataset's own clients (leaf_synthetic): nothing to partition")
    raise ConfigError(f"partition={method!r} is not one of: {', '.join(PARTITIONS)}")


def label_counts(
    labels: torch.Tensor, rows: torch.Tensor, sizes: torch.Tensor, num_classes: int, block: int = 1 << 16
) -> torch.Tensor:
    """``n_{k,y}``: samples of each class held by each client, ``[K, num_classes]`` int64, of the clients' rows given as
    :func:`partition_rows` gives them. One count per block of consecutive clients of about ``block`` rows (no loop over
    the clients): each block's arrays stay in the caches, so the cost per row does not grow with the clients.

    >>> label_counts(torch.tensor([0, 1, 1, 0]), torch.tensor([3, 0, 1, 2]), torch.tensor([2, 2]), 2).tolist()
    [[2, 0], [0, 2]]
    """
    k = len(sizes)
    out = torch.zeros(k, num_classes, dtype=torch.long)
    ends = torch.cumsum(sizes, 0)
    total = int(ends[-1]) if k else 0
    cuts = torch.searchsorted(ends, torch.arange(1, total // block + 1) * block, right=True).tolist()
    bounds = sorted({0, *cuts, k})
    starts = [0, *ends.tolist()]
    for first, last in zip(bounds[:-1], bounds[1:]):  # clients first..last-1
        cells = labels[rows[starts[first] : starts[last]]].to(torch.long)
        cells += torch.repeat_interleave(torch.arange(0, (last - first) * num_classes, num_classes), sizes[first:last])
        out[first:last] = torch.bincount(cells, minlength=(last - first) * num_classes).view(-1, num_classes)
    return out


def label_distribution(labels: torch.Tensor, parts: list[torch.Tensor], num_classes: int) -> torch.Tensor:
    """``P_k(y)``: each client's local label distribution, ``[K, num_classes]``, rows sum to one."""
    sizes = torch.tensor([len(p) for p in parts], dtype=torch.long)
    rows = torch.cat(list(parts)) if len(parts) else torch.zeros(0, dtype=torch.long)
    counts = label_counts(labels, rows, sizes, num_classes).double()
    return counts / counts.sum(dim=1, keepdim=True)


def labelled_split(labels: torch.Tensor, per_class: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A class-balanced labelled set for the server (semi-supervised methods) and the rest of the data.

    Returns ``(labelled, rest)``: ``per_class`` rows of every class drawn without replacement by a generator seeded
    by ``seed`` (sorted), and every other row (sorted); disjoint, together all rows.

    >>> labelled, rest = labelled_split(torch.tensor([0, 1, 0, 1, 0, 1]), 1, seed=0)
    >>> torch.bincount(torch.tensor([0, 1, 0, 1, 0, 1])[labelled]).tolist(), len(rest)
    ([1, 1], 4)
    """
    counts = torch.bincount(labels)
    if int(per_class) != per_class or per_class < 1:
        raise ConfigError(f"labelled_per_class={per_class!r} must be a whole number >= 1")
    if per_class >= int(counts[counts > 0].min()):
        raise ConfigError(
            f"labelled_per_class={per_class} leaves no unlabelled data of the smallest class "
            f"({int(counts[counts > 0].min())} samples); use fewer"
        )
    g = torch.Generator().manual_seed(seed + 7919)  # its own stream: the partition's draws stay as they were
    picked = []
    for c in torch.nonzero(counts).flatten().tolist():
        rows = torch.nonzero(labels == c).flatten()
        picked.append(rows[torch.randperm(len(rows), generator=g)[:per_class]])
    labelled = torch.cat(picked).sort().values
    keep = torch.ones(len(labels), dtype=torch.bool)
    keep[labelled] = False
    return labelled, torch.nonzero(keep).flatten()
