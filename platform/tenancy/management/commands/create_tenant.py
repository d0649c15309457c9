from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from common.errors import DomainError
from common.tenant_wall import system_scope
from tenancy.services import tenant_create


class Command(BaseCommand):
    help = "Create a tenant (with its own wrapped data key)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", help="lowercase letters, digits and inner hyphens")
        parser.add_argument("--name", default="", help="display name (default: the slug)")

    @system_scope("command:create_tenant")  # an operator's command: every tenant's rows
    def handle(self, *args: Any, **options: Any) -> None:
        try:
            tenant = tenant_create(slug=options["slug"], name=options["name"])
        except DomainError as error:
            raise CommandError(error.message) from error
        self.stdout.write(f"Created tenant {tenant.slug} ({tenant.id})")
