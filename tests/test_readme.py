"""The README's quickstart, run as a new user would: its shell commands, unchanged but for the
key and the port, against a real uvicorn server and a real Celery worker, with the demo
tenant's agents as ``make run`` seeds them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command
from pytest_django.fixtures import Settings

from config import env
from config.launcher import background_server
from tests.factories import make_api_key, make_tenant
from tests.support import current_database_url
from tests.worker import celery_worker, private_queue

README = Path(env.REPO_DIR) / "README.md"
QUICKSTART_MARK = "Talk to the assistant"
PLACEHOLDER = "KEY=sap_…; API=http://127.0.0.1:${PORT:-8000}/api/v1"


def quickstart() -> list[str]:
    """The quickstart's two ``sh`` blocks: a turn submitted then waited for, and one
    submitted and waited for in one request (it reuses the first block's variables)."""
    text = README.read_text()
    after = text[text.index(QUICKSTART_MARK) :]
    found = re.findall(r"```sh\n(.*?)```", after, flags=re.DOTALL)[:2]
    assert len(found) == 2, "the README's quickstart has not its two sh blocks"
    return found


@pytest.fixture
def served(transactional_db: None, tmp_path: Path) -> Iterator[int]:
    """A worker and a web server sharing a private queue; yields the server's port."""
    queue = private_queue()
    with (
        celery_worker(
            queue=queue, database_url=current_database_url(), log_path=tmp_path / "worker.log"
        ),
        background_server({"DATABASE_URL": current_database_url(), "CELERY_QUEUE": queue}) as (
            port,
            _,
        ),
    ):
        yield port


@pytest.mark.django_db(transaction=True)
def test_the_readme_quickstart_submits_a_turn_and_waits_for_its_answer(
    served: int, settings: Settings
) -> None:
    assert shutil.which("curl"), "the quickstart uses curl"
    demo = make_tenant("demo")
    settings.AGENT_PLATFORM_ENV_SECRETS = {}  # the scripted demo model, as without keys
    call_command("seed_demo_agents")
    key = make_api_key(demo, name="readme").secret
    first, second = quickstart()
    assert PLACEHOLDER in first
    first = first.replace(PLACEHOLDER, f"KEY={key}; API=http://127.0.0.1:{served}/api/v1")
    script = f"{first}echo\n{second}"  # each answer on a line of its own

    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    answer, again = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    assert (again["done"], again["turn"]["status"]) == (True, "completed")
    assert again["messages"][0]["content"] == "And the date?"
    assert again["messages"][-1]["role"] == "assistant"
    assert again["messages"][-1]["content"].startswith("It is ")  # the date, not the fallback
    assert answer["done"] is True
    assert answer["turn"]["status"] == "completed"
    roles = [message["role"] for message in answer["messages"]]
    assert roles[0] == "user"
    assert answer["messages"][0]["content"] == "What time is it?"
    final = answer["messages"][-1]
    assert final["role"] == "assistant"
    assert final["content"].startswith("It is ")
    assert final["content"].endswith("(scripted demo model)")
