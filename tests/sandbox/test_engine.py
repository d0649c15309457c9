"""The engine settles sources nested beyond what its parsers can take as clear link errors."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from sandbox import RunnerPool
from tests.sandbox.support import pool_of, run


@pytest.fixture(scope="module")
def pool() -> Iterator[RunnerPool]:
    yield from pool_of(1)


def test_a_deep_object_literal_is_named_as_nesting_with_its_depth(pool: RunnerPool) -> None:
    """QuickJS reports it as "invalid property name"; the depth at the error says why."""
    outcome = run(pool, "export default " + "{a:" * 5000 + "1" + "}" * 5000 + ";")

    assert outcome.error is not None
    assert (outcome.status, outcome.error.name) == ("link_error", "SyntaxError")
    assert re.fullmatch(
        r"the code is nested too deeply to compile \(\d{4} levels deep at 1:\d+\): "
        "invalid property name",
        outcome.error.message,
    )


def test_an_ordinary_syntax_error_is_not_blamed_on_nesting(pool: RunnerPool) -> None:
    outcome = run(pool, "export default {a: 1,, b: 2};", {"language": "javascript"})

    assert outcome.error is not None
    assert outcome.status == "link_error"
    assert "nested" not in outcome.error.message


@pytest.mark.parametrize(
    ("source", "language"),
    [
        ("export default " + "(" * 2000 + "1" + ")" * 2000 + ";", "typescript"),
        ("export default " + "[" * 100_000 + "]" * 100_000 + ";", "javascript"),
        ("export default " + "[" * 100_000 + "]" * 100_000 + ";", "typescript"),
        ("{" * 5000 + "}" * 5000 + " export default 1;", "javascript"),
        ("export default " + "() => " * 5000 + "1;", "typescript"),
    ],
    ids=["ts-parentheses", "js-arrays", "ts-arrays", "js-blocks", "ts-arrows"],
)
def test_code_nested_too_deeply_to_compile_is_a_link_error_that_says_so(
    pool: RunnerPool, source: str, language: str
) -> None:
    outcome = run(pool, source, {"language": language})

    assert outcome.status == "link_error"
    assert outcome.error is not None
    assert outcome.error.name == "SyntaxError"
    assert outcome.error.message.startswith("the code is nested too deeply to compile (")


def test_deeply_nested_types_are_erased_and_run(pool: RunnerPool) -> None:
    source = (
        "type Deep = " + "Array<" * 2000 + "number" + ">" * 2000 + ";\n"
        "const x: " + "{a:" * 3000 + "number" + "}" * 3000 + " | null = null;\n"
        "export default (v: " + "number" + "[]" * 3000 + "): number => 7;"
    )

    assert run(pool, source, {"execute": {"fn": "default", "args": [[]]}}).result == 7


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("export default " + " + ".join(["1"] * 20_000) + ";", 20_000),
        (
            "const a: any = { b() { return a; } };\nexport default a" + ".b()" * 5000 + " === a;",
            True,
        ),
    ],
    ids=["operator-chain", "method-chain"],
)
def test_long_left_nested_chains_are_not_mistaken_for_deep_nesting(
    pool: RunnerPool, source: str, expected: object
) -> None:
    """Deep syntax trees QuickJS compiles iteratively must still run."""
    assert run(pool, source).result == expected
