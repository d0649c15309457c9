"""docs/tutorial.md, "your first agent", followed as a reader would against a real uvicorn
server and a real Celery worker.

Every code block of the page is marked ``<!-- tested: <name> -->``. The files it has the reader
write (the tool's package, the bundle, the client script) are written where their first line
says; the package is built and installed by the page's own install command, into a directory of
its own rather than the platform's environment, and that directory is on the live processes'
``PYTHONPATH`` only (as ``tests/agents/test_extensions.py`` does). The shell blocks then run in
order in one bash, unchanged but for the key, the port and the interpreter, and what each prints
is compared with the page's ``text`` block after it. The schedule's run is fired as beat would
fire it, and the closing real-model block is imported as a dry run.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from config import env
from tenancy.models import Role, Tenant
from tests.factories import make_api_key, make_tenant
from tests.live import Live, live_platform, working_for
from threads.models import Message, Schedule, Turn
from threads.runtime.schedules import schedules_fire

PAGE = Path(env.REPO_DIR) / "docs" / "tutorial.md"
README = Path(env.REPO_DIR) / "README.md"
MARKED = re.compile(
    r"^<!-- tested: ([a-z0-9-]+) -->\n```([a-z]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL
)
FENCE = re.compile(r"^```", re.MULTILINE)
# Every block of the page, in its order, with its language.
CHECKED: dict[str, str] = {
    "variables": "sh", "package-folders": "sh", "pyproject": "toml", "tools-module": "python",
    "install": "sh", "registry": "sh", "registry-output": "text", "bundle": "yaml",
    "import": "sh", "import-output": "text", "first-turn": "sh", "first-turn-output": "text",
    "client": "python", "client-run": "sh", "client-output": "text", "approval-rule": "sh",
    "approval-rule-output": "text",
    "long-trip": "sh", "long-trip-output": "text", "approve": "sh", "approve-output": "text",
    "schedule": "sh", "schedule-output": "text", "real-model": "yaml",
}  # fmt: skip
# Run once, before the platform starts (the reader restarts it after them).
SETUP = ("package-folders", "install")
INSTALL = ".venv/bin/uv pip install --python .venv/bin/python"
RUN_TIMEOUT_S = 240.0
TURN_TIMEOUT_S = 60.0
# ``printf`` between two blocks, so the output splits into what each block printed.
BETWEEN = "@@ block "


@dataclass(frozen=True)
class Block:
    name: str
    language: str
    text: str

    @property
    def path(self) -> str:
        """Where a file block goes: its first line, ``# <path>``."""
        first = self.text.splitlines()[0]
        assert first.startswith("# "), f"{self.name}: the first line does not name the file"
        return first.removeprefix("# ")


def blocks() -> dict[str, Block]:
    found: dict[str, Block] = {}
    for name, language, text in MARKED.findall(PAGE.read_text()):
        assert name not in found, f"two blocks are marked {name!r}"
        found[name] = Block(name, language, text)
    return found


def run(script: str, cwd: Path, environment: Mapping[str, str] | None = None) -> str:
    assert shutil.which("curl"), "the tutorial uses curl"
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=cwd,
        env=env.child_environment(environment or {}),
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def write_file(block: Block, root: Path) -> None:
    target = root / block.path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(block.text)


# The reader's package, the platform, the reader --------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page's package, made and installed by its own commands into a directory of its
    own (offline, with uv's own build backend) instead of the platform's environment."""
    page, root = blocks(), tmp_path_factory.mktemp("reader-package")
    target = root / "site"
    run(page["package-folders"].text, root)
    write_file(page["pyproject"], root)
    write_file(page["tools-module"], root)
    install = page["install"].text
    assert INSTALL in install, install
    here = f"{sys.executable} -m uv pip install --python {sys.executable}"
    run(install.replace(INSTALL, f"{here} --target {target} --offline --no-cache"), root)
    assert (target / "trip_tools" / "tools.py").read_text() == page["tools-module"].text
    return target


@pytest.fixture(scope="module")
def live(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory, site: Path
) -> Iterator[Live]:
    directory = tmp_path_factory.mktemp("tutorial-live")
    environment = {
        "PYTHONPATH": str(site), "MEDIA_ROOT": str(directory / "media"),
        # The operator's OpenAI credential, granted, for the page's real-model bundle (it is
        # only imported as a dry run: nothing calls OpenAI).
        "OPENAI_API_KEY": "sk-tutorial-never-called", "PLATFORM_CREDENTIALS_GRANTED": "true",
    }  # fmt: skip
    with live_platform(directory, environment) as running:
        yield running


@dataclass
class Reader:
    """A tenant with an admin key (as the demo tenant's key is), and a folder to work in."""

    live: Live
    tenant: Tenant
    key: str
    folder: Path

    def follow(self, until: str) -> dict[str, str]:
        """The page's shell blocks in order, up to and including ``until``, in one bash (so
        their variables carry over, as in the reader's terminal): what each printed."""
        page = blocks()
        for name in ("bundle", "client"):
            write_file(page[name], self.folder)
        shell = [block for block in page.values() if block.language == "sh"]
        shell = [block for block in shell if block.name not in SETUP]
        names = [block.name for block in shell]
        assert until in names, until
        chosen = shell[: names.index(until) + 1]
        script = "".join(f"printf '\\n{BETWEEN}%s\\n' {b.name}\n{b.text}" for b in chosen)
        printed = run(self.filled(script), self.folder)
        parts = re.split(rf"\n{BETWEEN}([a-z0-9-]+)\n", "\n" + printed)
        return {name: output.strip() for name, output in zip(parts[1::2], parts[2::2], strict=True)}

    def filled(self, script: str) -> str:
        variables = "KEY=sap_…; API=http://127.0.0.1:${PORT:-8000}/api/v1"
        assert variables in script, "the page's variables block changed"
        return (
            script.replace("sap_…", self.key)
            .replace("${PORT:-8000}", str(self.live.port))
            .replace(".venv/bin/python", sys.executable)
        )

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        answer = httpx.request(
            method, f"{self.live.base_url}/api/v1{path}", timeout=TURN_TIMEOUT_S + 10,
            headers={"Authorization": f"Bearer {self.key}"}, **kwargs,
        )  # fmt: skip
        assert answer.is_success, f"{method} {path}: {answer.status_code} {answer.text}"
        return answer.json()


@pytest.fixture
def reader(live: Live, transactional_db: None, tmp_path: Path) -> Iterator[Reader]:
    tenant = make_tenant(f"trip-{uuid.uuid4().hex[:8]}")
    key = make_api_key(tenant, role=Role.ADMIN, name="tutorial").secret
    with working_for(live, tenant):
        yield Reader(live, tenant, key, tmp_path)


def shown(name: str) -> str:
    """The output the page shows for a block."""
    return blocks()[f"{name}-output"].text.strip()


def called_arguments(thread_id: str) -> list[dict[str, Any]]:
    """The arguments of every tool call the thread's model made, as stored."""
    found = []
    for message in Message.objects.filter(thread_id=thread_id).order_by("created_at"):
        for call in message.tool_calls or ():
            arguments = call["function"]["arguments"]
            found.append(json.loads(arguments) if isinstance(arguments, str) else arguments)
    return found


# The page ------------------------------------------------------------------------------------


def test_every_code_block_of_the_tutorial_is_marked_and_checked() -> None:
    text = PAGE.read_text()
    marked = {name: block.language for name, block in blocks().items()}

    assert len(FENCE.findall(text)) // 2 == len(marked), "a code block has no tested mark"
    assert marked == CHECKED
    assert list(marked) == list(CHECKED), "the blocks are checked in the page's order"


def test_the_readme_lists_the_tutorial_among_the_docs() -> None:
    assert "[your first agent](docs/tutorial.md)" in README.read_text()


def test_the_installed_package_lists_its_tool_with_its_source(reader: Reader) -> None:
    printed = reader.follow(until="registry")

    assert printed["registry"] == shown("registry")


def test_the_bundle_imports_without_errors_or_warnings(reader: Reader) -> None:
    printed = reader.follow(until="import")

    assert printed["import"] == shown("import")
    prompt = reader.api("GET", "/prompts/trip_helper")
    assert (prompt["include_chat"], prompt["tools"]) == (True, ["packing_list"])


def test_the_first_turn_calls_the_tool_with_the_number_of_days_as_a_number(
    reader: Reader,
) -> None:
    printed = reader.follow(until="first-turn")

    assert printed["first-turn"] == shown("first-turn")
    (thread,) = reader.api("GET", "/threads")["results"]
    assert called_arguments(thread["id"]) == [{"days": 3}]
    assert type(called_arguments(thread["id"])[0]["days"]) is int


def test_the_python_client_asks_the_same_agent(reader: Reader) -> None:
    printed = reader.follow(until="client-run")

    assert printed["client-run"] == shown("client")
    assert len(reader.api("GET", "/threads")["results"]) == 2


def test_the_console_the_page_points_to_answers_with_its_login(reader: Reader) -> None:
    (url,) = set(re.findall(r"`(http://127\.0\.0\.1:8000/console/)`", PAGE.read_text()))
    here = url.replace("8000", str(reader.live.port))

    answer = httpx.get(here, follow_redirects=False, timeout=30)

    assert answer.status_code == 302
    assert answer.headers["location"].startswith("/console/login/")


def test_the_approval_rule_pauses_a_long_trip_until_it_is_approved(reader: Reader) -> None:
    printed = reader.follow(until="approve")

    assert printed["first-turn"] == shown("first-turn"), "three days are not asked about"
    assert printed["approval-rule"] == shown("approval-rule")
    assert printed["long-trip"] == shown("long-trip")
    assert printed["approve"] == shown("approve")
    (rule,) = reader.api("GET", "/permission-rules")["results"]
    assert rule["when"] == {">": [{"var": "days"}, 14]}
    threads = reader.api("GET", "/threads")["results"]
    actions = [
        action
        for thread in threads
        for action in reader.api("GET", f"/threads/{thread['id']}/actions")["results"]
    ]
    assert [(a["status"], a["name"], a["arguments"]) for a in actions] == [
        ("approved", "packing_list", {"days": 21})
    ]


def test_the_schedule_runs_a_turn_on_a_new_thread_of_the_agent(reader: Reader) -> None:
    printed = reader.follow(until="schedule")
    assert printed["schedule"] == shown("schedule")
    (schedule,) = Schedule.objects.filter(tenant=reader.tenant)

    assert schedules_fire(now=schedule.next_run_at) == 1  # as beat does when it is due

    schedule.refresh_from_db()
    assert schedule.last_run is not None
    turn_id = schedule.last_run["turn_id"]
    waited = reader.api("GET", f"/turns/{turn_id}/wait?timeout={TURN_TIMEOUT_S:.0f}")
    assert (waited["done"], waited["turn"]["status"]) == (True, "completed")
    assert waited["messages"][0]["content"] == "What should I pack for 2 days?"
    assert waited["messages"][-1]["content"] == (
        "Pack this: shirts 2, socks 2, jumpers 1, toothbrush 1."
    )
    assert Turn.objects.get(pk=turn_id).source == "schedule"


def test_the_real_model_fits_the_bundle_in_place_of_the_scripted_one(reader: Reader) -> None:
    page = blocks()
    bundle = yaml.safe_load(page["bundle"].text)
    bundle["models"] = yaml.safe_load(page["real-model"].text)["models"]

    report = reader.api("POST", "/bundles?dry_run=1", json=bundle)

    assert (report["errors"], report["warnings"]) == ([], [])
    assert report["updated"] or report["created"]
