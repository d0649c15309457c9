"""``manage.py prepare``, ``make run``'s one management process: migrate when needed, then
seed the demo tenant and its agents; a second run migrates nothing and changes nothing. Its
agents line (the banner's) names every agent the seed creates and says created, not changed,
on a first run."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from pytest_django.fixtures import Settings

from agents.demo.bundle import demo_bundle
from agents.management.commands.prepare import pending_migrations
from agents.models import Agent
from tenancy.models import Tenant

pytestmark = pytest.mark.django_db(transaction=True)

AGENTS_LINE = (
    "Demo agents: assistant, coordinator, writing_pair; "
    "model: scripted (no provider key configured); "
)


def _prepare(settings: Settings, var: Path) -> list[dict[str, Any]]:
    settings.VAR_DIR = var
    settings.PLATFORM_PROVIDER_CREDENTIALS_SECRETS = {}
    out = StringIO()
    call_command("prepare", "--json", stdout=out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_second_prepare_migrates_nothing_and_changes_nothing(
    settings: Settings, tmp_path: Path
) -> None:
    first = _prepare(settings, tmp_path)
    second = _prepare(settings, tmp_path)

    assert first[0] == {"migrated": []}  # the test database is migrated
    assert first[1]["agents"] == AGENTS_LINE + "9 created"
    assert second == [{"migrated": []}, {**first[1], "agents": AGENTS_LINE + "0 changed"}]
    assert set(first[1]["credentials"]) == {"tenant", "admin_user", "admin_password", "api_key"}
    assert json.loads((tmp_path / "demo.json").read_text()) == first[1]["credentials"]


def test_the_agents_line_names_every_agent_the_seed_creates(
    settings: Settings, tmp_path: Path
) -> None:
    seeded = _prepare(settings, tmp_path)[1]

    names = sorted(entry["name"] for entry in demo_bundle({}, model_ids={})["agents"])
    demo = Tenant.objects.get(slug="demo")
    stored = sorted(Agent.objects.for_tenant(demo).values_list("name", flat=True))
    assert stored == names == ["assistant", "coordinator", "writing_pair"]
    assert seeded["agents"].startswith(f"Demo agents: {', '.join(names)}; ")


def test_an_edited_demo_agent_is_one_changed_after_a_reset(
    settings: Settings, tmp_path: Path
) -> None:
    _prepare(settings, tmp_path)
    demo = Tenant.objects.get(slug="demo")
    Agent.objects.for_tenant(demo).filter(name="coordinator").update(description="Mine.")
    out = StringIO()
    call_command("seed_demo_agents", "--reset", stdout=out)

    assert out.getvalue() == AGENTS_LINE + "1 changed\n"


def test_pending_migrations_are_none_on_a_migrated_database() -> None:
    assert pending_migrations() == []
