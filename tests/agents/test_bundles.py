"""Bundles: round trip, atomic import, every error with its path, dry runs, replace, keys."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from io import BytesIO, StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from agents.bundles import (
    MAX_BUNDLE_BYTES,
    bundle_dump,
    bundle_export,
    bundle_import,
    bundle_parse,
)
from agents.models import DEFINITION_MODELS, Model, Prompt
from agents.services import DefinitionInvalid
from agents.validation import KINDS
from common.errors import LimitExceeded
from config import env
from tenancy.models import Role, Tenant
from tests.agents.samples import rich_bundle, seed_rich
from tests.answers import assert_answers
from tests.factories import make_tenant
from tests.support import current_database_url

pytestmark = pytest.mark.django_db


def test_round_trip_through_a_fresh_tenant_is_identical(tenant: Tenant) -> None:
    seed_rich(tenant)
    first = bundle_export(tenant=tenant)

    fresh = make_tenant()
    bundle_import(tenant=fresh, document=yaml.safe_load(bundle_dump(first, "yaml")))
    second = bundle_export(tenant=fresh)

    assert second == first
    assert bundle_dump(second, "yaml") == bundle_dump(first, "yaml")
    assert bundle_dump(second, "json") == bundle_dump(first, "json")
    assert [m["name"] for m in first["models"]] == ["fast", "smart"]
    assert first["prompts"][0]["tools"][1] == {
        "name": "summarize",
        "include_errors": False,
        "init_user_message_property": "text",
    }


def test_reimporting_the_export_changes_nothing(tenant: Tenant) -> None:
    seed_rich(tenant)

    report = bundle_import(tenant=tenant, document=bundle_export(tenant=tenant))

    assert report.created == report.updated == report.deleted == []
    assert len(report.unchanged) == 12


def test_invalid_bundle_reports_every_error_with_its_path_and_changes_nothing(
    tenant: Tenant,
) -> None:
    seed_rich(tenant)
    before = bundle_export(tenant=tenant)
    bundle = rich_bundle()
    bundle["prompts"][0]["model"] = "Not Snake"
    bundle["prompts"][2]["tools"] = [{"name": "x", "blockingg": True}]
    bundle["agents"].append(bundle["agents"][0])
    bundle["colour"] = "blue"

    with pytest.raises(DefinitionInvalid) as raised:
        bundle_import(tenant=tenant, document=bundle)

    paths = {item["path"] for item in raised.value.details}
    assert paths == {
        "colour",
        "prompts[0].model",
        "prompts[2].tools[0].blockingg",
        "agents[2].name",
    }
    assert bundle_export(tenant=tenant) == before


def test_reference_errors_carry_document_paths(tenant: Tenant) -> None:
    bundle = rich_bundle()
    bundle["prompts"][0]["tools"].append("no_such_tool")
    bundle["agents"][1]["side_b"] = None
    bundle["models"][1]["fallbacks"] = ["fast", "missing"]

    with pytest.raises(DefinitionInvalid) as raised:
        bundle_import(tenant=tenant, document=bundle)

    errors = {item["path"]: item["message"] for item in raised.value.details}
    assert errors == {
        "prompts[0].tools[4]": "unknown tool 'no_such_tool' (not a code tool, prompt, agent or "
        "registry tool)",
        "agents[1].side_b": "a dual_ai agent needs side_b",
        "models[1].fallbacks[1]": "unknown model 'missing'",
    }
    assert not Model.objects.for_tenant(tenant).exists()


def test_dry_run_reports_and_writes_nothing(tenant: Tenant) -> None:
    report = bundle_import(tenant=tenant, document=rich_bundle(), dry_run=True)

    assert report.dry_run is True
    assert "prompt assistant" in report.created
    assert len(report.created) == 12
    assert not Prompt.objects.for_tenant(tenant).exists()


def test_update_and_replace(tenant: Tenant) -> None:
    seed_rich(tenant)
    bundle = rich_bundle()
    bundle["prompts"][1]["prompt"] = "Be very brief."
    bundle["agents"] = [bundle["agents"][0]]
    bundle["prompts"][0]["tools"] = [
        t for t in bundle["prompts"][0]["tools"] if t != bundle["prompts"][0]["tools"][2]
    ]

    kept = bundle_import(tenant=tenant, document=bundle)
    replaced = bundle_import(tenant=tenant, document=bundle, replace=True)

    assert kept.updated == ["prompt assistant", "prompt house_rules"]
    assert replaced.deleted == ["agent debate"]
    assert Prompt.objects.for_tenant(tenant).get(name="house_rules").prompt == [
        {"type": "text", "content": "Be very brief."}
    ]


def test_replace_refuses_to_strand_a_reference(tenant: Tenant) -> None:
    seed_rich(tenant)
    bundle = rich_bundle()
    bundle["models"] = [m for m in bundle["models"] if m["name"] != "fast"]

    with pytest.raises(DefinitionInvalid) as raised:
        bundle_import(tenant=tenant, document=bundle, replace=True)

    assert "prompts[1].model" in {item["path"] for item in raised.value.details}
    assert Model.objects.for_tenant(tenant).filter(name="fast").exists()


def test_api_key_in_a_bundle_is_stored_encrypted_and_never_exported(tenant: Tenant) -> None:
    bundle = rich_bundle()
    bundle["models"][1]["api_key"] = "sk-bundle-secret"

    bundle_import(tenant=tenant, document=bundle)

    row = Model.objects.for_tenant(tenant).get(name="smart")
    assert row.has_api_key
    assert row.api_key_encrypted is not None
    assert b"sk-bundle-secret" not in bytes(row.api_key_encrypted)
    assert "sk-bundle-secret" not in json.dumps(bundle_export(tenant=tenant))


def test_oversized_bundle_is_refused_naming_the_limit(
    tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    body = b"#" * (MAX_BUNDLE_BYTES + 1)

    response = client_for(tenant, Role.MEMBER).post(
        "/api/v1/bundles", body, content_type="application/yaml"
    )

    assert response.status_code == 413
    assert str(MAX_BUNDLE_BYTES) in response.json()["error"]["message"]
    with pytest.raises(LimitExceeded):
        bundle_parse(body)


def test_api_imports_yaml_and_json_and_exports(
    tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    client = client_for(tenant, Role.MEMBER)

    dry = client.post(
        "/api/v1/bundles?dry_run=1", bundle_dump(rich_bundle(), "yaml"),
        content_type="application/yaml",
    )  # fmt: skip
    applied = client.post("/api/v1/bundles", rich_bundle(), format="json")
    exported_json = client.get("/api/v1/bundles")
    exported_yaml = client.get("/api/v1/bundles?format=yaml")

    assert dry.status_code == 200
    assert dry.json()["dry_run"] is True
    assert len(dry.json()["created"]) == 12
    assert applied.status_code == 200
    assert len(applied.json()["created"]) == 12
    assert exported_json.json() == bundle_export(tenant=tenant)
    assert exported_yaml["Content-Type"] == "application/yaml"
    assert yaml.safe_load(exported_yaml.content) == bundle_export(tenant=tenant)


def test_api_answers_are_what_their_components_document(
    tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    client = client_for(tenant, Role.MEMBER)
    bundle = rich_bundle()
    bundle["models"][1]["api_key"] = "sk-bundle-secret"
    assert_answers("BundleRequest", bundle)

    report = client.post("/api/v1/bundles?replace=1", bundle, format="json")
    exported = client.get("/api/v1/bundles")
    exported_yaml = client.get("/api/v1/bundles?format=yaml")

    assert_answers("BundleReport", report.json())
    assert_answers("Bundle", exported.json())
    assert_answers("Bundle", yaml.safe_load(exported_yaml.content))


def test_an_import_writes_no_definition_updated_before_it_was_created(
    tenant: Tenant, member: APIClient
) -> None:
    bundle = rich_bundle()
    member.post("/api/v1/bundles", bundle, format="json")
    bundle["prompts"][1]["prompt"] = "Be very brief."
    member.post("/api/v1/bundles", bundle, format="json")

    created = [row for kind in KINDS for row in DEFINITION_MODELS[kind].objects.for_tenant(tenant)]
    changed = Prompt.objects.for_tenant(tenant).get(name="house_rules")
    answered = member.get("/api/v1/prompts/house_rules").json()
    assert len(created) == 12
    assert all(row.updated_at == row.created_at for row in created if row != changed)
    assert changed.updated_at > changed.created_at
    assert answered["updated_at"] > answered["created_at"]


def test_api_reports_bundle_errors_as_400_with_paths(
    tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    bundle = rich_bundle()
    bundle["agents"][0]["side_a"]["prompt"] = "ghost"

    response = client_for(tenant, Role.MEMBER).post("/api/v1/bundles", bundle, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_definition"
    assert response.json()["error"]["details"] == [
        {"path": "agents[0].side_a.prompt", "message": "unknown prompt 'ghost'"}
    ]


def test_api_rejects_unparseable_bundles(
    tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    response = client_for(tenant, Role.MEMBER).post(
        "/api/v1/bundles", b"models: [unclosed", content_type="application/yaml"
    )

    assert response.status_code == 400
    assert "neither valid YAML nor JSON" in response.json()["error"]["message"]


def test_read_only_key_may_export_but_not_import(
    tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    reader = client_for(tenant, Role.READ_ONLY)

    assert reader.get("/api/v1/bundles").status_code == 200
    assert reader.post("/api/v1/bundles", rich_bundle(), format="json").status_code == 403


def test_commands_round_trip(tenant: Tenant, tmp_path: Path) -> None:
    source = tmp_path / "in.yaml"
    source.write_text(bundle_dump(rich_bundle(), "yaml"))
    out = StringIO()

    call_command("import_bundle", str(source), "--tenant", "acme", stdout=out)
    exported = StringIO()
    call_command("export_bundle", "--tenant", "acme", "--format", "json", stdout=exported)

    assert "12 were created" in out.getvalue()
    assert json.loads(exported.getvalue()) == bundle_export(tenant=tenant)


def test_import_command_reads_standard_input(tenant: Tenant) -> None:
    out = StringIO()

    call_command(
        "import_bundle", "-", "--tenant", "acme", "--dry-run", stdout=out,
        stdin=BytesIO(bundle_dump(rich_bundle(), "yaml").encode()),
    )  # fmt: skip

    assert "12 would be created" in out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_import_command_reads_a_pipe_from_the_shell(tenant: Tenant) -> None:
    piped = subprocess.run(
        [sys.executable, "manage.py", "import_bundle", "-", "--tenant", "acme", "--dry-run"],
        input=json.dumps(rich_bundle()).encode(), capture_output=True, cwd=env.REPO_DIR,
        env=env.child_environment({"DATABASE_URL": current_database_url()}), check=False,
    )  # fmt: skip

    assert piped.returncode == 0, piped.stderr.decode()
    assert b"12 would be created" in piped.stdout


def test_import_command_prints_every_error_and_fails(tenant: Tenant, tmp_path: Path) -> None:
    bundle = rich_bundle()
    bundle["prompts"][0]["model"] = "ghost"
    bundle["prompts"][1]["model"] = "ghost"
    source = tmp_path / "bad.json"
    source.write_text(json.dumps(bundle))
    err = StringIO()

    with pytest.raises(CommandError, match="2 error"):
        call_command("import_bundle", str(source), "--tenant", "acme", stderr=err)

    assert "prompts[0].model: unknown model 'ghost'" in err.getvalue()
    assert "prompts[1].model: unknown model 'ghost'" in err.getvalue()


def test_export_omits_unset_fields_but_keeps_nulls_inside_schemas(tenant: Tenant) -> None:
    bundle = rich_bundle()
    bundle["code_tools"][0]["args_schema"]["properties"]["text"]["default"] = None
    bundle_import(tenant=tenant, document=bundle)

    exported = bundle_export(tenant=tenant)

    fast = exported["models"][0]
    assert "base_url" not in fast
    assert "input_price" not in fast
    assert exported["code_tools"][0]["name"] == "concede"
    tally = next(t for t in exported["code_tools"] if t["name"] == "tally_words")
    assert tally["args_schema"]["properties"]["text"] == {"type": "string", "default": None}
