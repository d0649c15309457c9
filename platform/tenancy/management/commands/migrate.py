"""Django's ``migrate``, connected as the tables' owner (``DATABASE_MIGRATE_URL``) when one
is configured, and in the named system context ``migrate`` (a data migration sees every
tenant's rows): see :mod:`common.tenant_wall`."""

from __future__ import annotations

from typing import Any

from django.core.management.commands import migrate

from common.tenant_wall import as_owner, system_scope


class Command(migrate.Command):
    help = (
        "Updates database schema, connected as DATABASE_MIGRATE_URL's role (the tables' "
        "owner) when it is set. Manages both apps with migrations and those without."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["skip_checks"]:  # as the application's role, before connecting as the owner
            self.check(databases=[options["database"]])
        with as_owner(options["database"]), system_scope("migrate"):
            super().handle(*args, **{**options, "skip_checks": True})
