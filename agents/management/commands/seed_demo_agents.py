from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.bundles import bundle_import
from agents.demo.bundle import demo_bundle
from common.errors import DomainError
from tenancy.selectors import tenant_get


class Command(BaseCommand):
    help = (
        "Development only: import the demo agents into a tenant (default: demo). Uses a real "
        "model when OPENAI_API_KEY / OPENAI_BASE_URL / ANTHROPIC_API_KEY is set, else the "
        "scripted demo model. Safe to run again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", default="demo", help="tenant slug (default: demo)")

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.PLATFORM_MODE == "production":
            raise CommandError("seed_demo_agents is for development; not in production")
        try:
            report = bundle_import(
                tenant=tenant_get(slug=options["tenant"]),
                document=demo_bundle(settings.AGENT_PLATFORM_ENV_SECRETS),
            )
        except DomainError as error:
            raise CommandError(error.message) from error
        model = demo_bundle(settings.AGENT_PLATFORM_ENV_SECRETS)["models"][0]
        label = (
            "scripted (no provider key configured)"
            if model["provider"] == "scripted"
            else (f"{model['provider']} {model['model_id']}")
        )
        changed = len(report.created) + len(report.updated)
        self.stdout.write(
            f"Demo agents: assistant, writing_pair; model: {label}; {changed} changed"
        )
