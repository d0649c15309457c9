"""``make run``'s one management process: migrate when a migration is pending, then the demo
tenant's credentials (``seed_demo``) and agents (``seed_demo_agents``), in one Django start-up
instead of three."""

from __future__ import annotations

import io
import json
import sys
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor


def pending_migrations(database: str = DEFAULT_DB_ALIAS) -> list[str]:
    """The migrations ``migrate`` would apply (``app.name``), in order: the files on disk
    against the one query that reads the applied ones."""
    executor = MigrationExecutor(connections[database])
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [f"{migration.app_label}.{migration.name}" for migration, _ in plan]


class Command(BaseCommand):
    help = (
        "Development only: apply pending migrations (none: nothing is written), then seed the "
        "demo tenant and its agents as seed_demo and seed_demo_agents do. With --json, prints "
        'one JSON line once the schema is current ({"migrated": [...]}) and one at the end '
        '({"credentials": {...}, "agents": "<seed_demo_agents line>"}); migrate\'s progress '
        "goes to stderr."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print JSON lines (make run)")

    def handle(self, *args: Any, **options: Any) -> None:
        pending = pending_migrations()
        if pending:
            call_command("migrate", "--noinput", stdout=sys.stderr)
        said = f"Migrations: {len(pending)} applied" if pending else "Migrations: up to date"
        self._say(options["json"], {"migrated": pending}, said)
        credentials = io.StringIO()
        call_command("seed_demo", "--json", stdout=credentials)
        agents = io.StringIO()
        call_command("seed_demo_agents", stdout=agents)
        seeded = {"credentials": json.loads(credentials.getvalue()),
                  "agents": agents.getvalue().strip()}  # fmt: skip
        self._say(options["json"], seeded, seeded["agents"])

    def _say(self, as_json: bool, event: dict[str, Any], text: str) -> None:
        self.stdout.write(json.dumps(event) if as_json else text)
        self.stdout.flush()
