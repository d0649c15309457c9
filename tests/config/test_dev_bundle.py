"""``make dev DEV_BUNDLE=<file>``'s re-import (``manage.py dev_bundle``): each import of the
file says what it created and changed; a file with errors is reported plainly, with its
place in the document, and the tenant keeps the definitions it had."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from agents.management.commands.dev_bundle import bundle_reimport
from agents.models import Prompt
from tenancy.models import Tenant
from tests.agents.samples import SCRIPTED_RULES
from tests.factories import make_tenant

pytestmark = pytest.mark.django_db


def _bundle(description: str, model: str = "fast") -> dict[str, Any]:
    return {
        "version": 1,
        "models": [{"name": "fast", "provider": "scripted", "model_id": "scripted",
                    "config": SCRIPTED_RULES}],
        "prompts": [{"name": "helper", "tool_description": description,
                     "prompt": "You help.", "model": model}],
    }  # fmt: skip


def _description(tenant: Tenant) -> str:
    return Prompt.objects.for_tenant(tenant).get(name="helper").tool_description


def test_each_import_says_what_it_created_then_what_changed(tmp_path: Path) -> None:
    tenant = make_tenant()
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(_bundle("Helps")))
    first = bundle_reimport(tenant=tenant, path=path)
    path.write_text(json.dumps(_bundle("Helps more")))
    second = bundle_reimport(tenant=tenant, path=path)
    third = bundle_reimport(tenant=tenant, path=path)

    assert first == f"{path}: imported: model fast, prompt helper"
    assert second == f"{path}: imported: prompt helper"
    assert third == f"{path}: imported: nothing changed"
    assert _description(tenant) == "Helps more"


def test_a_bundle_with_errors_is_reported_and_the_definitions_stay(tmp_path: Path) -> None:
    tenant = make_tenant()
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(_bundle("Helps")))
    bundle_reimport(tenant=tenant, path=path)
    path.write_text(json.dumps(_bundle("Broken", model="no_such_model")))
    said = bundle_reimport(tenant=tenant, path=path)

    assert said.startswith(f"{path}: not imported, the previous definitions stay: prompts[0].model")
    assert "no_such_model" in said
    assert _description(tenant) == "Helps"


def test_an_unreadable_or_unparsable_file_is_reported_without_raising(tmp_path: Path) -> None:
    tenant = make_tenant()
    missing = tmp_path / "missing.yaml"
    broken = tmp_path / "broken.yaml"
    broken.write_text("prompts: [\n")

    assert bundle_reimport(tenant=tenant, path=missing) == (
        f"{missing}: not imported: cannot read it (No such file or directory)"
    )
    assert bundle_reimport(tenant=tenant, path=broken).startswith(
        f"{broken}: not imported, the previous definitions stay: "
    )


def test_the_command_imports_once_into_the_named_tenant(tmp_path: Path) -> None:
    tenant = make_tenant()
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(_bundle("Helps")))
    out = StringIO()
    call_command("dev_bundle", str(path), "--tenant", tenant.slug, "--once", stdout=out)

    assert out.getvalue().rstrip().endswith(f"{path}: imported: model fast, prompt helper")
    assert _description(tenant) == "Helps"
