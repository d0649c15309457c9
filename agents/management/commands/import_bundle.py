from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.bundles import bundle_import, bundle_parse
from agents.services import DefinitionInvalid
from common.errors import DomainError
from common.tenant_wall import system_scope
from tenancy.selectors import tenant_get


class Command(BaseCommand):
    stealth_options = ("stdin",)
    help = (
        "Import a bundle (YAML or JSON) into a tenant: all or nothing. Every problem is "
        "printed with its path in the document."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="bundle file, or - for standard input")
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--dry-run", action="store_true", help="validate only")
        parser.add_argument(
            "--replace", action="store_true", help="also delete definitions not in the bundle"
        )
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    @system_scope("command:import_bundle")  # an operator's command: every tenant's rows
    def handle(self, *args: Any, **options: Any) -> None:
        source = options["file"]
        try:
            raw = self._stdin(options) if source == "-" else Path(source).read_bytes()
        except OSError as error:
            raise CommandError(f"cannot read {source}: {error.strerror}") from error
        try:
            report = bundle_import(
                tenant=tenant_get(slug=options["tenant"]),
                document=bundle_parse(raw),
                dry_run=options["dry_run"],
                replace=options["replace"],
            )
        except DefinitionInvalid as error:
            for problem in error.details or []:
                self.stderr.write(f"{problem['path']}: {problem['message']}")
            raise CommandError(
                f"bundle not imported: {len(error.details or [])} error(s)"
            ) from error
        except DomainError as error:
            raise CommandError(error.message) from error
        if options["json"]:
            self.stdout.write(json.dumps(report.as_json(), indent=2))
            return
        verb = "would be" if report.dry_run else "were"
        for label in ("created", "updated", "deleted", "unchanged"):
            items = getattr(report, label)
            if items:
                self.stdout.write(f"{len(items)} {verb} {label}: {', '.join(items)}")
        for warning in report.warnings:
            self.stdout.write(f"warning: {warning['path']}: {warning['message']}")

    @staticmethod
    def _stdin(options: dict[str, Any]) -> bytes:
        """Standard input's bytes (``call_command(..., stdin=stream)`` passes another)."""
        stream = options.get("stdin") or sys.stdin.buffer
        data = stream.read()
        return data.encode() if isinstance(data, str) else bytes(data)
