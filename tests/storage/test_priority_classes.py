"""The priority classes in the database: the built-in set seeded once, put and delete keeping
the set's rules (unique values, one default, no class deleted that open requests name)."""

import pytest

from cnbrain.domain.errors import Conflict
from cnbrain.domain.request import PlacementRequest, ResourceDemand
from cnbrain.domain.states import RequestState
from cnbrain.scheduling.classes import PriorityClass, PriorityClasses
from cnbrain.storage import priority_classes, requests, tenants
from cnbrain.storage.errors import NotFoundError
from cnbrain.storage.priority_classes import BUILT_IN, ClassConflict
from tests.databases import Sessions

pytestmark = pytest.mark.asyncio

HOUR = 3600.0


def _class(name: str, value: int, *, preemptible: bool = True, wait: float = HOUR) -> PriorityClass:
    return PriorityClass(name=name, value=value, preemptible=preemptible, default_max_wait_s=wait)


async def _names_and_default(sessions: Sessions) -> tuple[list[str], str]:
    async with sessions() as session:
        classes = await priority_classes.list_classes(session)
    assert classes is not None
    return [one.name for one in classes], classes.default.name


async def test_an_empty_table_has_no_set_and_the_built_ins_are_seeded_once(
    sessions: Sessions,
) -> None:
    async with sessions() as session:
        assert await priority_classes.list_classes(session) is None
    async with sessions.begin() as session:
        assert await priority_classes.seed_if_empty(session)
    async with sessions.begin() as session:
        assert not await priority_classes.seed_if_empty(session)
    async with sessions() as session:
        classes = await priority_classes.list_classes(session)
        high = await priority_classes.get_class(session, name="high")
        assert await priority_classes.get_class(session, name="urgent") is None
    assert classes is not None
    assert list(classes) == list(BUILT_IN)
    assert [one.name for one in classes] == ["high", "normal", "low"]
    assert classes.default.name == "normal"
    assert high == PriorityClass(name="high", value=900, preemptible=False, default_max_wait_s=HOUR)


async def test_put_creates_replaces_and_moves_the_default(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        await priority_classes.seed_if_empty(session)
    async with sessions.begin() as session:
        assert await priority_classes.put_class(session, _class("urgent", 990), default=False)
    async with sessions.begin() as session:
        replaced = _class("urgent", 950, preemptible=False, wait=60)
        assert not await priority_classes.put_class(session, replaced, default=True)
    assert await _names_and_default(sessions) == (["urgent", "high", "normal", "low"], "urgent")
    async with sessions() as session:
        assert await priority_classes.get_class(session, name="urgent") == replaced
    async with sessions.begin() as session:  # the default stays the default when put so
        await priority_classes.put_class(session, _class("urgent", 951), default=True)
    assert (await _names_and_default(sessions))[1] == "urgent"


async def test_put_refuses_a_taken_value_and_a_set_without_default(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        with pytest.raises(ClassConflict, match="first class"):
            await priority_classes.put_class(session, _class("first", 1), default=False)
    async with sessions.begin() as session:
        await priority_classes.seed_if_empty(session)
    async with sessions.begin() as session:
        with pytest.raises(ClassConflict, match="value: 900 is already the value of class 'high'"):
            await priority_classes.put_class(session, _class("urgent", 900), default=False)
    async with sessions.begin() as session:
        with pytest.raises(Conflict, match="'normal' is the default"):
            await priority_classes.put_class(session, _class("normal", 500), default=False)
    async with sessions.begin() as session:  # a class may keep its own value
        await priority_classes.put_class(session, _class("high", 900, wait=7200), default=False)
    assert await _names_and_default(sessions) == (["high", "normal", "low"], "normal")


async def test_delete_refuses_the_default_and_classes_that_open_requests_name(
    sessions: Sessions,
) -> None:
    async with sessions.begin() as session:
        await priority_classes.seed_if_empty(session)
        await tenants.create_tenant(session, tenant_id="acme", name="Acme")
        user = await tenants.create_user(session, name="ana", role="tenant-user", tenant_id="acme")
        await requests.insert_requests(
            session,
            [
                requests.NewRequest(
                    request_id=f"req-{name}",
                    tenant_id="acme",
                    user_id=user.id,
                    body=requests.JsonText(_request(f"req-{name}", name).model_dump_json()),
                )
                for name in ("low", "high")
            ],
        )
    async with sessions.begin() as session:
        with pytest.raises(NotFoundError, match="'urgent'"):
            await priority_classes.delete_class(session, name="urgent")
    async with sessions.begin() as session:
        with pytest.raises(ClassConflict, match="'normal' is the default"):
            await priority_classes.delete_class(session, name="normal")
    async with sessions.begin() as session:
        assert await priority_classes.requests_naming(session, name="low") == 1
        with pytest.raises(ClassConflict, match="named by 1 request"):
            await priority_classes.delete_class(session, name="low")
    async with sessions.begin() as session:
        await requests.set_states(
            session, [requests.StateChange("req-low", RequestState.REJECTED, reason="no room")]
        )
    async with sessions.begin() as session:
        assert await priority_classes.requests_naming(session, name="low") == 0
        await priority_classes.delete_class(session, name="low")
    assert await _names_and_default(sessions) == (["high", "normal"], "normal")


def _request(request_id: str, priority_class: str) -> PlacementRequest:
    return PlacementRequest(
        id=request_id,
        tenant="acme",
        source_province="ZJ",
        resources=ResourceDemand(cpu=1, memory_gib=1),
        duration_hours=1,
        priority_class=priority_class,
    )


async def test_replace_makes_the_stored_set_the_one_given_even_when_values_move(
    sessions: Sessions,
) -> None:
    async with sessions.begin() as session:
        await priority_classes.seed_if_empty(session)
    federation = PriorityClasses(
        [_class("urgent", 900, preemptible=False), _class("high", 500), _class("normal", 100)],
        default="high",
    )
    async with sessions.begin() as session:
        assert await priority_classes.replace_classes(session, federation)
    async with sessions() as session:
        stored = await priority_classes.list_classes(session)
    assert stored is not None
    assert list(stored) == list(federation)
    assert stored.default.name == "high"
    assert stored.digest() == federation.digest()
    async with sessions.begin() as session:
        assert not await priority_classes.replace_classes(session, federation)


async def test_refuse_if_named_refuses_only_a_class_that_open_requests_name(
    sessions: Sessions,
) -> None:
    async with sessions.begin() as session:
        await priority_classes.seed_if_empty(session)
        await tenants.create_tenant(session, tenant_id="acme", name="Acme")
        user = await tenants.create_user(session, name="ana", role="tenant-user", tenant_id="acme")
        await requests.insert_requests(
            session,
            [
                requests.NewRequest(
                    request_id="req-high",
                    tenant_id="acme",
                    user_id=user.id,
                    body=requests.JsonText(_request("req-high", "high").model_dump_json()),
                )
            ],
        )
    async with sessions() as session:
        with pytest.raises(ClassConflict, match="'high' is named by 1 request"):
            await priority_classes.refuse_if_named(session, name="high")
        await priority_classes.refuse_if_named(session, name="low")
