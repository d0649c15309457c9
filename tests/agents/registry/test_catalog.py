from __future__ import annotations

from typing import Any

import pytest
from django.core import checks
from pytest_django.fixtures import Settings

from agents.checks import check_registry_restrictions
from agents.registry import EndpointMethodNotAllowed, Registry, effect, hook, thread_endpoint, tool


def _fill(target: Registry) -> None:
    """One unrestricted and one restricted item of each kind."""

    @tool(description="Weather.", into=target)
    def get_weather(state: Any) -> None:
        return None

    @tool(description="Invoice.", into=target)
    def send_invoice(state: Any) -> None:
        return None

    @hook("after_thread_created", into=target)
    def greet(state: Any) -> None:
        return None

    @hook("filter_messages", into=target)
    def redact(state: Any, messages: Any) -> None:
        return None

    @effect(description="Remind.", into=target)
    def remind(state: Any) -> None:
        return None

    @effect(description="Charge.", into=target)
    def charge(state: Any) -> None:
        return None

    @thread_endpoint("status", into=target)
    def status(request: Any, state: Any, params: dict[str, str]) -> None:
        return None

    @thread_endpoint("reports/[id]", methods=["GET", "DELETE"], into=target)
    def report(request: Any, state: Any, params: dict[str, str]) -> None:
        return None


RESTRICTED = {
    "tools": {"send_invoice": ["acme", "globex"]},
    "hooks": {"redact": ["acme"]},
    "effects": {"charge": ["globex"]},
    "endpoints": {"/reports/[id]/": ["acme"]},
}


@pytest.fixture
def filled() -> Registry:
    target = Registry()
    _fill(target)
    return target


def test_everything_is_visible_to_every_tenant_without_the_setting(
    filled: Registry, settings: Settings
) -> None:
    del settings.AGENT_REGISTRY_RESTRICTED

    view = filled.visible_to("initech")

    assert view.tool_names() == ["get_weather", "send_invoice"]
    assert view.hook_ids() == ["greet", "redact"]
    assert view.effect_names() == ["charge", "remind"]
    assert [entry.route for entry in view.endpoints] == ["status", "reports/[id]"]


def test_restricted_items_are_visible_only_to_listed_tenants(
    filled: Registry, settings: Settings
) -> None:
    settings.AGENT_REGISTRY_RESTRICTED = RESTRICTED

    acme, globex, initech = (filled.visible_to(slug) for slug in ("acme", "globex", "initech"))

    assert acme.tool_names() == ["get_weather", "send_invoice"]
    assert globex.tool_names() == ["get_weather", "send_invoice"]
    assert initech.tool_names() == ["get_weather"]
    assert initech.tool("send_invoice") is None
    assert acme.hook("redact") is not None
    assert globex.hook("redact") is None
    assert globex.hooks_for("filter_messages") == []
    assert globex.effect("charge") is not None
    assert acme.effect("charge") is None
    assert list(initech.effects) == ["remind"]
    assert acme.tenant_slug == "acme"


def test_a_restricted_endpoint_does_not_exist_for_other_tenants(
    filled: Registry, settings: Settings
) -> None:
    settings.AGENT_REGISTRY_RESTRICTED = RESTRICTED

    acme_match = filled.visible_to("acme").match_endpoint("GET", "reports/9")
    globex = filled.visible_to("globex")

    assert acme_match is not None
    assert acme_match.params == {"id": "9"}
    assert globex.match_endpoint("GET", "reports/9") is None
    assert globex.match_endpoint("DELETE", "reports/9") is None
    assert [entry.route for entry in globex.endpoints] == ["status"]
    with pytest.raises(EndpointMethodNotAllowed):
        filled.visible_to("acme").match_endpoint("POST", "reports/9")


def test_the_setting_is_read_when_a_view_is_made(filled: Registry, settings: Settings) -> None:
    settings.AGENT_REGISTRY_RESTRICTED = {}
    assert filled.visible_to("initech").tool("send_invoice") is not None

    settings.AGENT_REGISTRY_RESTRICTED = RESTRICTED
    assert filled.visible_to("initech").tool("send_invoice") is None


def test_a_bare_string_of_slugs_admits_no_tenant_rather_than_substrings(
    filled: Registry, settings: Settings
) -> None:
    settings.AGENT_REGISTRY_RESTRICTED = {"tools": {"send_invoice": "acme"}}

    assert filled.visible_to("acme").tool("send_invoice") is None
    assert filled.visible_to("a").tool("send_invoice") is None
    assert filled.check_restrictions() == [
        "AGENT_REGISTRY_RESTRICTED['tools']['send_invoice'] must be a list of tenant slugs"
    ]


def test_check_restrictions_is_empty_for_a_sound_setting(
    filled: Registry, settings: Settings
) -> None:
    settings.AGENT_REGISTRY_RESTRICTED = RESTRICTED

    assert filled.check_restrictions() == []


def test_check_restrictions_reports_names_that_match_nothing(
    filled: Registry, settings: Settings
) -> None:
    settings.AGENT_REGISTRY_RESTRICTED = {
        "tools": {"send_invoic": ["acme"]},
        "hooks": {"zzz": ["acme"]},
        "effects": {"charge": ["globex"]},
        "endpoints": {"reports/[rid]": ["acme"], "a//b": ["acme"]},
        "tool": {"get_weather": ["acme"]},
    }

    assert filled.check_restrictions() == [
        "AGENT_REGISTRY_RESTRICTED has an unknown kind 'tool'; "
        "expected one of tools, hooks, effects, endpoints",
        "AGENT_REGISTRY_RESTRICTED['tools']['send_invoic'] names no registered tool "
        "(did you mean 'send_invoice'?)",
        "AGENT_REGISTRY_RESTRICTED['hooks']['zzz'] names no registered hook",
        "AGENT_REGISTRY_RESTRICTED['endpoints']['reports/[rid]'] names no registered endpoint "
        "(did you mean 'reports/[id]'?)",
        "AGENT_REGISTRY_RESTRICTED['endpoints']['a//b'] is not a valid route",
    ]


def test_check_restrictions_reports_a_malformed_setting(
    filled: Registry, settings: Settings
) -> None:
    settings.AGENT_REGISTRY_RESTRICTED = ["send_invoice"]
    assert filled.check_restrictions() == [
        "AGENT_REGISTRY_RESTRICTED must be a dict like {'tools': {name: [slugs]}}"
    ]

    settings.AGENT_REGISTRY_RESTRICTED = {"tools": ["send_invoice"]}
    assert filled.check_restrictions() == [
        "AGENT_REGISTRY_RESTRICTED['tools'] must be a dict of names to lists of tenant slugs"
    ]


def test_the_system_check_warns_about_restrictions_naming_nothing(
    reg: Registry, settings: Settings
) -> None:
    _fill(reg)
    settings.AGENT_REGISTRY_RESTRICTED = {"tools": {"send_invoic": ["acme"]}}

    messages = checks.run_checks(tags=["agents"])

    assert [(type(m), m.id, m.msg) for m in messages] == [
        (
            checks.Warning,
            "agents.W001",
            "AGENT_REGISTRY_RESTRICTED['tools']['send_invoic'] names no registered tool "
            "(did you mean 'send_invoice'?)",
        )
    ]


def test_the_system_check_is_silent_when_restrictions_are_sound(
    reg: Registry, settings: Settings
) -> None:
    _fill(reg)
    settings.AGENT_REGISTRY_RESTRICTED = RESTRICTED

    assert check_registry_restrictions(None) == []


def test_registry_mappings_are_read_only(filled: Registry) -> None:
    with pytest.raises(TypeError):
        filled.tools["x"] = filled.tools["get_weather"]  # type: ignore[index]
    with pytest.raises(TypeError):
        del filled.hooks["greet"]  # type: ignore[attr-defined]
    assert isinstance(filled.endpoints, tuple)
