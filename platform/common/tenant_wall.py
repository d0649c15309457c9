"""The tenant wall in PostgreSQL: row-level security on every tenant-owned table.

Every table with a ``tenant_id`` column has two policies (:class:`TenantRowSecurity`, added
by each app's migrations):

- ``tenant_isolation``: a row is seen, and may be written, only when its ``tenant_id`` is
  the connection's ``app.tenant_id`` setting;
- ``system_context``: every row, while ``app.system`` names a system context.

Both are ``FORCE``\\ d, so they apply to the tables' owner too; the application connects as a
role that owns nothing and is no superuser (docs/operations.md). A connection with neither
setting sees no row and may write none.

Who sets them. Code says what it acts for with a context manager, and the database backend
(:mod:`common.db_backend`) makes the connection agree before each statement:

- :func:`tenant_scope` (or :func:`tenant_enter`, for an authenticated request, bounded by
  :func:`request_scope`): one tenant's rows;
- :func:`system_scope`: a named system context, for the code whose work spans tenants
  (the sweeper, beat's duties, the superuser's admin, management commands, looking up the
  API key a request presents). The name says who, in ``app.system``;
- neither (a request before authentication, a thread started without a context): no rows.

Why session settings, kept in step, rather than ``SET LOCAL``. Django runs most statements
in autocommit, outside any transaction, so a ``SET LOCAL`` would have nothing to be local to.
The backend instead sets both values with ``set_config(..., false)`` on the connection when
they differ from what it last set there, and remembers what it set on the psycopg connection
itself, so a pooled connection handed to the next request of the same tenant costs no extra
statement, and one handed to another tenant costs one. What it remembers is forgotten when a
rollback may have undone the setting (a rollback, a savepoint's rollback, a connection the
pool had to roll back), so the next statement sets it again. The values are context
variables: they follow a request into the thread its sync code runs on, and a task's
threads when started with :func:`contextvars.copy_context`.

With ``TENANT_WALL_STRICT`` on (the test suite), a statement that names a tenant-owned
table while neither context is set raises :class:`NoTenantContext` instead of silently
seeing nothing: the test run finds every path that forgot to say what it acts for.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Iterator
from contextvars import ContextVar
from functools import cache
from typing import Any

from django.core.exceptions import ValidationError
from django.db.migrations.operations.base import Operation
from psycopg.pq import TransactionStatus

TENANT_SETTING = "app.tenant_id"
SYSTEM_SETTING = "app.system"
TENANT_POLICY = "tenant_isolation"
SYSTEM_POLICY = "system_context"
# The attribute on a psycopg connection holding the (tenant, system) pair last set on it.
APPLIED_ATTR = "_tenant_wall"

_tenant: ContextVar[str | None] = ContextVar("tenant_wall_tenant", default=None)
_system: ContextVar[str | None] = ContextVar("tenant_wall_system", default=None)


class NoTenantContext(RuntimeError):
    """A statement on a tenant-owned table ran with neither a tenant nor a system context
    (raised only with ``TENANT_WALL_STRICT``; otherwise the statement sees no row)."""


def current() -> tuple[str, str]:
    """The (tenant id, system context name) in effect, ``""`` for each one unset."""
    return _tenant.get() or "", _system.get() or ""


@contextlib.contextmanager
def _scope(tenant: str | None, system: str | None) -> Iterator[None]:
    tenant_token, system_token = _tenant.set(tenant), _system.set(system)
    try:
        yield
    finally:
        _system.reset(system_token)
        _tenant.reset(tenant_token)


@contextlib.contextmanager
def tenant_scope(tenant_id: uuid.UUID | str) -> Iterator[None]:
    """Within this block, statements see and write ``tenant_id``'s rows only (a system
    context around it is suspended)."""
    with _scope(str(tenant_id), None):
        yield


@contextlib.contextmanager
def system_scope(name: str) -> Iterator[None]:
    """Within this block, statements see every tenant's rows: for code whose work spans
    tenants by design. ``name`` says which (``routing``, ``admin``, ``command:seed_demo``).
    Usable as a decorator too."""
    if not name:
        raise ValueError("a system context needs a name")
    with _scope(None, name):
        yield


@contextlib.contextmanager
def request_scope() -> Iterator[None]:
    """A request's bounds: it starts with no context (it sees nothing until it
    authenticates) and whatever it entered ends with it."""
    with _scope(None, None):
        yield


def tenant_enter(tenant_id: uuid.UUID | str) -> None:
    """Act for ``tenant_id`` from here to the end of the enclosing :func:`request_scope`
    (authentication calls this once it knows the request's tenant)."""
    _tenant.set(str(tenant_id))
    _system.set(None)


def tenant_scope_of(model: Any, pk: uuid.UUID | str) -> contextlib.AbstractContextManager[None]:
    """:func:`tenant_scope` of the tenant owning ``model``'s row ``pk`` (a task given only
    an id). A row that does not exist (or an id that is not one) gives no context: the
    block sees nothing, as it would find nothing."""
    tenant_id = tenant_of(model, pk)
    return tenant_scope(tenant_id) if tenant_id is not None else request_scope()


def tenant_of(model: Any, pk: uuid.UUID | str) -> Any:
    """The tenant id of ``model``'s row ``pk`` (None: no such row), read in the system
    context ``routing``: for code given only an id, to act for that row's tenant."""
    with system_scope("routing"):
        try:
            return model.objects.filter(pk=pk).values_list("tenant_id", flat=True).first()
        except (ValueError, ValidationError):
            return None


def system_enter(name: str) -> None:
    """Act as the named system context from here to the end of the enclosing
    :func:`request_scope` (the admin, for a staff user)."""
    if not name:
        raise ValueError("a system context needs a name")
    _tenant.set(None)
    _system.set(name)


def bound(content: Any) -> Any:
    """``content`` (an iterator or async iterator: a streaming response's body), each step
    taken in the context current now. A body is iterated after the view returned and its
    request's context ended; bound, it reads as the request did."""
    captured = (_tenant.get(), _system.get())

    def restored() -> contextlib.AbstractContextManager[None]:
        return _scope(*captured)

    if hasattr(content, "__aiter__"):

        async def steps_async() -> Any:
            inner = aiter(content)
            try:
                while True:
                    with restored():
                        try:
                            item = await anext(inner)
                        except StopAsyncIteration:
                            return
                    yield item
            finally:
                if hasattr(inner, "aclose"):
                    with restored():
                        await inner.aclose()

        return steps_async()

    def steps() -> Iterator[Any]:
        inner = iter(content)
        try:
            while True:
                with restored():
                    try:
                        item = next(inner)
                    except StopIteration:
                        return
                yield item
        finally:
            if hasattr(inner, "close"):
                with restored():
                    inner.close()

    return steps()


# The connection's side -----------------------------------------------------------------


def connection_sync(raw: Any, *, strict: bool, sql: Any) -> bool:
    """Make the psycopg connection ``raw`` act for the current context before running
    ``sql``. True when it took a statement (the settings had to change)."""
    wanted = current()
    if strict and wanted == ("", "") and _names_tenant_table(sql):
        raise NoTenantContext(
            "a statement on a tenant-owned table ran outside any tenant or system context "
            f"(wrap the code in tenant_scope() or a named system_scope()): {sql[:200]}"
        )
    if getattr(raw, APPLIED_ATTR, None) == wanted:
        return False
    if raw.info.transaction_status == TransactionStatus.INERROR:
        return False  # only a rollback runs now; it makes the next statement set them
    raw.execute(
        "SELECT set_config(%s, %s, false), set_config(%s, %s, false)",
        (TENANT_SETTING, wanted[0], SYSTEM_SETTING, wanted[1]),
        prepare=False,
    )
    setattr(raw, APPLIED_ATTR, wanted)
    return True


def connection_forget(raw: Any) -> None:
    """What was set on ``raw`` may have been rolled back: set it again before the next
    statement."""
    if raw is not None and getattr(raw, APPLIED_ATTR, None) is not None:
        setattr(raw, APPLIED_ATTR, None)


def tenant_owned_tables() -> list[str]:
    """Every table with a ``tenant_id`` column: the tables the policies guard."""
    from django.apps import apps

    return sorted(
        model._meta.db_table
        for model in apps.get_models()
        if any(field.column == "tenant_id" for field in model._meta.concrete_fields)
    )


@cache
def _tenant_table_pattern() -> re.Pattern[str]:
    names = "|".join(re.escape(name) for name in tenant_owned_tables())
    return re.compile(rf"\b(?:{names})\b")


def _names_tenant_table(sql: Any) -> bool:
    return bool(_tenant_table_pattern().search(sql if isinstance(sql, str) else repr(sql)))


# Migrations ----------------------------------------------------------------------------

_TENANT_MATCH = f"tenant_id = NULLIF(current_setting('{TENANT_SETTING}', true), '')::uuid"
_SYSTEM_MATCH = f"COALESCE(current_setting('{SYSTEM_SETTING}', true), '') <> ''"


def policy_sql(table: str) -> list[str]:
    """The statements that put ``table`` behind the wall."""
    quoted = f'"{table}"'
    return [
        f"ALTER TABLE {quoted} ENABLE ROW LEVEL SECURITY",
        f"ALTER TABLE {quoted} FORCE ROW LEVEL SECURITY",
        f"CREATE POLICY {TENANT_POLICY} ON {quoted} USING ({_TENANT_MATCH}) "
        f"WITH CHECK ({_TENANT_MATCH})",
        f"CREATE POLICY {SYSTEM_POLICY} ON {quoted} USING ({_SYSTEM_MATCH}) "
        f"WITH CHECK ({_SYSTEM_MATCH})",
    ]


class TenantRowSecurity(Operation):
    """A migration operation: ``model_name``'s table gets the two policies, enabled and
    forced (reversed: dropped, disabled)."""

    reversible = True
    reduces_to_sql = True

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        return self.__class__.__name__, [self.model_name], {}

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass  # the policies are not part of Django's model state

    def _table(self, app_label: str, state: Any) -> str:
        return str(state.apps.get_model(app_label, self.model_name)._meta.db_table)

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any,
                          to_state: Any) -> None:  # fmt: skip
        for statement in policy_sql(self._table(app_label, to_state)):
            schema_editor.execute(statement)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any,
                           to_state: Any) -> None:  # fmt: skip
        table = f'"{self._table(app_label, from_state)}"'
        for statement in (
            f"DROP POLICY IF EXISTS {SYSTEM_POLICY} ON {table}",
            f"DROP POLICY IF EXISTS {TENANT_POLICY} ON {table}",
            f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY",
            f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY",
        ):
            schema_editor.execute(statement)

    def describe(self) -> str:
        return f"Row-level security (tenant wall) on {self.model_name}"

    @property
    def migration_name_fragment(self) -> str:
        return f"tenant_wall_{self.model_name.lower()}"


# Roles ---------------------------------------------------------------------------------

_OWNER_KEYS = ("USER", "PASSWORD", "HOST", "PORT", "OPTIONS")
AS_OWNER = "TENANT_WALLAS_OWNER"  # in a connection's settings while it connects as the owner


@contextlib.contextmanager
def as_owner(alias: str = "default") -> Iterator[None]:
    """Within this block, ``alias`` connects as the tables' owner (``DATABASE_MIGRATE_URL``)
    to the same database: for migrations and the test database's creation. Without an owner
    configured, nothing changes."""
    from django.conf import settings
    from django.db import connections

    owner: dict[str, Any] | None = settings.DATABASE_OWNER
    connection = connections[alias]
    if owner is None or alias != "default" or connection.settings_dict.get(AS_OWNER):
        yield
        return
    saved = {key: connection.settings_dict[key] for key in _OWNER_KEYS}
    _reconnect(connection, {**{key: owner[key] for key in _OWNER_KEYS}, AS_OWNER: True})
    try:
        yield
    finally:
        _reconnect(connection, {**saved, AS_OWNER: False})


def _reconnect(connection: Any, settings_dict: dict[str, Any]) -> None:
    connection.close()
    connection.close_pool()
    connection.settings_dict.update(settings_dict)
