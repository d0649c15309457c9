from __future__ import annotations

from collections.abc import Iterator

import pytest

from agents.registry import Registry, use_registry


@pytest.fixture
def reg() -> Iterator[Registry]:
    """A fresh registry made current, so decorators in the test never reach the global one."""
    with use_registry() as scoped:
        yield scoped
