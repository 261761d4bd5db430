"""The round's byte ledger: rows recorded every step are summed when read, and agree with a count by hand."""

from __future__ import annotations

import pytest
import torch

from lightning_sfl.system.comm import CommLedger


def _by_hand(num_slots: int, records: list[tuple[int, list[int], list[int] | None]]) -> list[int]:
    """Bytes per slot: each record is ``(bytes of a row, rows of each block, slot of each block or None)``."""
    out = [0] * num_slots
    for row_bytes, sizes, slots in records:
        for k, b in enumerate(sizes):
            out[k if slots is None else slots[k]] += row_bytes * b
    return out


def test_rows_recorded_over_steps_sum_when_read():
    ledger = CommLedger()
    ledger.start(num_slots=4)
    acts, labels = torch.zeros(6, 3, 2), torch.zeros(6, dtype=torch.long)  # 24 and 8 bytes a row
    steps = [([1, 2, 3], torch.tensor([2, 0, 3])), ([3, 3], None), ([0, 6], [1, 3])]
    for sizes, slots in steps:
        ledger.add_rows("up", "activations", acts, torch.tensor(sizes), slots)
        ledger.add_rows("up", "labels", labels, torch.tensor(sizes), slots)
    ledger.add("down", "client_half", 100)
    plain = [(sizes, None if slots is None else list(torch.as_tensor(slots).tolist())) for sizes, slots in steps]
    expected_acts = _by_hand(4, [(24, s, k) for s, k in plain])
    expected_up = _by_hand(4, [(24 + 8, s, k) for s, k in plain])
    assert ledger.bytes[("up", "activations")].tolist() == expected_acts
    assert ledger.per_client("up").tolist() == expected_up
    assert ledger.per_client("up").tolist() == expected_up  # a second read counts nothing twice
    ledger.add_rows("down", "gradients", acts, torch.tensor([1, 1]), [0, 2])  # recorded after a read
    totals = ledger.totals()
    assert totals["down/gradients"] == 48 and totals["up"] == sum(expected_up)
    assert totals["total"] == totals["up"] + 4 * 100 + 48
    ledger.start(num_slots=2)  # a new round forgets what was not read yet
    ledger.add_rows("up", "labels", labels, torch.tensor([1, 1]))
    assert ledger.totals() == {"up/labels": 16, "down": 0, "up": 16, "total": 16}


def test_unknown_traffic_is_refused_when_recorded():
    ledger = CommLedger()
    ledger.start(num_slots=1)
    with pytest.raises(ValueError, match="unknown traffic up/weights"):
        ledger.add_rows("up", "weights", torch.zeros(1, 2), torch.tensor([1]))
