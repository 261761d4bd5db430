"""Wireless uplink and client compute model of the SCALA journal version (§5.1) and GAS (Implementation Details).

One cell of radius ``R = 1000`` m with the server at its centre and the ``K`` clients placed uniformly at random
in the disc. Every function is pure, works in SI units (metres, hertz, watts, bit/s, FLOP/s) and returns
``float64`` tensors:

* **placement** — distance of client ``k`` to the server ``r_k = R·sqrt(U_k)``, ``U_k ~ U[0, 1)`` (uniform in the
  disc's *area*: ``P(r <= ρ) = (ρ/R)²``); only the distance matters, so no angle is drawn;
* **path loss** (3GPP TR 36.814 macro cell, "Abeta 2010" in GAS) ``PL(r) = 128.1 + 37.6·log10(r / 1 km)`` dB and
  channel power gain ``g_k = 10^(−PL(r_k)/10)`` (no shadowing, no fast fading);
* **rate** (Shannon, orthogonal uplink channels) ``rate_k = W_k·log2(1 + p·g_k / (N0·W_k))`` bit/s with
  ``p = 0.2`` W transmit power and noise PSD ``N0 = −174`` dBm/Hz ``= 10^((−174 − 30)/10) ≈ 3.981e−21`` W/Hz;
* **bandwidth** — the papers give a *total* uplink bandwidth of ``W = 10`` MHz over orthogonal channels; we share it
  equally among the clients transmitting in a round, ``W_k = W / S`` (:func:`bandwidth_per_client`). The GAS
  public code instead gives *every* client ``W = 10`` MHz (with ``N = 3.981e−21`` W/Hz, the same noise as here);
  pass ``bandwidth_hz_per_client=10e6`` directly (or a total of ``S × 10`` MHz) to reproduce that;
* **compute** — client ``k`` trains at ``f_k ~ U[1e9, 5e9]`` FLOP/s (SCALA; GAS uses ``U[1e9, 1e10]``).

Distances are clamped to :data:`MIN_DISTANCE_M` (1 m) before the logarithm: ``r = 0`` has probability zero but
``log10(0) = −inf`` would give an infinite gain and rate. The clamp only keeps the numbers finite — the formula
itself is calibrated for macro-cell distances (3GPP uses ``r >= 35`` m), which ``R·sqrt(U)`` gives except with
probability ``(35/1000)² ≈ 0.1 %``; like the papers, no exclusion zone is applied.

>>> round(float(path_loss_db(1.0)), 6)  # dB at 1 km
128.1
>>> math.isclose(float(channel_gain(1000.0)), 10**-12.81, rel_tol=1e-12)
True
>>> round(float(noise_psd_w_per_hz(-174.0)) * 1e21, 3)  # W/Hz
3.981
>>> rate = uplink_rates(torch.tensor([500.0]), bandwidth_hz_per_client=1e6)  # 1 MHz at 500 m
>>> round(float(rate[0]) / 1e6, 3)  # Mbit/s
6.734
>>> g = torch.Generator().manual_seed(0)
>>> bool((place_clients(1000, generator=g) <= 1000).all())
True
>>> caps = compute_capacities(1000, generator=g)
>>> bool(((caps >= 1e9) & (caps <= 5e9)).all())
True
"""

from __future__ import annotations

import math

import torch

#: Distances below this (metres) are clamped before ``log10`` (``log10(0) = −inf``).
MIN_DISTANCE_M: float = 1.0


def _f64(x: float | torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(x, dtype=torch.float64)


def place_clients(num_clients: int, radius_m: float = 1000.0, generator: torch.Generator | None = None) -> torch.Tensor:
    """Distances to the server (at the cell centre) of ``num_clients`` clients placed uniformly in a disc of
    radius ``radius_m``: ``r = R·sqrt(U)``, ``U ~ U[0, 1)``. Returns ``[K]`` float64 metres in ``[0, R)``."""
    if num_clients < 0:
        raise ValueError(f"num_clients={num_clients} must be >= 0")
    if not radius_m > 0:
        raise ValueError(f"radius_m={radius_m} must be > 0")
    u = torch.rand(num_clients, generator=generator, dtype=torch.float64)
    return radius_m * u.sqrt()


def path_loss_db(distance_km: float | torch.Tensor) -> torch.Tensor:
    """``128.1 + 37.6·log10(r)`` dB, ``r`` in **kilometres**, clamped below at ``MIN_DISTANCE_M`` (1 m)."""
    r = _f64(distance_km).clamp_min(MIN_DISTANCE_M / 1000.0)
    return 128.1 + 37.6 * torch.log10(r)


def channel_gain(distance_m: float | torch.Tensor) -> torch.Tensor:
    """Linear channel power gain ``10^(−PL/10)`` of a client ``distance_m`` **metres** from the server."""
    return torch.pow(10.0, -path_loss_db(_f64(distance_m) / 1000.0) / 10.0)


def noise_psd_w_per_hz(noise_dbm_per_hz: float = -174.0) -> float:
    """Noise power spectral density in W/Hz from dBm/Hz: ``10^((dBm − 30)/10)`` (−174 dBm/Hz ≈ 3.981e−21)."""
    return 10.0 ** ((noise_dbm_per_hz - 30.0) / 10.0)


def bandwidth_per_client(total_bandwidth_hz: float, num_transmitting: int) -> float:
    """``W / S``: the total uplink bandwidth shared equally (orthogonally) by ``S`` transmitting clients."""
    if num_transmitting < 1:
        raise ValueError(f"num_transmitting={num_transmitting} must be >= 1")
    return total_bandwidth_hz / num_transmitting


def uplink_rates(
    distances_m: torch.Tensor,
    bandwidth_hz_per_client: float | torch.Tensor,
    tx_power_w: float = 0.2,
    noise_dbm_per_hz: float = -174.0,
) -> torch.Tensor:
    """Shannon rates ``W_k·log2(1 + p·g_k / (N0·W_k))`` in bit/s of clients at ``distances_m`` (metres), each on
    its own orthogonal channel of ``bandwidth_hz_per_client`` Hz (a scalar or ``[K]``). Returns ``[K]`` float64."""
    w = _f64(bandwidth_hz_per_client)
    if not bool((w > 0).all()):
        raise ValueError("bandwidth_hz_per_client must be > 0")
    if not tx_power_w > 0:
        raise ValueError(f"tx_power_w={tx_power_w} must be > 0")
    snr = tx_power_w * channel_gain(distances_m) / (noise_psd_w_per_hz(noise_dbm_per_hz) * w)
    return w * torch.log2(1.0 + snr)


def compute_capacities(
    num_clients: int, low: float = 1e9, high: float = 5e9, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Training speed of each client in FLOP/s, uniform in ``[low, high]``. Returns ``[K]`` float64."""
    if num_clients < 0:
        raise ValueError(f"num_clients={num_clients} must be >= 0")
    if not 0 < low <= high or not math.isfinite(high):
        raise ValueError(f"need 0 < low <= high < inf, got low={low}, high={high}")
    u = torch.rand(num_clients, generator=generator, dtype=torch.float64)
    return low + (high - low) * u
