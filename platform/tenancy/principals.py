"""Who is calling: the authenticated principal every API view and consumer sees."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tenancy.models import ApiKey, Role, Tenant

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@dataclass(frozen=True)
class Principal:
    """A caller inside one tenant, by API key or by a logged-in user's membership."""

    tenant: Tenant
    role: Role
    api_key: ApiKey | None = None
    user: User | None = None

    @property
    def kind(self) -> str:
        return "api_key" if self.api_key is not None else "user"
