"""``ENGINE = "common.db_backend"``: Django's PostgreSQL backend, whose pool is an
:class:`~common.db_backend.pool.OutagePool` (so ``OPTIONS["pool"]`` may hold
``read_timeout``)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.backends.postgresql import base

from common.db_backend.pool import OutagePool


class DatabaseWrapper(base.DatabaseWrapper):
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
