"""Fixtures of the console's tests: a tenant with scripted agents, members by role, and for
the browser tests a live platform (uvicorn and a Celery worker on a queue of its own,
started once for the session) driven by Debian's Chromium through Playwright.

Browser tests skip when ``/usr/bin/chromium`` is missing, unless ``BROWSER_TESTS=required``
(CI), when they fail. A failed browser test leaves a screenshot in ``var/test-artifacts/``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore
from django.test import Client

from agents.bundles import bundle_import
from config import env
from tenancy.models import Role, Tenant
from tests.factories import make_member, make_tenant
from tests.live import Live, live_platform, working_for

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip
ARTIFACTS = env.REPO_DIR / "var" / "test-artifacts"

# The scripted model's answers (docs/providers.md): "time" calls the current_time tool and
# then tells it, "slow" answers after a long while (a turn to stop), "stream" answers a long
# text in small pieces (seen arriving), anything else is echoed.
STREAMED = "Streaming answer: " + " ".join(f"word{n}" for n in range(40)) + " [end]"
RULES: list[dict[str, Any]] = [
    {"when": {"last_tool": "current_time"}, "respond": {"text": "It is {last_tool_result}."}},
    {"when": {"last_role": "user", "last_user_contains": "time"},
     "respond": {"tool_calls": [{"name": "current_time", "arguments": {"timezone": "UTC"}}]}},
    {"when": {"last_user_contains": "slow"}, "respond": {"text": "done slowly", "delay_ms": 20000}},
    {"when": {"last_user_contains": "stream"}, "respond": {"text": STREAMED}},
    {"respond": {"text": "You said: {last_user_message}"}},
]  # fmt: skip
CHAT = "chat"  # current_time runs freely
CAREFUL = "careful"  # current_time asks a person first
NEEDY = "needy"  # requires the variable REGION


def console_bundle() -> dict[str, Any]:
    return {
        "version": 1,
        "models": [{"name": "m", "provider": "scripted", "model_id": "scripted",
                    "config": {"rules": RULES,
                               "streaming": {"chunk_size": 6, "chunk_delay_ms": 40}}}],
        "prompts": [
            {"name": "p", "tool_description": "The chat prompt", "prompt": "You help.",
             "model": "m", "include_chat": True, "tools": ["current_time"]},
            {"name": "p_careful", "tool_description": "Asks first", "prompt": "You help.",
             "model": "m", "include_chat": True,
             "tools": [{"name": "current_time", "approval": {"decision": "ask"}}]},
            {"name": "p_needy", "tool_description": "Needs a region", "prompt": "You help.",
             "model": "m", "include_chat": True,
             "variables": [{"name": "REGION", "type": "text", "required": True}]},
        ],
        "agents": [
            {"name": CHAT, "side_a": {"prompt": "p"}},
            {"name": CAREFUL, "side_a": {"prompt": "p_careful"}},
            {"name": NEEDY, "side_a": {"prompt": "p_needy"}},
        ],
    }  # fmt: skip


def agents_for(tenant: Tenant) -> Tenant:
    report = bundle_import(tenant=tenant, document=console_bundle())
    assert report.errors == [], report.errors
    return tenant


def session_of(user: User) -> str:
    """A stored login session of ``user`` (its cookie value), as Django's login makes."""
    session = SessionStore()
    session["_auth_user_id"] = str(user.pk)
    session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
    session["_auth_user_hash"] = user.get_session_auth_hash()
    session.save()
    assert session.session_key is not None
    return session.session_key


@dataclass
class Team:
    """A tenant with the console's agents, and a member of it by role."""

    tenant: Tenant
    admin: User
    member: User
    reader: User


def team_make() -> Team:
    tenant = agents_for(make_tenant(f"console-{uuid.uuid4().hex[:8]}"))
    return Team(
        tenant=tenant,
        admin=make_member(tenant, role=Role.ADMIN),
        member=make_member(tenant, role=Role.MEMBER),
        reader=make_member(tenant, role=Role.READ_ONLY),
    )


# Browser tests --------------------------------------------------------------------------------


def _browser_available() -> None:
    if CHROMIUM.exists():
        return
    reason = f"{CHROMIUM} is missing (apt-get install chromium)"
    if env.browser_tests_required():
        pytest.fail(f"BROWSER_TESTS=required but {reason}")
    pytest.skip(f"browser tests skipped: {reason}")


@pytest.fixture(scope="session")
def served(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """uvicorn and a Celery worker on a queue of their own, for the whole session."""
    _browser_available()
    directory = tmp_path_factory.mktemp("console-live")
    with live_platform(directory, {"MEDIA_ROOT": str(directory / "media")}) as live:
        yield live


@pytest.fixture(scope="module")
def browser(served: Live) -> Iterator[Any]:
    """Debian's Chromium, headless, for a module. Playwright's sync API keeps an event loop
    running in this thread while it lives, so the test process's own ORM calls are allowed
    alongside it, and it ends with the module (later tests run their own loops)."""
    from playwright.sync_api import sync_playwright

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(
                executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
            )
            try:
                yield chromium
            finally:
                chromium.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture
def team(served: Live, transactional_db: None) -> Iterator[Team]:
    """A tenant with its members, committed (the live server and worker read it)."""
    made = team_make()
    with working_for(served, made.tenant):
        yield made


@pytest.fixture
def page(browser: Any, served: Live, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh browser context's page on the live server; its screenshot is kept in
    ``var/test-artifacts/`` when the test fails."""
    context = browser.new_context(base_url=served.base_url)
    context.set_default_timeout(10_000)
    page = context.new_page()
    try:
        yield page
    finally:
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)
            page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
        context.close()


def log_in(page: Any, served: Live, user: User) -> None:
    """Put ``user``'s session cookie in the page's browser context (the login form has a
    test of its own)."""
    page.context.add_cookies(
        [{"name": "sessionid", "value": session_of(user), "url": served.base_url}]
    )


def client_of(user: User) -> Client:
    """A Django test client logged in as ``user`` (no live server needed)."""
    client = Client()
    client.force_login(user)
    return client
