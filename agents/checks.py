"""System checks for the Python registry (``manage.py check --tag agents``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core import checks

from agents.registry import RESTRICTIONS_SETTING, current_registry


@checks.register("agents")
def check_registry_restrictions(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """agents.W001: an ``AGENT_REGISTRY_RESTRICTED`` entry is malformed or names nothing."""
    return [
        checks.Warning(
            problem,
            hint=f"Fix {RESTRICTIONS_SETTING}: a restriction on a name that is not registered "
            "protects nothing, and the item it meant to restrict is visible to every tenant.",
            id="agents.W001",
        )
        for problem in current_registry().check_restrictions()
    ]
