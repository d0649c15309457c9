"""Discovery against a real installed app (``demo_app``), never into the global registry.

Changing INSTALLED_APPS re-runs every ``AppConfig.ready()``, so ``AgentsConfig.ready()``
discovers again — into the *current* registry. Each test therefore changes the setting inside
``use_registry()``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.conf import settings
from django.test import override_settings

from agents.registry import (
    EndpointEntry,
    HookName,
    Registry,
    autodiscover,
    registry,
    use_registry,
)
from agents.schemas import ArgumentsInvalid

DEMO_APP = "tests.agents.registry.demo_app"
DEMO_MODULE = f"{DEMO_APP}.agent_tools"
DEMO_NAMES = ("demo_send_invoice", "demo_audit_message", "demo_remind")


@contextmanager
def demo_app_installed() -> Iterator[Registry]:
    """Install the demo app; yields the registry its ``ready()`` discovery went into."""
    with (
        use_registry() as during_ready,
        override_settings(INSTALLED_APPS=[*settings.INSTALLED_APPS, DEMO_APP]),
    ):
        yield during_ready


def _assert_global_registry_untouched() -> None:
    assert "demo_send_invoice" not in registry.tools
    assert "demo_audit_message" not in registry.hooks
    assert "demo_remind" not in registry.effects
    assert not any(entry.module == DEMO_MODULE for entry in registry.endpoints)


def test_autodiscover_imports_agent_tools_of_an_installed_app_into_the_given_registry() -> None:
    target = Registry()

    with demo_app_installed():
        found = autodiscover(into=target)

    assert DEMO_MODULE in found
    invoice = target.tools["demo_send_invoice"]
    assert invoice.module == DEMO_MODULE
    assert invoice.origin == f"{DEMO_MODULE}.demo_send_invoice"
    assert invoice.pydantic_model is not None
    assert invoice.pydantic_model.__name__ == "InvoiceArgs"
    assert invoice.args_schema["$defs"]["LineItem"]["required"] == ["sku", "qty"]
    assert invoice.progress_argument == "customer"
    assert [v.name for v in invoice.variables] == ["BILLING_API_KEY"]
    assert target.hooks["demo_audit_message"].hook is HookName.AFTER_CREATE_MESSAGE
    assert target.effects["demo_remind"].args_schema == {
        "type": "object",
        "properties": {"note": {"type": "string"}},
        "required": ["note"],
    }
    assert [
        (e.route, sorted(e.methods), e.public) for e in target.endpoints if e.module == DEMO_MODULE
    ] == [
        ("demo/reports/[id]", ["GET"], False),
        ("demo/files/[*]", ["GET", "POST"], True),
    ]
    _assert_global_registry_untouched()


def test_discovered_tools_validate_nested_arguments_by_path() -> None:
    target = Registry()
    with demo_app_installed():
        autodiscover(into=target)
    entry = target.tools["demo_send_invoice"]

    args = entry.parse_args({"customer": "acme", "items": [{"sku": "a", "qty": 2}]})
    assert entry.function(None, args) == "invoiced acme for 2 items"
    with pytest.raises(ArgumentsInvalid) as caught:
        entry.parse_args({"customer": "acme", "items": [{"sku": "a", "qty": 2}, {"sku": "b"}]})
    assert caught.value.message == (
        "Tool argument validation failed: [items[1].qty] is a required property"
    )


def test_app_ready_discovers_into_the_current_registry() -> None:
    with demo_app_installed() as during_ready:
        endpoint = during_ready.match_endpoint("POST", "demo/files/a/b.txt")

        assert set(DEMO_NAMES) <= {*during_ready.tools, *during_ready.hooks, *during_ready.effects}
        assert endpoint is not None
        assert endpoint.params == {"*": "a/b.txt"}
    _assert_global_registry_untouched()


def _demo_endpoints(target: Registry) -> list[EndpointEntry]:
    return [entry for entry in target.endpoints if entry.module == DEMO_MODULE]


def test_discovering_twice_into_one_registry_neither_raises_nor_duplicates() -> None:
    target = Registry()

    with demo_app_installed():
        autodiscover(into=target)
        first = target.tools["demo_send_invoice"]
        autodiscover(into=target)

    assert target.tools["demo_send_invoice"] is first
    assert len(_demo_endpoints(target)) == 2


def test_re_executing_a_discovered_module_replaces_its_entries_silently() -> None:
    target = Registry()

    with demo_app_installed():
        autodiscover(into=target)
        with use_registry(target):
            reloaded = importlib.reload(sys.modules[DEMO_MODULE])

    assert target.tools["demo_send_invoice"].function is reloaded.demo_send_invoice
    assert target.hooks["demo_audit_message"].function is reloaded.demo_audit_message
    assert [entry.function for entry in _demo_endpoints(target)] == [
        reloaded.demo_report,
        reloaded.demo_files,
    ]


def test_a_fresh_registry_gets_its_own_copy_of_an_already_imported_module() -> None:
    first, second = Registry(), Registry()

    with demo_app_installed():
        autodiscover(into=first)
        module = sys.modules[DEMO_MODULE]
        function = module.demo_send_invoice
        autodiscover(into=second)

    assert sys.modules[DEMO_MODULE] is module
    assert module.demo_send_invoice is function
    assert second.tools["demo_send_invoice"].function is not function
    assert second.tools["demo_send_invoice"].origin == first.tools["demo_send_invoice"].origin
    assert (
        second.tools["demo_send_invoice"].args_schema
        == first.tools["demo_send_invoice"].args_schema
    )
    assert len(_demo_endpoints(second)) == 2


def test_apps_without_an_agent_tools_module_are_skipped() -> None:
    target = Registry()

    with use_registry():
        found = autodiscover(into=target)

    assert DEMO_MODULE not in found
    assert "tenancy.agent_tools" not in found
    assert target.modules() <= set(found)
