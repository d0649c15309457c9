"""Thread fixtures live in tests/conftest.py (``thread``, ``other_thread``); the factory is
re-exported here for the modules that import it from this place, and the in-process engine
fixtures (``engine``, ``wakes``) are offered to every thread test."""

from tests.factories import make_thread
from tests.threads.runtime.conftest import engine, wakes

__all__ = ["engine", "make_thread", "wakes"]
