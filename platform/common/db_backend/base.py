"""``ENGINE = "common.db_backend"``: Django's PostgreSQL backend, whose pool is an
:class:`~common.db_backend.pool.OutagePool` (so ``OPTIONS["pool"]`` may hold
``read_timeout``), and whose cursors make the connection act for the current tenant or
system context before each statement (:mod:`common.tenant_wall`)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.backends.postgresql import base
from django.db.backends.utils import CursorWrapper

from common import tenant_wall
from common.db_backend.pool import OutagePool

SYNC_SQL = "SELECT set_config('app.tenant_id', …), set_config('app.system', …)"


class _WallMixin:
    """Before a statement, the connection is made to act for the current context (one
    ``set_config`` statement when that changed, none otherwise)."""

    db: DatabaseWrapper
    cursor: Any

    def _execute(self, sql: Any, params: Any, *ignored_wrapper_args: Any) -> Any:
        self.db.tenant_wall_sync(sql)
        return super()._execute(sql, params, *ignored_wrapper_args)  # type: ignore[misc]

    def _executemany(self, sql: Any, param_list: Any, *ignored_wrapper_args: Any) -> Any:
        self.db.tenant_wall_sync(sql)
        return super()._executemany(sql, param_list, *ignored_wrapper_args)  # type: ignore[misc]


class WallCursorWrapper(_WallMixin, CursorWrapper):
    pass


class WallCursorDebugWrapper(_WallMixin, base.CursorDebugWrapper):
    pass


class DatabaseWrapper(base.DatabaseWrapper):
    def make_cursor(self, cursor: Any) -> CursorWrapper:
        return WallCursorWrapper(cursor, self)

    def make_debug_cursor(self, cursor: Any) -> base.CursorDebugWrapper:
        return WallCursorDebugWrapper(cursor, self)

    def tenant_wall_sync(self, sql: Any) -> None:
        """Make this connection act for the current tenant or system context (a statement
        only when that changed since it last did); logged like a query where queries are."""
        if self.connection is None or self.needs_rollback:
            return  # Django's own statement raises what it must
        with self.wrap_database_errors:
            synced = tenant_wall.connection_sync(
                self.connection, strict=settings.TENANT_WALL_STRICT, sql=sql
            )
        if synced and self.queries_logged:
            self.queries_log.append({"sql": SYNC_SQL, "time": "0.000"})

    def _rollback(self) -> None:
        tenant_wall.connection_forget(self.connection)
        super()._rollback()  # type: ignore[misc]

    def _savepoint_rollback(self, sid: str) -> None:
        super()._savepoint_rollback(sid)  # type: ignore[misc]
        tenant_wall.connection_forget(self.connection)

    @property
    def pool(self) -> OutagePool | None:
        """Django's pool, as an :class:`OutagePool`: one per alias and process, opened on
        first use, built from the same settings Django builds its ``ConnectionPool``
        from (Django's property then finds it in place)."""
        options = self.settings_dict["OPTIONS"].get("pool")
        pools: dict[str, Any] = self._connection_pools  # type: ignore[attr-defined]
        if options and self.alias != NO_DB_ALIAS and self.alias not in pools:
            pools.setdefault(self.alias, self._new_pool({} if options is True else options))
        pool: OutagePool | None = super().pool  # type: ignore[misc]
        return pool

    def _new_pool(self, options: dict[str, Any]) -> OutagePool:
        if self.settings_dict.get("CONN_MAX_AGE", 0) != 0:
            raise ImproperlyConfigured("Pooling doesn't support persistent connections.")
        connect_kwargs = self.get_connection_params()
        connect_kwargs["autocommit"] = True  # as Django's: it sets its own mode later
        checks = self.settings_dict["CONN_HEALTH_CHECKS"]
        return OutagePool(
            kwargs=connect_kwargs,
            open=False,
            configure=self._configure_connection,  # type: ignore[attr-defined]
            check=OutagePool.check_connection if checks else None,
            **options,
        )
