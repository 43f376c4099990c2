"""The priority classes' use case below the HTTP edge, on a SQLite file: it refuses callers
that are not staff and names that are not class names itself, not only the edge."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from cnbrain.domain.errors import Forbidden, Invalid, NotFound
from cnbrain.regional.security import Principal, Role
from cnbrain.regional.use_cases.priority_classes import ManagePriorityClasses, PriorityClassBody
from cnbrain.storage import audit, priority_classes
from cnbrain.storage.database import create_engine, session_factory, upgrade_schema
from tests.databases import Sessions

pytestmark = pytest.mark.asyncio

ADMIN = Principal(user_id="root", role=Role.ADMIN, tenant_id=None)
BODY = PriorityClassBody(value=42, preemptible=True, default_max_wait_s=60)


@pytest_asyncio.fixture
async def sessions(tmp_path: Path) -> AsyncIterator[Sessions]:
    """A migrated SQLite file with the built-in classes."""
    url = f"sqlite:///{tmp_path / 'classes.db'}"
    await upgrade_schema(url)
    engine = create_engine(url)
    factory = session_factory(engine)
    async with factory.begin() as session:
        await priority_classes.seed_if_empty(session)
    try:
        yield factory
    finally:
        await engine.dispose()


@pytest.fixture
def classes(sessions: Sessions) -> ManagePriorityClasses:
    return ManagePriorityClasses(sessions)


@pytest.mark.parametrize("role", [Role.TENANT_USER, Role.TENANT_ADMIN])
async def test_tenant_roles_may_read_but_not_change(
    classes: ManagePriorityClasses, role: Role
) -> None:
    tenant = Principal(user_id="u", role=role, tenant_id="acme")
    with pytest.raises(Forbidden):
        await classes.put_class(tenant, "mine", BODY)
    with pytest.raises(Forbidden):
        await classes.delete_class(tenant, "low")
    assert [one.name for one in await classes.list_classes()] == ["high", "normal", "low"]
    assert (await classes.get_class("normal")).default


@pytest.mark.parametrize("name", ["", " lead", "a/b", "é", "x" * 64, "trailing\n"])
async def test_a_name_that_is_no_class_name_is_invalid(
    classes: ManagePriorityClasses, name: str
) -> None:
    with pytest.raises(Invalid) as raised:
        await classes.put_class(ADMIN, name, BODY)
    assert raised.value.field == "name"
    with pytest.raises(NotFound):
        await classes.get_class(name)


async def test_a_put_is_audited_with_its_body(
    classes: ManagePriorityClasses, sessions: Sessions
) -> None:
    view, created = await classes.put_class(ADMIN, "x" * 63, BODY)
    assert created and view.name == "x" * 63 and view.default_max_wait_s == 60.0
    async with sessions() as session:
        entries, _ = await audit.list_entries(session, object_type="priority_class")
    assert [(e.actor, e.action, e.object_id, e.detail) for e in entries] == [
        ("root", "priority_class.created", "x" * 63, BODY.model_dump())
    ]
