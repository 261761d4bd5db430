"""Datasets, label-skewed partitions and the federated data module."""

from lightning_sfl.data.datamodule import FederatedDataModule
from lightning_sfl.data.datasets import DATASETS, DatasetSplits, load_dataset
from lightning_sfl.data.partition import PARTITIONS, partition

__all__ = ["DATASETS", "PARTITIONS", "DatasetSplits", "FederatedDataModule", "load_dataset", "partition"]
