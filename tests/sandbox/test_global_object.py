"""Hardening removes every non-standard global, the bridge's own handles included, and
what it removes takes no language feature with it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox import RunnerPool
from tests.sandbox.support import pool_of, run


@pytest.fixture(scope="module")
def pool() -> Iterator[RunnerPool]:
    yield from pool_of(1)


def test_the_bridge_leaves_no_handle_on_the_global_object(pool: RunnerPool) -> None:
    source = """
export default ['__sandbox_bridge', '__sandbox_modules', '__sandbox_host_call']
  .map((name) => typeof globalThis[name]);
"""
    assert run(pool, source, {"globals": {"g": 1}}).result == ["undefined"] * 3


def test_using_declarations_work_without_the_disposable_stack_globals(
    pool: RunnerPool,
) -> None:
    """`using` reaches its intrinsics directly, not through the removed globals."""
    source = """
const log: string[] = [];
const resource = (name: string) => ({ [Symbol.dispose]() { log.push(`dispose ${name}`); } });
{
  using a = resource('a');
  using b = resource('b');
  log.push('body');
}
export default [log, typeof DisposableStack, typeof SuppressedError];
"""
    outcome = run(pool, source)

    assert outcome.status == "success", outcome.error
    assert outcome.result == [["body", "dispose b", "dispose a"], "undefined", "undefined"]


def test_a_guest_may_define_its_own_global_of_a_removed_name(pool: RunnerPool) -> None:
    """The names are free for the guest's own use; nothing of QuickJS's comes back."""
    source = """
globalThis.escape = (s: string) => `<${s}>`;
export default [escape('x'), typeof InternalError];
"""
    assert run(pool, source).result == ["<x>", "undefined"]
