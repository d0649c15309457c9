from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.dateparse import parse_datetime

from common.errors import DomainError
from common.tenant_wall import system_scope
from common.time import now
from tenancy.models import Role
from tenancy.selectors import tenant_get
from tenancy.services import api_key_create


def _expiry(value: str | None) -> dt.datetime | None:
    if value is None:
        return None
    if value.endswith("d") and value[:-1].isdigit():
        return now() + dt.timedelta(days=int(value[:-1]))
    parsed = parse_datetime(value)
    if parsed is None or parsed.tzinfo is None:
        raise CommandError(
            f"--expires must be like 30d or an ISO datetime with offset, got {value!r}"
        )
    return parsed


class Command(BaseCommand):
    help = "Create an API key for a tenant and print it (it is shown only this once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--name", required=True, help="what the key is for")
        parser.add_argument("--role", choices=Role.values, default=Role.MEMBER)
        parser.add_argument("--expires", help="30d, or an ISO 8601 datetime with offset")

    @system_scope("command:create_api_key")  # an operator's command: every tenant's rows
    def handle(self, *args: Any, **options: Any) -> None:
        try:
            issued = api_key_create(
                tenant=tenant_get(slug=options["tenant"]),
                name=options["name"],
                role=Role(options["role"]),
                expires_at=_expiry(options["expires"]),
            )
        except DomainError as error:
            raise CommandError(error.message) from error
        self.stderr.write(
            f"Created {issued.api_key.role} key {issued.api_key.id}; it is not shown again:"
        )
        self.stdout.write(issued.secret)
