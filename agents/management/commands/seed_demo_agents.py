from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.bundles import bundle_import
from agents.demo.bundle import (
    demo_bundle,
    demo_model,
    is_seeded_scripted_model,
    relies_on_platform_env,
)
from agents.services import definition_documents, document_json, parse_document
from agents.validation import KINDS
from common.errors import DomainError
from common.tenant_wall import system_scope
from tenancy.models import Tenant
from tenancy.selectors import tenant_get


class Command(BaseCommand):
    help = (
        "Development only: import the demo agents into a tenant (default: demo). Uses a real "
        "model when OPENAI_API_KEY / OPENAI_BASE_URL / ANTHROPIC_API_KEY is set (the operator's "
        "platform credential, granted to the tenant), else the scripted demo model. Safe to "
        "run again: what the tenant already has is kept (its edits too), except that the "
        "untouched scripted model becomes the real one once a provider is configured, and a "
        "demo model that named a provider key in api_key_env moves to the platform "
        "credential; --reset restores every demo definition."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", default="demo", help="tenant slug (default: demo)")
        parser.add_argument(
            "--reset", action="store_true", help="overwrite the demo definitions the tenant has"
        )

    @system_scope("command:seed_demo_agents")  # an operator's command: every tenant's rows
    def handle(self, *args: Any, **options: Any) -> None:
        if settings.PLATFORM_MODE == "production":
            raise CommandError("seed_demo_agents is for development; not in production")
        models = settings.DEMO_MODEL_IDS
        credentials = settings.PLATFORM_PROVIDER_CREDENTIALS_SECRETS
        bundle = demo_bundle(credentials, model_ids=models)
        try:
            tenant = tenant_get(slug=options["tenant"])
            if credentials and tenant.platform_credentials is None:
                # The explicit grant the demo's real model needs (docs/providers.md).
                tenant.platform_credentials = True
                tenant.save(update_fields=["platform_credentials"])
            document, kept = (bundle, 0) if options["reset"] else _absent_only(tenant, bundle)
            report = bundle_import(tenant=tenant, document=document)
        except DomainError as error:
            raise CommandError(error.message) from error
        model = demo_model(credentials, model_ids=models)
        label = (
            "scripted (no provider key configured)"
            if model["provider"] == "scripted"
            else (f"{model['provider']} {model['model_id']}")
        )
        changed = len(report.created) + len(report.updated)
        self.stdout.write(
            f"Demo agents: assistant, writing_pair; model: {label}; {changed} changed"
            + (f"; {kept} kept as the tenant has them (make demo-reset restores them)"
               if kept else "")
        )  # fmt: skip


def _absent_only(tenant: Tenant, bundle: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The demo definitions the tenant lacks, plus the demo model when it is still the
    untouched scripted one or still takes its key from the platform env; and how many of
    the rest differ from the demo's (edited)."""
    document: dict[str, Any] = {"version": bundle["version"]}
    kept = 0
    for kind in KINDS:
        stored = definition_documents(tenant=tenant, kind=kind)
        entries = []
        for entry in bundle.get(kind, []):
            current = stored.get(entry["name"])
            if current is None or (
                kind == "models"
                and (is_seeded_scripted_model(current) or relies_on_platform_env(current))
            ):
                entries.append(entry)
            elif document_json(current) != document_json(parse_document(kind, entry)):
                kept += 1  # the tenant's edit
        document[kind] = entries
    return document, kept
