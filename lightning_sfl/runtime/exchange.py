"""The clients' uploaded models, averaged into the global ones (eq. 10), dense or through the ``model`` crossing's
compressor (:mod:`lightning_sfl.compression`): each client's update ``Δ_k = w_k − w`` from the round's global model
is encoded and the server averages what it decodes, ``w ← w + Σ_k p_k·decode(encode(Δ_k))`` (the same average as
eq. 10 when the decoded updates are exact). With error feedback each client adds to its update what its earlier
encodings left out and keeps the rest, ``e_k ← Δ_k + e_k − decode(encode(Δ_k + e_k))`` (a per-client store,
``exchange_residuals``: a row for each client that uploaded). Buffers (BatchNorm statistics) are sent dense and
averaged as before; the ledger counts the encoded parameters and the dense buffers."""

from __future__ import annotations

import torch
from torch import nn

from lightning_sfl.errors import ConfigError
from lightning_sfl.runtime.aggregate import flat_parameters, load_flat_parameters, normalized_weights
from lightning_sfl.runtime.client_bank import Slots, slot_list
from lightning_sfl.system.comm import module_bytes

__all__ = ["declare_residuals", "upload_models"]

#: The per-client store of the model exchange's error feedback.
RESIDUALS = "exchange_residuals"


def _layout(method) -> dict[str, tuple[int, int]]:
    """Bank name -> ``(offset, parameters)`` of its span in a client's residual row (the shared models in order)."""
    out, offset = {}, 0
    for name, module in method.shape.shared_models(method.client_models()).items():
        count = sum(p.numel() for p in module.parameters())
        out[name], offset = (offset, count), offset + count
    return out


def declare_residuals(method) -> None:
    """Declare ``method``'s per-client store of error-feedback residuals, ``[K, P]`` (``P``: the parameters of the
    models its clients upload), zero until a client uploads; made when a fit starts."""

    def zeros() -> torch.Tensor:
        models = method.shape.shared_models(method.client_models()).values()
        dtype = next(p.dtype for m in models for p in m.parameters())
        return torch.zeros(sum(count for _, count in _layout(method).values()), dtype=dtype)

    method.add_client_state(RESIDUALS, zeros)


def upload_models(
    method, weights: torch.Tensor, slots: Slots, models: dict[str, nn.Module], clients=None, seed: int = 0
) -> None:
    """Eq. (10) for the client banks: each of ``models`` (bank name -> global module) ← the ``weights``-weighted
    average of its bank's ``slots``, the updates through the ``model`` crossing's compressor if there is one (see the
    module docstring; ``clients``: the slots' clients ``[S]``, for error feedback; ``seed``: the draws'); bytes
    counted up."""
    compressor = method.compression["model"] if "model" in method.compression else None
    kind = method.shape.traffic_kind
    for name, module in models.items():
        bank = method.client_banks[name]
        parameters = sum(p.numel() for p in module.parameters())
        if compressor is None or compressor.identity(parameters):
            bank.aggregate_into(module, weights, slots)
            method.ledger.add("up", kind, module_bytes(module), slots)
            continue
        sent = _compressed_average(method, name, bank, module, weights, slots, clients, seed)
        method.ledger.add("up", kind, sent, slots, dense=module_bytes(module))


@torch.no_grad()
def _compressed_average(method, name, bank, module, weights, slots, clients, seed) -> int:
    """The average of the decoded updates into ``module``; returns the bytes each client sends."""
    start = flat_parameters(module).detach().clone()
    thetas = torch.stack([flat_parameters(bank.slots[k]).detach() for k in slot_list(slots, len(bank))])
    updates = thetas - start  # [S, P]
    feedback = method.compression["model"].error_feedback
    if feedback:
        layout = _layout(method)
        if name not in layout or layout[name][1] != start.numel() or clients is None:
            raise ConfigError(f"compression: error feedback of the model exchange keeps no residual of {name!r}")
        offset, count = layout[name]
        store = getattr(method, RESIDUALS)
        rows = store[clients].to(updates.device).clone()  # [S, P_all]
        updates = updates + rows[:, offset : offset + count].to(updates.dtype)
    decoded, per_row = method.compression.compress("model", updates, seed)
    if feedback:
        rows[:, offset : offset + count] = (updates - decoded).to(rows.dtype)
        store[clients] = rows
    bank.aggregate_into(module, weights, slots)  # the buffers (the parameters are set below)
    p = normalized_weights(weights).to(start.device)
    load_flat_parameters(module, (start.double() + (p[:, None] * decoded.double()).sum(dim=0)).to(start.dtype))
    return int(per_row) + module_bytes(module) - start.numel() * start.element_size()
