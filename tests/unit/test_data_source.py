"""Any torch ``Dataset`` as the federation's data (``lightning_sfl.data.source``): an ImageFolder of generated images
read into ``uint8`` tensors pixel for pixel, cached in the root (a second run opens no image; a changed folder is read
again), a ``TensorDataset`` from Python, a stratified held-out test split or a test dataset of its own, every
partition and the label options on it, and one line for what cannot be used."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import TensorDataset

from lightning_sfl.data import FederatedDataModule
from lightning_sfl.data import source as data_source
from lightning_sfl.errors import ConfigError


def _images(folder, per_class=12, classes=3, size=6, seed=0):
    """An ImageFolder tree of RGB PNGs, ``classes`` folders of ``per_class`` images; returns the arrays by path."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for c in range(classes):
        (folder / f"c{c}").mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            a = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
            path = folder / f"c{c}" / f"{i:02d}.png"
            Image.fromarray(a).save(path)
            arrays[str(path)] = a
    return arrays


def _image_folder(root, **data):
    record = {"class_path": "torchvision.datasets.ImageFolder", "init_args": {"root": str(root)}}
    kwargs = {"num_clients": 4, "partition": "dirichlet", "batch_size": 8, "participation": 0.5, **data}
    return FederatedDataModule(dataset=record, root=str(root.parent / "cache"), **kwargs)


def test_an_image_folder_is_read_pixel_for_pixel_and_cached(tmp_path, monkeypatch):
    arrays = _images(tmp_path / "images")
    dm = _image_folder(tmp_path / "images", test_fraction=0.25)
    splits = dm.splits
    assert splits.train_x.dtype == torch.uint8 and tuple(splits.train_x.shape[1:]) == (3, 6, 6)
    assert (len(splits.train_y), len(splits.test_y), splits.num_classes) == (27, 9, 3)
    assert torch.bincount(splits.test_y).tolist() == [3, 3, 3]  # stratified
    # the tensors are the images: every train row is one of the files, channels first
    files = {tuple(torch.from_numpy(a).permute(2, 0, 1).flatten().tolist()) for a in arrays.values()}
    assert all(tuple(row.flatten().tolist()) in files for row in splits.train_x)
    scaled = splits.train_x.double() / 255
    assert splits.mean == pytest.approx(scaled.mean(dim=(0, 2, 3)).tolist(), rel=1e-9)
    assert splits.std == pytest.approx(scaled.std(dim=(0, 2, 3), correction=0).tolist(), rel=1e-9)
    assert dm.dataset == "imagefolder" and dm.hparams["dataset"]["class_path"] == "torchvision.datasets.ImageFolder"
    assert dm.label_counts.sum() == 27 and dm.client_stats.num_clients == 4
    # a second run reads the cache: no image is opened
    cached = list((tmp_path / "cache" / ".lightning_sfl_cache").glob("*.pt"))
    assert len(cached) == 1

    def no_open(*args, **kwargs):
        raise AssertionError("an image was decoded again")

    monkeypatch.setattr(Image, "open", no_open)
    again = _image_folder(tmp_path / "images", test_fraction=0.25).splits
    assert torch.equal(again.train_x, splits.train_x) and torch.equal(again.test_y, splits.test_y)
    monkeypatch.undo()
    # a folder that changed is read anew
    Image.fromarray(np.zeros((6, 6, 3), dtype=np.uint8)).save(tmp_path / "images" / "c0" / "new.png")
    changed = _image_folder(tmp_path / "images", test_fraction=0.25).splits
    assert len(changed.train_y) + len(changed.test_y) == 37


def test_a_test_dataset_of_its_own_and_the_label_options(tmp_path):
    _images(tmp_path / "train", per_class=10)
    _images(tmp_path / "test", per_class=4, seed=1)
    test = {"class_path": "torchvision.datasets.ImageFolder", "init_args": {"root": str(tmp_path / "test")}}
    dm = _image_folder(tmp_path / "train", test_dataset=test, labelled_per_class=2, binary_class=1)
    splits = dm.splits
    assert (len(splits.train_y), len(splits.test_y), splits.num_classes) == (30, 12, 2)
    assert splits.train_y.sum() == 10 and len(dm.labelled_indices) == 4  # class 1 against the rest; 2 per class
    for partition in ("iid", "quantity", "shards", "dirichlet"):
        assert _image_folder(tmp_path / "train", partition=partition).client_sizes.sum() == 24


def test_a_tensor_dataset_from_python():
    torch.manual_seed(0)
    x, y = torch.randn(60, 2, 5, 5), torch.arange(60) % 3
    dm = FederatedDataModule(dataset=TensorDataset(x, y), num_clients=3, partition="iid", batch_size=6)
    splits = dm.splits
    assert splits.train_x.dtype == torch.float32 and len(splits.test_y) == 12 and splits.num_classes == 3
    rows = {tuple(r.tolist()) for r in x.flatten(1)}
    assert all(tuple(r.tolist()) in rows for r in splits.train_x.flatten(1))
    assert dm.hparams["dataset"] == {"class_path": "torch.utils.data.dataset.TensorDataset", "init_args": None,
                                     "instance": True}  # fmt: skip
    assert dm.input_shape == (2, 5, 5) and dm.dataset == "tensordataset"
    flat = FederatedDataModule(dataset=TensorDataset(torch.randn(20, 7), torch.arange(20) % 2), num_clients=2,
                               batch_size=4)  # fmt: skip
    assert flat.input_shape == (7, 1, 1)


class _Pairs(torch.utils.data.Dataset):
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


@pytest.mark.parametrize(
    "dataset,kwargs,message",
    [
        ("imagenet", {}, r"^dataset='imagenet' is not one of: digits, .*, nor a class path$"),
        ("digits", {"test_fraction": 1.5}, r"^test_fraction=1.5 must be in \(0, 1\)$"),
        ("cifar10", {"test_fraction": 0.3}, r"^test_fraction=0.3 changes nothing for dataset='cifar10'"),
        ("digits", {"test_dataset": "x.Y"}, r"^test_dataset goes with a dataset given as a class path"),
        (_Pairs([(torch.zeros(2, 2), 0)] * 4), {"download": True}, r"^download=true is for the built-in datasets"),
        (_Pairs([(torch.zeros(2, 2), 0)] * 4), {"image_size": 8}, r"^image_size=8 is for cinic10 and imagenette"),
    ],
)
def test_options_that_change_nothing_or_are_wrong_are_one_line(dataset, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        FederatedDataModule(dataset=dataset, num_clients=2, batch_size=4, **kwargs)


@pytest.mark.parametrize(
    "items,message",
    [
        ([(torch.zeros(2, 2), 0), (torch.zeros(3, 3), 1)], r"sample 1 has shape \[1, 3, 3\], sample 0 \[1, 2, 2\]"),
        ([(torch.zeros(2, 2), 0), (torch.zeros(2, 2), 0.5)], r"sample 1's label is 0.5; labels must be whole numbers"),
        ([(torch.zeros(2, 2), 0), torch.zeros(2, 2)], r"sample 1 is not an \(x, y\) pair"),
        ([("text", 0)], r"sample 0 is a str, not an image, array or tensor \(give a transform\)"),
    ],
)
def test_samples_that_cannot_be_held_are_one_line(items, message):
    with pytest.raises(ConfigError, match=message):
        FederatedDataModule(dataset=_Pairs(items), num_clients=1, batch_size=1).splits  # noqa: B018


def test_a_dataset_too_big_for_memory_is_refused_with_the_estimate(monkeypatch):
    monkeypatch.setattr(data_source, "MEMORY_FRACTION", 1e-12)
    with pytest.raises(ConfigError, match=r"would take 0.0 GiB in memory \(4 samples of shape \[1, 2, 2\], "):
        FederatedDataModule(dataset=_Pairs([(torch.zeros(2, 2), 0)] * 4), num_clients=1, batch_size=1).splits  # noqa: B018


def test_a_record_read_from_a_file_imports_nothing(tmp_path, monkeypatch):
    (tmp_path / "planted_data.py").write_text("import pathlib\npathlib.Path('ran').write_text('x')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    dm = FederatedDataModule(dataset={"class_path": "planted_data.Set"}, num_clients=1, batch_size=1)
    with pytest.raises(ConfigError, match=r"dataset names 'planted_data.Set', which is not a built-in dataset nor"):
        dm.splits  # noqa: B018
    assert "planted_data" not in sys.modules and not (tmp_path / "ran").exists()
