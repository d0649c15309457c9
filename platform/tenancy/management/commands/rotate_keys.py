from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from common.tenant_wall import system_scope
from tenancy.encryption import tenant_keys_rotate


class Command(BaseCommand):
    help = (
        "Re-wrap every tenant data key under the newest master key (the first of "
        "PLATFORM_ENCRYPTION_KEYS). Run after prepending a new key; older keys can be "
        "removed from the list once this has finished."
    )

    @system_scope("command:rotate_keys")  # an operator's command: every tenant's rows
    def handle(self, *args: Any, **options: Any) -> None:
        rewrapped, total = tenant_keys_rotate()
        self.stdout.write(f"Re-wrapped {rewrapped} of {total} tenant data keys.")
