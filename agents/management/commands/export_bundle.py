from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.bundles import bundle_dump, bundle_export
from common.errors import DomainError
from common.tenant_wall import system_scope
from tenancy.selectors import tenant_get


class Command(BaseCommand):
    help = "Export a tenant's definitions as a bundle (API keys are never exported)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--format", choices=["yaml", "json"], default="yaml")
        parser.add_argument("-o", "--output", help="write to this file instead of stdout")

    @system_scope("command:export_bundle")  # an operator's command: every tenant's rows
    def handle(self, *args: Any, **options: Any) -> None:
        try:
            tenant = tenant_get(slug=options["tenant"])
        except DomainError as error:
            raise CommandError(error.message) from error
        text = bundle_dump(bundle_export(tenant=tenant), options["format"])
        if options["output"]:
            Path(options["output"]).write_text(text)
        else:
            self.stdout.write(text, ending="")
