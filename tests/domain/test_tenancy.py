"""The federation's tenancy changes: a quota set's level and regions."""

import pytest

from cnbrain.domain.tenancy import QuotaSet


def test_a_national_quota_names_no_region() -> None:
    with pytest.raises(ValueError, match="names no region"):
        QuotaSet(tenant_id="acme", level="national", region="west")
    assert QuotaSet(tenant_id="acme").applies_to("west")
    assert not QuotaSet(tenant_id="acme", region="east").applies_to("west")
    assert not QuotaSet(tenant_id="acme", level="national").applies_to(None)
