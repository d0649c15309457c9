"""The client's quickstart, as the READMEs and docs/client.md show it, run unchanged against
a live server and worker with the demo agents as ``make run`` seeds them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.core.management import call_command
from pytest_django.fixtures import Settings

from config import env
from tests.client.conftest import LiveApi

README = Path(env.REPO_DIR) / "clients" / "python" / "README.md"
PLATFORM_README = Path(env.REPO_DIR) / "README.md"
GUIDE = Path(env.REPO_DIR) / "docs" / "client.md"


def _first_python_block(path: Path) -> str:
    found = re.search(r"```python\n(.*?)```", path.read_text(), flags=re.DOTALL)
    assert found, f"{path.name} has no python block"
    return found.group(1)


def test_the_quickstart_asks_the_demo_assistant_and_prints_its_answer(
    live_api: LiveApi,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings.AGENT_PLATFORM_ENV_SECRETS = {}  # the scripted demo model, as without keys
    call_command("seed_demo_agents", tenant=live_api.tenant_slug)
    quickstart = _first_python_block(README)
    assert _first_python_block(GUIDE) == quickstart
    assert _first_python_block(PLATFORM_README) == quickstart
    assert len([line for line in quickstart.splitlines() if line]) == 5
    monkeypatch.setenv("AGENTS_API_URL", live_api.base_url)
    monkeypatch.setenv("AGENTS_API_KEY", live_api.api_key)
    capsys.readouterr()

    exec(compile(quickstart, str(README), "exec"), {})  # noqa: S102 (the documented code)

    printed = capsys.readouterr().out
    assert printed.startswith("It is ")
    assert "(scripted demo model)" in printed
