"""The engine fixture of the in-process engine tests (real PostgreSQL and Redis, the model
replaced)."""

from tests.threads.runtime.conftest import engine

__all__ = ["engine"]
