"""The fair shares' use case below the HTTP edge, on a SQLite file: it refuses callers that
are not staff, and tenants the caller may not act for, itself, not only the edge."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from cnbrain.domain.errors import Forbidden, Invalid, NotFound
from cnbrain.regional.security import Principal, Role
from cnbrain.regional.use_cases.fair_shares import FairShareBody, ManageFairShares
from cnbrain.storage import audit, fair_shares, tenants
from cnbrain.storage.database import create_engine, session_factory, upgrade_schema
from tests.databases import Sessions

pytestmark = pytest.mark.asyncio

ADMIN = Principal(user_id="root", role=Role.ADMIN, tenant_id=None)
BODY = FairShareBody.model_validate(
    {"weight": 2, "cohort": "lab", "nominal": {"accelerators": {"A100": 4}}}
)


@pytest_asyncio.fixture
async def sessions(tmp_path: Path) -> AsyncIterator[Sessions]:
    """A migrated SQLite file with tenants acme and other."""
    url = f"sqlite:///{tmp_path / 'shares.db'}"
    await upgrade_schema(url)
    engine = create_engine(url)
    factory = session_factory(engine)
    async with factory.begin() as session:
        for tenant_id in ("acme", "other"):
            await tenants.create_tenant(session, tenant_id=tenant_id, name=tenant_id)
    try:
        yield factory
    finally:
        await engine.dispose()


@pytest.fixture
def shares(sessions: Sessions) -> ManageFairShares:
    return ManageFairShares(sessions)


@pytest.mark.parametrize("role", [Role.TENANT_USER, Role.TENANT_ADMIN])
async def test_tenant_roles_read_their_own_but_change_nothing(
    shares: ManageFairShares, sessions: Sessions, role: Role
) -> None:
    await shares.put_share(ADMIN, "acme", BODY)
    own = Principal(user_id="u", role=role, tenant_id="acme")
    with pytest.raises(Forbidden):
        await shares.put_share(own, "acme", FairShareBody(weight=9))
    with pytest.raises(Forbidden):
        await shares.delete_share(own, "acme")
    assert (await shares.get_share(own, "acme")).weight == 2.0
    with pytest.raises(NotFound):
        await shares.get_share(own, "other")
    async with sessions() as session:
        assert (await fair_shares.admission_terms(session)).weights == {"acme": 2.0}


async def test_a_put_is_audited_with_its_body_and_a_refused_one_is_not(
    shares: ManageFairShares, sessions: Sessions
) -> None:
    view, created = await shares.put_share(ADMIN, "acme", BODY)
    assert created and view.nominal.accelerators == {"A100": 4}
    with pytest.raises(Invalid) as raised:
        await shares.put_share(ADMIN, "acme", FairShareBody(cohort="no spaces please"))
    assert raised.value.field == "cohort"
    with pytest.raises(NotFound):
        await shares.put_share(ADMIN, "nobody", BODY)
    with pytest.raises(NotFound):
        await shares.delete_share(ADMIN, "other")
    async with sessions() as session:
        entries, _ = await audit.list_entries(session, object_type="fair_share")
    assert [(e.actor, e.tenant_id, e.action, e.object_id, e.detail) for e in entries] == [
        ("root", "acme", "fair_share.created", "acme", BODY.model_dump())
    ]
