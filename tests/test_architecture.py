"""The architecture, tested: import roots, tenant scoping, the viewset guard, module sizes."""

from __future__ import annotations

import importlib
import sysconfig
from pathlib import Path

import pytest
from django.apps import apps
from django.db.models import ForeignKey

from tenancy.models import Tenant, TenantOwned
from tenancy.viewsets import TenantScopedViewSet

REPO = Path(__file__).resolve().parents[1]
PROJECT_PACKAGES = {
    "config": REPO / "platform" / "config",
    "tenancy": REPO / "platform" / "tenancy",
    "common": REPO / "platform" / "common",
    "agents": REPO / "agents",
    "usage": REPO / "usage",
    "threads": REPO / "threads",
    "retention": REPO / "retention",
    "console": REPO / "console",
    "sandbox": REPO / "sandbox",
}
# The engine's house rule: no module under threads/ over this many lines (migrations aside).
THREADS_MODULE_LINES = 400


def test_import_platform_is_the_stdlib_module() -> None:
    import platform

    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    assert Path(platform.__file__).resolve().parent == stdlib
    assert callable(platform.python_version)
    assert not (REPO / "platform" / "__init__.py").exists()


@pytest.mark.parametrize("name", sorted(PROJECT_PACKAGES))
def test_project_packages_resolve_inside_the_repo(name: str) -> None:
    module = importlib.import_module(name)

    assert module.__file__ is not None
    assert Path(module.__file__).resolve().parent == PROJECT_PACKAGES[name]
    assert module.__doc__, f"{name}/__init__.py must say in one line what it owns"


def test_every_model_with_a_tenant_fk_is_tenant_owned() -> None:
    tenant_models = [
        model
        for model in apps.get_models()
        if any(
            isinstance(field, ForeignKey) and field.related_model is Tenant
            for field in model._meta.get_fields()
            if field.name == "tenant"
        )
    ]

    assert tenant_models, "expected at least Membership and ApiKey"
    for model in tenant_models:
        assert issubclass(model, TenantOwned), model
        assert hasattr(model.objects, "for_tenant"), model


def test_viewsets_may_not_override_get_queryset() -> None:
    with pytest.raises(TypeError, match="scope_queryset"):

        class Sneaky(TenantScopedViewSet):
            def get_queryset(self):
                return None


def test_env_example_lists_every_variable_env_py_reads() -> None:
    import re

    source = (REPO / "platform" / "config" / "env.py").read_text()
    read = set(re.findall(r'_(?:get|bool|list|service_url)\("([A-Z_]+)"', source))
    listed = set(re.findall(r"^([A-Z_]+)=", (REPO / ".env.example").read_text(), re.MULTILINE))

    assert read, "the pattern no longer finds env.py's reads"
    assert read <= listed, f"missing from .env.example: {read - listed}"
    unknown = {name for name in listed if f'"{name}"' not in source}
    assert not unknown, f".env.example lists variables env.py never reads: {unknown}"


def test_no_module_under_threads_is_over_the_line_limit() -> None:
    modules = [
        path
        for path in (REPO / "threads").rglob("*.py")
        if "migrations" not in path.relative_to(REPO).parts
    ]
    sizes = {str(path.relative_to(REPO)): len(path.read_text().splitlines()) for path in modules}

    assert len(sizes) > 50, "expected the threads package's modules"
    over = {path: lines for path, lines in sizes.items() if lines > THREADS_MODULE_LINES}
    assert not over, f"over {THREADS_MODULE_LINES} lines: {over}"
