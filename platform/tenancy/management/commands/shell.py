"""Django's ``shell``, in the named system context ``command:shell``: an operator's shell
sees every tenant's rows, as the other management commands do (common.tenant_wall)."""

from __future__ import annotations

from typing import Any

from django.core.management.commands import shell

from common.tenant_wall import system_scope


class Command(shell.Command):
    @system_scope("command:shell")
    def handle(self, *args: Any, **options: Any) -> None:
        super().handle(*args, **options)
