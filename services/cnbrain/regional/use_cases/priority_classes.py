"""The operators' priority classes: listed and read by anyone authenticated, put (created or
replaced) and deleted by staff, each change audited in the transaction that makes it.

In a federation the classes are the federation's, which the national brain holds: a put or
delete goes to the national brain first (Unavailable when it cannot be reached: nothing
changes), which checks it against the federation's set and answers that set as it is then;
this brain stores that set (`policy_sync` keeps it equal to the federation's afterwards). A
delete is refused here first when requests of this brain name the class.

The classes order the admission queue and say who may preempt whom (`docs/scheduling.md`).

Errors are the domain's: Forbidden (not staff), NotFound (no such class), Invalid naming the
field (a name or number out of bounds), Conflict (a value another class has, the default
class removed or made not the default, a class that requests not yet ended name).
"""

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.errors import Forbidden, NotFound
from cnbrain.regional.security import Principal
from cnbrain.regional.use_cases.ports import NationalPolicy
from cnbrain.regional.use_cases.tenancy import STAFF_ONLY
from cnbrain.scheduling.classes import (
    MAX_CLASS_VALUE,
    MAX_WAIT_S,
    MIN_CLASS_VALUE,
    PriorityClass,
    PriorityClasses,
    check_class_name,
)
from cnbrain.storage import audit, priority_classes


class PriorityClassBody(BaseModel):
    """A class as an operator puts it; its name is the path's."""

    model_config = ConfigDict(extra="forbid")

    value: int = Field(
        strict=True,
        ge=MIN_CLASS_VALUE,
        le=MAX_CLASS_VALUE,
        description="Orders the classes, higher first; no two classes share a value.",
    )
    preemptible: bool = Field(
        strict=True, description="Whether requests of higher classes may preempt its work."
    )
    default_max_wait_s: float = Field(
        ge=0,
        le=MAX_WAIT_S,
        strict=True,
        allow_inf_nan=False,
        description="How long a request of the class that names no max_wait_s waits to start "
        "(seconds).",
    )
    default: bool = Field(
        default=False,
        strict=True,
        description="Make it the class of requests that name none (the former default no "
        "longer is). The default class must be put with true.",
    )


class PriorityClassView(BaseModel):
    """A stored class, and whether it is the default."""

    name: str
    value: int
    preemptible: bool
    default_max_wait_s: float
    default: bool


def _view(one: PriorityClass, *, default: PriorityClass) -> PriorityClassView:
    return PriorityClassView(
        name=one.name,
        value=one.value,
        preemptible=one.preemptible,
        default_max_wait_s=one.default_max_wait_s,
        default=one.name == default.name,
    )


def _no_class(name: str) -> NotFound:
    return NotFound(f"priority class {name!r} does not exist")


class ManagePriorityClasses:
    """The priority classes of the brain's database."""

    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], *, policy: NationalPolicy | None = None
    ) -> None:
        self._sessions = sessions
        self._policy = policy

    async def list_classes(self) -> list[PriorityClassView]:
        """Every class, highest value first."""
        async with self._sessions() as session:
            classes = await priority_classes.list_classes(session)
        return [] if classes is None else [_view(one, default=classes.default) for one in classes]

    async def get_class(self, name: str) -> PriorityClassView:
        """The class called `name`; NotFound when there is none."""
        async with self._sessions() as session:
            classes = await priority_classes.list_classes(session)
        if classes is None or name not in classes:
            raise _no_class(name)
        return _view(classes.get(name), default=classes.default)

    async def put_class(
        self, principal: Principal, name: str, body: PriorityClassBody
    ) -> tuple[PriorityClassView, bool]:
        """Create or replace the class called `name`; the class as stored, and whether it is
        new. Raises Forbidden (not staff), Invalid (field `name`: not a class name; or the
        field of the body at fault) or Conflict (see the module docstring)."""
        _require_staff(principal)
        check_class_name(name)
        one = PriorityClass(
            name=name,
            value=body.value,
            preemptible=body.preemptible,
            default_max_wait_s=body.default_max_wait_s,
        )
        federation: PriorityClasses | None = None
        if self._policy is not None:
            federation, created = await self._policy.put_priority_class(
                one, default=body.default, actor=principal.user_id
            )
        async with self._sessions.begin() as session:
            if federation is None:
                created = await priority_classes.put_class(session, one, default=body.default)
            else:
                await priority_classes.replace_classes(session, federation)
            await audit.record(
                session,
                actor=principal.user_id,
                action="priority_class.created" if created else "priority_class.replaced",
                object_type="priority_class",
                object_id=name,
                detail=body.model_dump(),
            )
        view = PriorityClassView(
            name=one.name,
            value=one.value,
            preemptible=one.preemptible,
            default_max_wait_s=one.default_max_wait_s,
            default=body.default,
        )
        return view, created

    async def delete_class(self, principal: Principal, name: str) -> None:
        """Delete the class called `name`. Raises Forbidden (not staff), NotFound (none) or
        Conflict (the default class, or one that requests not yet ended name)."""
        _require_staff(principal)
        federation: PriorityClasses | None = None
        if self._policy is not None:
            async with self._sessions() as session:
                await priority_classes.refuse_if_named(session, name=name)
            federation = await self._policy.delete_priority_class(name, actor=principal.user_id)
        async with self._sessions.begin() as session:
            if federation is None:
                await priority_classes.delete_class(session, name=name)
            else:
                await priority_classes.replace_classes(session, federation)
            await audit.record(
                session,
                actor=principal.user_id,
                action="priority_class.deleted",
                object_type="priority_class",
                object_id=name,
            )


def _require_staff(principal: Principal) -> None:
    if not principal.is_staff:
        raise Forbidden(STAFF_ONLY)
