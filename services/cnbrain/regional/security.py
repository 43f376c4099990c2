"""Who is calling: API keys as bearer tokens, roles, and what each role may do."""

from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    TENANT_USER = "tenant-user"
    TENANT_ADMIN = "tenant-admin"
    OPERATOR = "operator"
    ADMIN = "admin"


TENANT_ROLES = frozenset({Role.TENANT_USER, Role.TENANT_ADMIN})
STAFF_ROLES = frozenset({Role.OPERATOR, Role.ADMIN})


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller. Tenant roles always carry their tenant; staff carry none."""

    user_id: str
    role: Role
    tenant_id: str | None

    @property
    def is_staff(self) -> bool:
        return self.role in STAFF_ROLES

    def tenant_scope(self) -> str | None:
        """The tenant every query of this caller is limited to; None for staff (all tenants)."""
        return None if self.is_staff else self.tenant_id

    def may_act_for(self, tenant_id: str) -> bool:
        return self.is_staff or self.tenant_id == tenant_id
