"""Extensions: registry entries from installed packages, with no change to the settings.

The example package (``examples/weather_tools``) is built and installed into a directory of
its own, which only the live server and worker have on their path: its tool is listed with its
source and called in a turn there, while this process (and its environment) never sees it.
Discovery itself is tested in-process against small distributions written into a temporary
directory on ``sys.path``.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from agents.registry import (
    ENTRY_POINT_GROUP,
    Registry,
    Source,
    SourceKind,
    autodiscover,
    registry,
    use_registry,
)
from agents.registry.extensions import extension_apps
from config import env
from tests.factories import make_api_key, make_tenant
from tests.live import Live, live_platform, working_for
from tests.reliability.platform import chat_bundle

EXAMPLE = env.REPO_DIR / "examples" / "weather_tools"
DEMO_APP = "tests.agents.registry.demo_app"
TIMEOUT_S = 30.0
TOOL_MODULE = """
from agents.registry import tool, thread_endpoint

@tool(description="Say hello.")
def {tool}(state):
    return "hello"

@thread_endpoint("{tool}")
def {tool}_page(request, state, params):
    return {{}}
"""


# The example package on a live platform ------------------------------------------------------


def _run(*args: str) -> None:
    """``python -m uv <args>``, offline and without a cache: the build uses uv's own backend,
    so nothing is downloaded and nothing outside the test's directories is written."""
    completed = subprocess.run(
        [sys.executable, "-m", "uv", *args, "--offline", "--no-cache"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr


@pytest.fixture(scope="module")
def weather_tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example package built into a wheel and installed into a directory of its own."""
    root = tmp_path_factory.mktemp("weather-tools")
    _run("build", "--wheel", "--out-dir", str(root / "dist"), str(EXAMPLE))
    (wheel,) = (root / "dist").glob("weather_tools-*.whl")
    target = root / "site"
    _run("pip", "install", "--no-deps", "--python", sys.executable, "--target", str(target),
         str(wheel))  # fmt: skip
    return target


@pytest.fixture(scope="module")
def live(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory, weather_tools: Path
) -> Iterator[Live]:
    directory = tmp_path_factory.mktemp("extensions-live")
    environment = {"PYTHONPATH": str(weather_tools), "MEDIA_ROOT": str(directory / "media")}
    with live_platform(directory, environment) as running:
        yield running


@dataclass
class Api:
    http: httpx.Client

    def call(self, method: str, path: str, body: Any = None, status: int = 200) -> Any:
        response = self.http.request(method, f"/api/v1{path}", json=body)
        assert response.status_code == status, response.text
        return response.json()


@pytest.fixture
def api(live: Live, transactional_db: None) -> Iterator[Api]:
    tenant = make_tenant(f"ext-{uuid.uuid4().hex[:8]}")
    key = make_api_key(tenant).secret
    headers = {"Authorization": f"Bearer {key}"}
    with (
        working_for(live, tenant),
        httpx.Client(base_url=live.base_url, headers=headers, timeout=TIMEOUT_S + 10) as http,
    ):
        yield Api(http)


def test_the_installed_example_package_lists_its_tool_with_its_source(api: Api) -> None:
    tools = api.call("GET", "/registry/tools?limit=100")["results"]

    forecast = next(tool for tool in tools if tool["name"] == "forecast")
    assert forecast["source"] == {"kind": "package", "name": "weather-tools", "version": "0.1.0"}
    assert forecast["description"] == "The weather forecast for a city, day by day."
    assert forecast["args_schema"]["properties"]["days"]["type"] == "integer"
    assert forecast["args_schema"]["required"] == ["city", "days"]
    count_words = next(tool for tool in tools if tool["name"] == "count_words")
    assert count_words["source"] == {"kind": "app", "name": "agents.demo", "version": None}
    # Installed for the live processes only: this process and its settings never saw it.
    assert importlib.util.find_spec("weather_tools") is None
    assert "forecast" not in registry.tools
    assert "weather_tools" not in settings.INSTALLED_APPS


def test_a_turn_on_the_live_platform_calls_the_example_packages_tool(api: Api) -> None:
    rules: list[dict[str, Any]] = [
        {"when": {"last_role": "tool"}, "respond": {"text": "Done: {last_tool_result}"}},
        {"respond": {"tool_calls": [
            {"name": "forecast", "arguments": {"city": "Oslo", "days": 3}},
        ]}},
    ]  # fmt: skip
    api.call("POST", "/bundles", chat_bundle(rules, tools=["forecast"]))
    thread = api.call("POST", "/threads", {"agent": "chat"}, status=201)

    waited = api.call(
        "POST", f"/threads/{thread['id']}/turns/wait?timeout={TIMEOUT_S:.0f}",
        {"input": {"content": "What will the weather be?"}},
    )  # fmt: skip

    assert waited["done"] is True
    assert waited["turn"]["status"] == "completed"
    written = [(m["role"], m.get("name"), m["content"]) for m in waited["messages"]]
    assert ("tool", "forecast", "Oslo, next 3 days: sunny, cloudy, rain") in written
    assert written[-1] == ("assistant", None, "Done: Oslo, next 3 days: sunny, cloudy, rain")


# Discovery ------------------------------------------------------------------------------------


@dataclass
class Site:
    """A directory on ``sys.path`` to write distributions and modules into."""

    root: Path

    def module(self, source: str) -> str:
        """A new module holding ``source`` ({tool} replaced by a tool name); its name."""
        name = f"ext_{uuid.uuid4().hex[:10]}"
        (self.root / f"{name}.py").write_text(source.format(tool=f"{name}_hello"))
        return name

    def distribution(self, name: str, entry_points: dict[str, str]) -> None:
        """An installed distribution ``name`` 1.0 declaring ``entry_points`` in the group."""
        info = self.root / f"{name.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        points = "".join(f"{key} = {value}\n" for key, value in entry_points.items())
        (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{points}")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield Site(tmp_path)
    for name in set(sys.modules) - before:
        if name.startswith("ext_"):
            del sys.modules[name]


def test_an_entry_point_module_registers_its_tools_attributed_to_its_distribution(
    site: Site,
) -> None:
    module = site.module(TOOL_MODULE)
    site.distribution("hello-tools", {"hello": module})
    target = Registry()

    found = autodiscover(into=target)

    assert module in found
    entry = target.tools[f"{module}_hello"]
    assert entry.module == module
    assert target.source_of(entry) == Source(SourceKind.PACKAGE, "hello-tools", "1.0")
    (endpoint,) = [e for e in target.endpoints if e.route == f"{module}_hello"]
    assert target.source_of(endpoint) == Source(SourceKind.PACKAGE, "hello-tools", "1.0")
    assert target.source_of(target.tools["count_words"]) == Source(SourceKind.APP, "agents.demo")
    assert f"{module}_hello" not in registry.tools


def test_platform_apps_names_a_module_whose_tools_join_the_registry(site: Site) -> None:
    module = site.module(TOOL_MODULE)
    target = Registry()

    with override_settings(PLATFORM_APPS=[module]):
        autodiscover(into=target)

    entry = target.tools[f"{module}_hello"]
    assert target.source_of(entry) == Source(SourceKind.SETTING, module)


def test_platform_apps_naming_an_installed_app_attributes_its_agent_tools_to_the_setting() -> None:
    with (
        use_registry() as target,
        override_settings(
            INSTALLED_APPS=[*settings.INSTALLED_APPS, DEMO_APP], PLATFORM_APPS=[DEMO_APP]
        ),
    ):
        autodiscover(into=target)

    entry = target.tools["demo_send_invoice"]
    assert target.source_of(entry) == Source(SourceKind.SETTING, DEMO_APP)


def test_only_extensions_that_are_django_apps_are_added_to_installed_apps(site: Site) -> None:
    module = site.module(TOOL_MODULE)

    assert extension_apps([DEMO_APP, module, "tests.agents"]) == [DEMO_APP]


def test_a_broken_extension_is_one_error_naming_its_distribution_and_cause(site: Site) -> None:
    module = site.module("import requests_that_are_not_installed\n")
    site.distribution("broken-tools", {"broken": module})

    with pytest.raises(ImproperlyConfigured) as raised:
        autodiscover(into=Registry())

    assert str(raised.value) == (
        f"extension {module!r} (entry point 'broken' of broken-tools 1.0) failed to load: "
        "ModuleNotFoundError: No module named 'requests_that_are_not_installed' "
        f"(at {site.root / module}.py:1)"
    )


def test_an_extension_clashing_with_a_built_in_tool_names_the_extension(site: Site) -> None:
    module = site.module(TOOL_MODULE.replace("def {tool}", "def count_words"))

    with override_settings(PLATFORM_APPS=[module]), pytest.raises(ImproperlyConfigured) as raised:
        autodiscover(into=Registry())

    assert str(raised.value) == (
        f"extension {module!r} (named in PLATFORM_APPS) failed to load: RegistryError: "
        f"Tool 'count_words' defined at {module}.count_words is already registered by "
        f"agents.demo.agent_tools.count_words (at {site.root / module}.py:4)"
    )


def test_platform_apps_naming_a_missing_module_is_one_error() -> None:
    with (
        override_settings(PLATFORM_APPS=["ext_nowhere"]),
        pytest.raises(ImproperlyConfigured) as raised,
    ):
        autodiscover(into=Registry())

    assert str(raised.value) == (
        "extension 'ext_nowhere' (named in PLATFORM_APPS) failed to load: "
        "ModuleNotFoundError: No module named 'ext_nowhere'"
    )


def test_an_entry_point_naming_an_object_is_refused(site: Site) -> None:
    module = site.module(TOOL_MODULE)
    site.distribution("object-tools", {"hello": f"{module}:{module}_hello"})

    with pytest.raises(ImproperlyConfigured) as raised:
        autodiscover(into=Registry())

    assert str(raised.value) == (
        f"extension {module!r} (entry point 'hello' of object-tools 1.0) is declared wrongly: "
        f"the entry point names '{module}:{module}_hello'; it must name a module, not an object"
    )


def test_a_broken_extension_stops_start_up_with_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "ext_broken_at_start.py").write_text("raise RuntimeError('no API key set')\n")
    site = Site(tmp_path)
    site.distribution("broken-at-start", {"start": "ext_broken_at_start"})

    completed = subprocess.run(
        [sys.executable, str(env.REPO_DIR / "manage.py"), "check"],
        env=env.child_environment({"PYTHONPATH": str(tmp_path)}),
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip

    assert completed.returncode == 1
    assert completed.stderr.strip().splitlines()[-1] == (
        "django.core.exceptions.ImproperlyConfigured: extension 'ext_broken_at_start' "
        "(entry point 'start' of broken-at-start 1.0) failed to load: RuntimeError: "
        f"no API key set (at {tmp_path}/ext_broken_at_start.py:1)"
    )
