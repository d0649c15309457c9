"""Discovery: import every installed app's ``agent_tools`` module, and every extension, into a
registry, recording where each module's entries came from."""

from __future__ import annotations

import importlib
import importlib.util
import sys

from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import module_has_submodule

from agents.registry.catalog import Registry, current_registry, use_registry
from agents.registry.entries import Source, SourceKind
from agents.registry.extensions import PLATFORM_APPS_SETTING, Extension, declared_extensions

DISCOVERY_MODULE = "agent_tools"


def autodiscover(*, into: Registry | None = None) -> list[str]:
    """Import ``<app>.agent_tools`` for every installed app that has one, then every extension
    module (:mod:`agents.registry.extensions`) that is not an installed app; return the
    modules imported.

    Entries go into ``into`` (default: the current registry), attributed to their app, or to
    the distribution or setting that declared the extension. At start-up each module is simply
    imported, so its decorators write into the global registry; a module ``into`` already holds
    is left alone, so discovering twice changes nothing. A module that was imported earlier
    while another registry was current (a test's isolated registry) is executed again as a
    private copy, leaving ``sys.modules`` and the functions other code holds untouched; keep
    decorated functions in the module discovery imports, since only it is executed again.

    Raises ``ImproperlyConfigured`` with one line naming the extension and the cause when an
    extension fails to import or register (a clash with an entry already registered included);
    errors in the platform's own apps propagate as they are.
    """
    target = into if into is not None else current_registry()
    extensions = {
        extension.module: extension
        for extension in declared_extensions(getattr(settings, PLATFORM_APPS_SETTING, ()))
    }
    found: list[str] = []
    with use_registry(target):
        for app in apps.get_app_configs():
            extension = extensions.pop(app.name, None)
            if module_has_submodule(app.module, DISCOVERY_MODULE):
                name = f"{app.name}.{DISCOVERY_MODULE}"
                source = Source(SourceKind.APP, app.name) if extension is None else extension.source
                _discover(name, target, source, extension)
                found.append(name)
        for extension in extensions.values():
            _discover(extension.module, target, extension.source, extension)
            found.append(extension.module)
    target.mark_discovered(found)
    return found


def _discover(name: str, target: Registry, source: Source, extension: Extension | None) -> None:
    """Import module ``name`` into ``target`` and attribute what it registered to ``source``.

    For an extension, any error becomes ``ImproperlyConfigured`` naming the extension.
    """
    if extension is not None and extension.problem is not None:
        raise ImproperlyConfigured(
            f"{extension.describe()} is declared wrongly: {extension.problem}"
        )
    before = target.modules()
    try:
        if name in sys.modules and not target.knows_module(name):
            _execute_copy(name)
        else:
            importlib.import_module(name)
    except Exception as error:
        if extension is None:
            raise
        raise ImproperlyConfigured(extension.failure(error)) from None
    target.record_source({name, *(target.modules() - before)}, source)


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
