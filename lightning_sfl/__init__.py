"""lightning_sfl: Split Federated Learning under label skew, on PyTorch Lightning."""

__version__ = "0.1.0"
