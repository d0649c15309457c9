"""``make dev DEV_BUNDLE=<file>``: import a bundle file into a tenant, then again each time
the file changes, saying in one line what changed or, plainly, why nothing did."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import close_old_connections
from watchfiles import watch

from agents.bundles import bundle_import, bundle_parse
from agents.services import DefinitionInvalid
from common.errors import DomainError
from common.tenant_wall import system_scope
from tenancy.models import Tenant
from tenancy.selectors import tenant_get


def bundle_reimport(*, tenant: Tenant, path: Path) -> str:
    """Import the bundle at ``path`` into ``tenant`` (all or nothing, never deleting a
    definition the file lacks) and say what happened in one line: what was created and
    changed, or every problem with its place in the document, in which case the tenant
    keeps the definitions it had. Never raises for a bad file."""
    try:
        report = bundle_import(tenant=tenant, document=bundle_parse(path.read_bytes()))
    except OSError as error:
        return f"{path}: not imported: cannot read it ({error.strerror})"
    except DefinitionInvalid as error:
        problems = "; ".join(f"{p['path']}: {p['message']}" for p in error.details or [])
        return f"{path}: not imported, the previous definitions stay: {problems or error.message}"
    except DomainError as error:
        return f"{path}: not imported, the previous definitions stay: {error.message}"
    changed = [*report.created, *report.updated]
    said = f"{path}: imported: " + (", ".join(changed) if changed else "nothing changed")
    warnings = "".join(f"; warning: {w['path']}: {w['message']}" for w in report.warnings)
    return said + warnings


class Command(BaseCommand):
    help = (
        "Development only: import a bundle file (YAML or JSON) into a tenant (default: demo), "
        "then import it again each time it changes. A file with errors is reported and "
        "nothing is written: the tenant keeps its definitions."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="bundle file to watch")
        parser.add_argument("--tenant", default="demo", help="tenant slug (default: demo)")
        parser.add_argument("--once", action="store_true", help="import once, do not watch")

    @system_scope("command:dev_bundle")  # an operator's command
    def handle(self, *args: Any, **options: Any) -> None:
        if settings.PLATFORM_MODE == "production":
            raise CommandError("dev_bundle is for development; not in production")
        path = Path(options["file"]).resolve()
        try:
            tenant = tenant_get(slug=options["tenant"])
        except DomainError as error:
            raise CommandError(error.message) from error
        self._say(bundle_reimport(tenant=tenant, path=path))
        if options["once"]:
            return
        # The directory, not the file: an editor that saves by renaming replaces the file.
        for _ in watch(path.parent, watch_filter=lambda _, changed: Path(changed) == path,
                       debounce=400, step=50):  # fmt: skip
            close_old_connections()
            self._say(bundle_reimport(tenant=tenant, path=path))

    def _say(self, line: str) -> None:
        self.stdout.write(f"{time.strftime('%H:%M:%S')} {line}")
        self.stdout.flush()
