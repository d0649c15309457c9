from __future__ import annotations

import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from common.errors import DomainError
from common.tenant_wall import system_scope
from tenancy.models import ApiKey
from tenancy.services import api_key_revoke


class Command(BaseCommand):
    help = "Revoke an API key, by id or by its sap_<prefix> (the full key works too)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("key", help="key id, sap_<prefix>, or the full key")

    @system_scope("command:revoke_api_key")  # an operator's command: every tenant's rows
    def handle(self, *args: Any, **options: Any) -> None:
        ident: str = options["key"]
        if ident.startswith("sap_"):
            found = ApiKey.objects.filter(prefix=ident.split("_")[1]).first()
        else:
            try:
                key_id = uuid.UUID(ident)
            except ValueError as error:
                raise CommandError(f"{ident!r} is neither a key id nor sap_<prefix>") from error
            found = ApiKey.objects.filter(id=key_id).first()
        if found is None:
            raise CommandError(f"no API key matches {ident!r}")
        try:
            api_key_revoke(tenant=found.tenant, api_key_id=found.id)
        except DomainError as error:
            raise CommandError(error.message) from error
        self.stdout.write(f"Revoked key {found.id} ({found.name}) of tenant {found.tenant.slug}")
