"""The in-process engine fixtures (``engine``, ``wakes``) for the replay tests."""

from tests.threads.runtime.conftest import engine, wakes

__all__ = ["engine", "wakes"]
