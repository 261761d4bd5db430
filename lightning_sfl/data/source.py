"""Any torch ``Dataset`` of ``(x, y)`` as the federation's data (``--data.dataset`` given as a class path).

The dataset is read once into two tensors, ``x [N, C, H, W]`` and ``y [N]`` (:func:`materialise`), as the built-in
datasets are held: PIL images become ``uint8`` tensors (``pil_to_tensor``: raw pixels, scaled by 1/255 when used, as
the built-in image sets), tensors and arrays are kept in their type (``uint8`` stays ``uint8``, anything else becomes
``float32``); a sample of shape ``[H, W]`` gets one channel, one of shape ``[F]`` becomes ``[F, 1, 1]``. Every sample
must have the shape of the first (give the dataset a ``transform`` that resizes otherwise). Labels are whole numbers
``0..N-1``, read from the dataset's ``targets`` or ``labels`` when it has them (a ``TensorDataset``'s second tensor),
else from the same pass; the class count is ``len(dataset.classes)`` when it has ``classes``, else the largest label
plus one.

A dataset given as a class path (a record: class path and init args) is cached in the data root
(``<root>/.lightning_sfl_cache/<digest>.pt``, ``uint8`` where the source is): a second run reads the tensors back
instead of decoding every image again. The digest covers the record, the dataset's length and, for a folder of files
(``samples``, as ``ImageFolder`` has), every file's path, size and modification time, so a changed folder is read
anew. A dataset whose tensors would take more than half of this machine's free memory is refused before it is read,
with the estimate (:func:`check_fits_in_memory`).

>>> import torch
>>> from torch.utils.data import TensorDataset
>>> x, y, classes = materialise(TensorDataset(torch.zeros(4, 8, 8), torch.tensor([0, 1, 2, 1])), "dataset")
>>> tuple(x.shape), y.tolist(), classes
((4, 1, 8, 8), [0, 1, 2, 1], 3)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from lightning_sfl.class_paths import NAMED, build, class_of, dataset_name, label_of, plain, record_of
from lightning_sfl.errors import ConfigError

__all__ = [
    "check_fits_in_memory", "check_source_options", "dataset_label", "dataset_record", "load_source", "materialise",
    "named_records",
]  # fmt: skip

#: The built-in datasets whose test split is drawn from their rows (``test_fraction``); the others have their own.
SPLIT_IN_MEMORY = ("digits", "mnist5k", "synthetic")

#: Fraction of the machine's free memory a dataset's tensors may take.
MEMORY_FRACTION = 0.5


def dataset_label(value: object) -> str:
    """The short name of a dataset for the run's folder, tags and plots: a built-in's name, a class's name in lower
    case (``imagefolder``, ``tensordataset``)."""
    return dataset_name(value if isinstance(value, str | Mapping) else {"class_path": label_of(value)})


def dataset_record(value: object) -> str | dict:
    """The record of a dataset option: a built-in's name, a class path with init args, or (an object given in Python)
    its class path marked ``instance`` (its arguments are not known)."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        path, init_args = record_of(value, "dataset")
        return {"class_path": path, "init_args": plain(init_args)}
    return {"class_path": label_of(value), "init_args": None, "instance": True}


def check_source_options(
    built_in: bool, dataset: object, test_dataset: object, test_fraction: float, download: bool, image_size: int
) -> None:
    """Refuse, in one line, the data options that would change nothing for ``dataset`` (or are out of range)."""
    if not 0 < test_fraction < 1:
        raise ConfigError(f"test_fraction={test_fraction} must be in (0, 1)")
    if built_in:
        if test_dataset is not None:
            raise ConfigError(f"test_dataset goes with a dataset given as a class path; {dataset!r} has its own split")
        if test_fraction != 0.2 and dataset not in SPLIT_IN_MEMORY:
            raise ConfigError(
                f"test_fraction={test_fraction} changes nothing for dataset={dataset!r}, which has a test split of its "
                f"own (it draws one for: {', '.join(SPLIT_IN_MEMORY)}, or a class path without test_dataset)"
            )
        return
    if test_dataset is not None and test_fraction != 0.2:
        raise ConfigError(f"test_fraction={test_fraction} changes nothing with a test_dataset (the test split)")
    if download:
        raise ConfigError("download=true is for the built-in datasets; a dataset given as a class path has its own")
    if image_size != 32:
        raise ConfigError(
            f"image_size={image_size} is for cinic10 and imagenette; resize a dataset given as a class path with its "
            "transform"
        )


def named_records(name: str, root: str) -> tuple[dict, dict | None]:
    """The records of the train and test splits of the dataset an installed package publishes as ``name``
    (:data:`~lightning_sfl.class_paths.NAMED`): its class with ``root`` (the data root) when it takes one, and
    ``train=True``/``train=False`` when it takes ``train`` (torchvision's convention; else no test split of its own:
    ``test_fraction`` of its rows are held out)."""
    import inspect

    cls = NAMED["dataset"][name]
    path = f"{cls.__module__}.{cls.__qualname__}"
    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        parameters = {}
    init_args = {"root": str(root)} if "root" in parameters else {}
    if "train" not in parameters:
        return {"class_path": path, "init_args": init_args}, None
    return {"class_path": path, "init_args": {**init_args, "train": True}}, {
        "class_path": path,
        "init_args": {**init_args, "train": False},
    }


def _instance(value: object, what: str) -> torch.utils.data.Dataset:
    if isinstance(value, torch.utils.data.Dataset):
        return value
    cls, init_args = class_of(value, what, torch.utils.data.Dataset, "a built-in dataset")
    return build(cls, init_args, torch.utils.data.Dataset, what)


def _sample_tensor(x: object, what: str, index: int) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        t = x
    elif isinstance(x, np.ndarray):
        t = torch.from_numpy(np.ascontiguousarray(x))
    elif hasattr(x, "getbands"):  # a PIL image
        from torchvision.transforms.functional import pil_to_tensor

        t = pil_to_tensor(x)
    else:
        raise ConfigError(
            f"{what}: sample {index} is a {type(x).__name__}, not an image, array or tensor (give a transform)"
        )
    if t.dim() == 1:
        t = t[:, None, None]
    elif t.dim() == 2:
        t = t[None]
    if t.dim() != 3:
        raise ConfigError(f"{what}: sample {index} has shape {list(t.shape)}; samples must be [C, H, W], [H, W] or [F]")
    return t if t.dtype == torch.uint8 else t.float()


def _label(y: object, what: str, index: int) -> int:
    value = y.item() if isinstance(y, torch.Tensor | np.ndarray) and getattr(y, "size", 1) in (1, ()) else y
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ConfigError(f"{what}: sample {index}'s label is {y!r}; labels must be whole numbers 0, 1, …")
    return int(value)


def check_fits_in_memory(rows: int, sample: torch.Tensor, what: str) -> None:
    """Refuse, with the estimate, a dataset whose ``rows`` samples like ``sample`` would take more than
    :data:`MEMORY_FRACTION` of this machine's free memory."""
    need = rows * sample.numel() * sample.element_size()
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return
    if need > MEMORY_FRACTION * free:
        raise ConfigError(
            f"{what} would take {need / 2**30:.1f} GiB in memory ({rows} samples of shape {list(sample.shape)}, "
            f"{sample.dtype}), more than {MEMORY_FRACTION:.0%} of this machine's free {free / 2**30:.1f} GiB: give a "
            "smaller one (a transform that resizes, a subset)"
        )


def materialise(dataset: torch.utils.data.Dataset, what: str) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``(x [N, C, H, W], y [N] int64, number of classes)`` of ``dataset`` (see the module docstring)."""
    tensors = getattr(dataset, "tensors", None)
    n = len(dataset)  # type: ignore[arg-type]
    if n == 0:
        raise ConfigError(f"{what} is empty")
    if isinstance(tensors, tuple) and len(tensors) >= 2:  # a TensorDataset: no pass over its rows
        first = _sample_tensor(tensors[0][0], what, 0)
        x = tensors[0].reshape(n, *first.shape)
        x = x if x.dtype == torch.uint8 else x.float()
        y = torch.as_tensor(tensors[1]).reshape(-1)
        labels = [_label(v, what, i) for i, v in enumerate(y.tolist())] if y.dtype.is_floating_point else None
        y = torch.tensor(labels) if labels is not None else y.long()
    else:
        first = _sample_tensor(dataset[0][0], what, 0)
        check_fits_in_memory(n, first, what)
        x = torch.empty(n, *first.shape, dtype=first.dtype)
        ys = []
        for i in range(n):
            item = dataset[i]
            if not isinstance(item, tuple | list) or len(item) < 2:
                raise ConfigError(f"{what}: sample {i} is not an (x, y) pair")
            t = first if i == 0 else _sample_tensor(item[0], what, i)
            if t.shape != first.shape:
                raise ConfigError(
                    f"{what}: sample {i} has shape {list(t.shape)}, sample 0 {list(first.shape)}: give a transform "
                    "that makes them one size"
                )
            x[i] = t
            ys.append(_label(item[1], what, i))
        y = torch.tensor(ys, dtype=torch.int64)
    if y.numel() != n or (y < 0).any():
        raise ConfigError(f"{what}: labels must be whole numbers 0, 1, …, one per sample")
    classes = getattr(dataset, "classes", None)
    count = len(classes) if isinstance(classes, list | tuple) and classes else int(y.max()) + 1
    if int(y.max()) >= count:
        raise ConfigError(f"{what}: label {int(y.max())} is not one of its {count} classes")
    return x.contiguous(), y, count


def _digest(record: dict, dataset: torch.utils.data.Dataset) -> str:
    h = hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode())
    h.update(str(len(dataset)).encode())  # type: ignore[arg-type]
    for sample in getattr(dataset, "samples", None) or []:
        path = Path(str(sample[0] if isinstance(sample, tuple | list) else sample))
        try:
            stat = path.stat()
        except OSError:
            continue
        h.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return h.hexdigest()[:32]


def _cached(value: object, root: Path, what: str) -> tuple[torch.Tensor, torch.Tensor, int]:
    """:func:`materialise` of the dataset ``value``; for a class path, through the cache in ``root``."""
    dataset = _instance(value, what)
    record = dataset_record(value)
    if not isinstance(record, dict) or record.get("instance"):
        return materialise(dataset, what)
    cache = root / ".lightning_sfl_cache" / f"{_digest(record, dataset)}.pt"
    if cache.is_file():
        try:
            saved = torch.load(cache, weights_only=True)
            return saved["x"], saved["y"], int(saved["classes"])
        except Exception:  # (a damaged cache file is read anew)
            pass
    x, y, classes = materialise(dataset, what)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_suffix(".partial")
        torch.save({"x": x, "y": y, "classes": classes, "record": record}, partial)
        partial.replace(cache)
    except OSError:  # (a read-only root: no cache)
        pass
    return x, y, classes


def _channel_stats(x: torch.Tensor) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and standard deviation of ``x`` as the model sees it (``uint8`` scaled by 1/255)."""
    total = torch.zeros(x.shape[1], dtype=torch.float64)
    squares = torch.zeros_like(total)
    for start in range(0, len(x), 4096):
        chunk = x[start : start + 4096].double()
        chunk = chunk / 255.0 if x.dtype == torch.uint8 else chunk
        total += chunk.sum(dim=(0, 2, 3))
        squares += (chunk**2).sum(dim=(0, 2, 3))
    count = len(x) * math.prod(x.shape[2:])
    mean = total / count
    std = (squares / count - mean**2).clamp_min(0).sqrt()
    return tuple(float(v) for v in mean), tuple(max(float(v), 1e-6) for v in std)


def load_source(dataset: object, test_dataset: object | None, test_fraction: float, seed: int, root: Path):
    """The :class:`~lightning_sfl.data.datasets.DatasetSplits` of ``dataset`` (a class path or a ``Dataset``) and
    ``test_dataset`` (same form), or, without one, a stratified ``test_fraction`` of its rows drawn with ``seed``."""
    from lightning_sfl.data.datasets import DatasetSplits

    x, y, classes = _cached(dataset, root, "dataset")
    if test_dataset is not None:
        test_x, test_y, test_classes = _cached(test_dataset, root, "test_dataset")
        if test_x.shape[1:] != x.shape[1:]:
            raise ConfigError(
                f"test_dataset's samples have shape {list(test_x.shape[1:])}, dataset's {list(x.shape[1:])}"
            )
        classes = max(classes, test_classes)
        train_x, train_y = x, y
    else:
        from sklearn.model_selection import train_test_split

        counts = torch.bincount(y, minlength=classes)
        stratify = y.numpy() if int(counts[counts > 0].min()) >= 2 else None
        try:
            train_idx, test_idx = train_test_split(
                np.arange(len(y)), test_size=test_fraction, stratify=stratify, random_state=seed
            )
        except ValueError as exc:
            raise ConfigError(f"test_fraction={test_fraction} of {len(y)} rows: {exc}") from None
        train_idx, test_idx = torch.from_numpy(np.sort(train_idx)), torch.from_numpy(np.sort(test_idx))
        train_x, train_y, test_x, test_y = x[train_idx], y[train_idx], x[test_idx], y[test_idx]
    mean, std = _channel_stats(train_x)
    return DatasetSplits(
        train_x.contiguous(), train_y, test_x.contiguous(), test_y, classes, mean, std, dataset_label(dataset)
    )
