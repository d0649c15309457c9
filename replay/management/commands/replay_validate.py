from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from common.errors import DomainError
from common.tenant_wall import system_scope
from replay.export import export_scope_session, export_scope_thread
from replay.validate import Validation, validate_export, validate_scope, validation_lines
from tenancy.selectors import tenant_get

# Exit statuses: 0 valid, 1 a difference, 2 nothing differs but a thread was unverifiable.
DIFFERENT, UNVERIFIABLE = 1, 2


class Command(BaseCommand):
    help = (
        "Replay the events of an export (a file of JSON lines), or of a stored thread or "
        "session, into their read model and compare it with the stored state. Prints OK or "
        "each difference; exits 1 on a difference, 2 when a thread cannot be verified (its "
        "events were pruned, or changed since the export)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("export", nargs="?", help="an export file (JSON lines)")
        parser.add_argument("--tenant", required=True, help="tenant slug")
        scope = parser.add_mutually_exclusive_group()
        scope.add_argument("--thread", help="validate this stored thread instead of a file")
        scope.add_argument("--session", help="validate every thread of this stored session")

    @system_scope("command:replay_validate")  # an operator's command: every tenant's rows
    def handle(self, *args: Any, **options: Any) -> None:
        given = [name for name in ("export", "thread", "session") if options[name]]
        if len(given) != 1:
            raise CommandError("give one of: an export file, --thread or --session")
        try:
            tenant = tenant_get(slug=options["tenant"])
            result = self._validate(tenant, options)
        except DomainError as error:
            raise CommandError(error.message) from error
        for line in validation_lines(result):
            self.stdout.write(line)
        if result.differences:
            raise SystemExit(DIFFERENT)
        if result.unverifiable:
            raise SystemExit(UNVERIFIABLE)

    def _validate(self, tenant: Any, options: dict[str, Any]) -> Validation:
        if options["thread"]:
            return validate_scope(export_scope_thread(tenant=tenant, thread_id=options["thread"]))
        if options["session"]:
            scope = export_scope_session(tenant=tenant, session_id=options["session"])
            return validate_scope(scope)
        path = Path(options["export"])
        if not path.is_file():
            raise CommandError(f"no such file: {path}")
        with path.open(encoding="utf-8") as lines:
            return validate_export(lines, tenant=tenant)
