"""Thread fixtures live in tests/conftest.py (``thread``, ``other_thread``); the factory is
re-exported here for the modules that import it from this place."""

from tests.factories import make_thread

__all__ = ["make_thread"]
