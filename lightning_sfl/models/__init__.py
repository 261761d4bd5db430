"""Splittable models for split federated learning: a zoo of ``nn.Sequential`` networks with named cut points."""

from lightning_sfl.models.split import activation_shape, add_bottleneck, split_model
from lightning_sfl.models.zoo import MODELS, SplittableModel, build_model

__all__ = ["MODELS", "SplittableModel", "activation_shape", "add_bottleneck", "build_model", "split_model"]
