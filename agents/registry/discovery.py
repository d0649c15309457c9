"""Discovery: import every installed app's ``agent_tools`` module into a registry."""

from __future__ import annotations

import importlib.util
import sys

from django.apps import apps
from django.utils.module_loading import autodiscover_modules

from agents.registry.catalog import Registry, current_registry, use_registry

DISCOVERY_MODULE = "agent_tools"


def autodiscover(*, into: Registry | None = None) -> list[str]:
    """Import ``<app>.agent_tools`` for every installed app that has one; return their names.

    Entries go into ``into`` (default: the current registry). At start-up each module is simply
    imported (``autodiscover_modules``), so its decorators write into the global registry; a
    module ``into`` already holds is left alone, so discovering twice changes nothing. A module
    that was imported earlier while another registry was current (a test's isolated registry)
    is executed again as a private copy, leaving ``sys.modules`` and the functions other code
    holds untouched; keep decorated functions in the ``agent_tools`` module itself, since only
    it is executed again. Import errors inside a module propagate.
    """
    target = into if into is not None else current_registry()
    candidates = [f"{app.name}.{DISCOVERY_MODULE}" for app in apps.get_app_configs()]
    with use_registry(target):
        for name in candidates:
            if name in sys.modules and not target.knows_module(name):
                _execute_copy(name)
        autodiscover_modules(DISCOVERY_MODULE)
    found = [name for name in candidates if name in sys.modules]
    target.mark_discovered(found)
    return found


def _execute_copy(name: str) -> None:
    """Run module ``name`` once more in a fresh module object, then put the original back.

    The copy sits in ``sys.modules`` while it runs so that pydantic and dataclasses resolve the
    module's own names against it.
    """
    original = sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        return
    copy = importlib.util.module_from_spec(spec)
    sys.modules[name] = copy
    try:
        spec.loader.exec_module(copy)
    finally:
        sys.modules[name] = original
