"""The tenant wall's roles (common.tenant_wall): migrations connect as the tables' owner and
grant the application's role what it needs, and nothing more.

The application's role (``DATABASE_URL``) may read and write rows (``SELECT``, ``INSERT``,
``UPDATE``, ``DELETE``) and use sequences; it may not ``TRUNCATE`` (which ignores row-level
security), alter, or own anything. Every ``migrate`` grants this again on every table of
the schema, so a table added by a later migration is covered the moment it exists.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.core.checks import CheckMessage, Warning
from django.db import connections
from django.http import HttpRequest, HttpResponseBase
from django.urls import NoReverseMatch, reverse
from django.utils.decorators import sync_and_async_middleware
from psycopg import sql

from common.tenant_wall import system_enter


def grant_application_role(*, using: str, **kwargs: Any) -> None:
    """After ``migrate``: the application's role may use every table and sequence (a
    ``post_migrate`` receiver, run once per ``migrate``)."""
    connection = connections[using]
    role: str = settings.DATABASE_APPLICATION_ROLE
    if connection.settings_dict["USER"] == role:
        return  # one role owns and uses the tables: nothing to grant
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_schema()")
        schema = sql.Identifier(cursor.fetchone()[0])
        grantee = sql.Identifier(role)
        cursor.execute(
            sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {} TO {}").format(
                schema, grantee
            )
        )
        cursor.execute(
            sql.SQL("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {} TO {}").format(
                schema, grantee
            )
        )
        cursor.execute(
            sql.SQL("GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {} TO {}").format(schema, grantee)
        )


ADMIN_CONTEXT = "admin"


@sync_and_async_middleware
def admin_system_scope(get_response: Any) -> Any:
    """Middleware: the admin's pages, for a staff user, act in the system context ``admin``.
    A superuser sees every tenant; a staff member who is no superuser sees the tenants of
    their memberships, which :class:`tenancy.admin.TenantScopedAdmin` (the admin's one door
    to tenant rows) enforces for every page. Any other request is left as it is."""

    if iscoroutinefunction(get_response):

        async def async_middleware(request: HttpRequest) -> HttpResponseBase:
            if _is_admin_path(request.path_info):
                user = await request.auser()
                if user.is_active and user.is_staff:
                    system_enter(ADMIN_CONTEXT)
            return await get_response(request)  # type: ignore[no-any-return]

        return async_middleware

    def middleware(request: HttpRequest) -> HttpResponseBase:
        if _is_admin_path(request.path_info) and request.user.is_active and request.user.is_staff:
            system_enter(ADMIN_CONTEXT)
        return get_response(request)  # type: ignore[no-any-return]

    return middleware


def _is_admin_path(path: str) -> bool:
    try:
        return path.startswith(reverse("admin:index"))
    except NoReverseMatch:  # a URLconf without the admin (a test's own)
        return False


def check_application_role(*, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``check --database default``: the wall is down when ``DATABASE_URL``'s role is a
    superuser or may bypass row-level security (a warning naming the role)."""
    if not databases or "default" not in databases:
        return []
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT current_user, rolsuper OR rolbypassrls FROM pg_roles "
            "WHERE rolname = current_user"
        )
        role, bypasses = cursor.fetchone()
    if not bypasses:
        return []
    return [
        Warning(
            f"DATABASE_URL connects as {role!r}, a superuser or a role with BYPASSRLS: "
            "row-level security does not apply to it, so the tenant wall is down",
            hint="connect as a role that owns no table and is no superuser "
            "(docs/operations.md#database-roles)",
            id="tenancy.W001",
        )
    ]
