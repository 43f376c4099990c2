"""Comparing ledger snapshots by their arrays of free capacity and residual bandwidth."""

import numpy as np

from cnbrain.ledger.snapshot import Snapshot

FIELDS = (
    "free_cpu_m",
    "free_mem_mib",
    "free_storage_gib",
    "free_acc",
    "free_acc_by_model",
    "residual_mbps",
)
"""The arrays of a `Snapshot` that say what is free."""


def copy_of(snap: Snapshot) -> dict[str, np.ndarray]:
    """A writable copy of each of the snapshot's `FIELDS`."""
    return {f: np.array(getattr(snap, f), copy=True) for f in FIELDS}


def assert_snapshot_equals(snap: Snapshot, expected: dict[str, np.ndarray]) -> None:
    """Every one of `snap`'s `FIELDS` equals `expected`'s (as `copy_of` gives them)."""
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(snap, f), expected[f], err_msg=f)
