"""Resource vectors and the dominant share."""

import pytest

from cnbrain.domain.errors import Invalid
from cnbrain.ledger.claim import Claim
from cnbrain.scheduling.resources import Resources, accelerator_dimension, dominant_share
from tests.ledger.windows import HOUR


def test_a_vector_drops_zero_amounts_and_reads_zero_elsewhere() -> None:
    vector = Resources.of(cpu_m=2000, mem_mib=0, accelerators={"A100": 2}, active_requests=1)
    assert dict(vector.amounts) == {
        "accelerator:A100": 2,
        "active_requests": 1,
        "cpu_m": 2000,
    }
    assert vector["mem_mib"] == 0
    assert vector == Resources({"cpu_m": 2000, "accelerator:A100": 2, "active_requests": 1})
    assert hash(vector) == hash(Resources(dict(vector.amounts)))
    assert list(vector) == sorted(vector.amounts)


def test_add_sub_and_fits() -> None:
    a = Resources.of(cpu_m=1000, mem_mib=512)
    b = Resources.of(cpu_m=500, storage_gib=10)
    assert a + b == Resources.of(cpu_m=1500, mem_mib=512, storage_gib=10)
    assert a - b == Resources({"cpu_m": 500, "mem_mib": 512, "storage_gib": -10})
    assert (a - b).positive_part() == Resources.of(cpu_m=500, mem_mib=512)
    assert (a - a).is_zero()
    assert not (a - b).is_nonnegative()
    assert a.fits(a + b)
    assert not (a + b).fits(a)
    assert Resources().fits(Resources())
    assert not Resources.of(accelerators={"H100": 1}).fits(a)


def test_a_vector_is_immutable() -> None:
    vector = Resources.of(cpu_m=1)
    with pytest.raises(AttributeError):
        vector.amounts = {}  # type: ignore[misc]
    with pytest.raises(TypeError):
        vector.amounts["cpu_m"] = 2  # type: ignore[index]


@pytest.mark.parametrize(
    ("amounts", "field"),
    [({"cpu_m": 1.5}, "resources.cpu_m"), ({"cpu_m": True}, "resources.cpu_m"), ({"": 1}, None)],
)
def test_a_bad_vector_is_invalid(amounts: dict[str, object], field: str | None) -> None:
    with pytest.raises(Invalid) as raised:
        Resources(amounts)  # type: ignore[arg-type]
    assert raised.value.field == (field or "resources")


def test_the_vector_of_a_claim_counts_its_compute() -> None:
    claim = Claim(
        reservation_id="r",
        request_id="q",
        tenant_id="t",
        site_id="s",
        cpu_m=4000,
        mem_mib=8192,
        storage_gib=100,
        accelerator_model="A100",
        accelerator_milli=2000,
        link_ids=("l",),
        mbps=1000,
        window=HOUR,
    )
    assert Resources.of_claim(claim) == Resources(
        {"cpu_m": 4000, "mem_mib": 8192, "storage_gib": 100, accelerator_dimension("A100"): 2000}
    )


def test_the_dominant_share_is_the_largest_fraction_ignoring_zero_capacity() -> None:
    capacity = Resources.of(cpu_m=10_000, mem_mib=1000)
    usage = Resources.of(cpu_m=2000, mem_mib=500, accelerators={"A100": 8})
    assert dominant_share(usage, capacity) == 0.5
    assert dominant_share(Resources.of(accelerators={"A100": 8}), capacity) == 0.0
    assert dominant_share(Resources(), capacity) == 0.0
