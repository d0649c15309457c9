"""Values at the edges of what each side can hold settle clearly, never hang or crash."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sandbox import JSMap, RunnerPool
from sandbox.marshal import MAX_VALUE_DEPTH
from tests.sandbox.support import pool_of, run

JS = {"language": "javascript"}
# Builds `v`, a value nested `depth` containers deep, innermost holding 1.
NESTED = {
    "array": "let v = 1; for (let i = 0; i < depth; i++) v = [v];",
    "object": "let v = 1; for (let i = 0; i < depth; i++) v = { a: v };",
    "map": "let v = 1; for (let i = 0; i < depth; i++) v = new Map([['k', v]]);",
}
# How deep a value the guest got: the same walk for every kind.
MEASURE = """
const inner = (x) => Array.isArray(x) ? x[0] : x instanceof Map ? x.get('k') : x.a;
const depthOf = (x) => {
  let n = 0;
  for (; typeof x === 'object'; n++) x = inner(x);
  return n;
};
"""


@pytest.fixture(scope="module")
def pool() -> Iterator[RunnerPool]:
    yield from pool_of(1)


def _python_nested(kind: str, depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        if kind == "array":
            value = [value]
        elif kind == "object":
            value = {"a": value}
        else:
            value = JSMap({"k": value})
    return value


def _depth(value: Any) -> int:
    depth = 0
    while isinstance(value, list | dict):
        value = value[0] if isinstance(value, list) else value.get("a", value.get("k"))
        depth += 1
    return depth


@pytest.mark.parametrize("kind", sorted(NESTED))
def test_values_nested_to_the_depth_limit_cross_every_way(pool: RunnerPool, kind: str) -> None:
    """Guest -> host (argument and result) and host -> guest (global and host result)."""
    source = f"""
    {MEASURE}
    const depth = {MAX_VALUE_DEPTH};
    {NESTED[kind]}
    const echoed = await echo(v);
    await measured(depthOf(echoed), depthOf(fromHost));
    export default v;
    """
    seen: list[Any] = []

    def echo(value: Any) -> Any:
        seen.append(value)
        return value

    globals_ = {
        "echo": echo,
        "measured": lambda *depths: seen.append(depths),
        "fromHost": _python_nested(kind, MAX_VALUE_DEPTH),
    }
    outcome = run(pool, source, {**JS, "globals": globals_})

    assert outcome.status == "success", outcome.error
    assert seen[1] == (MAX_VALUE_DEPTH, MAX_VALUE_DEPTH)  # as the guest got them
    assert _depth(seen[0]) == _depth(outcome.result) == MAX_VALUE_DEPTH


@pytest.mark.parametrize("kind", sorted(NESTED))
@pytest.mark.parametrize("depth", [MAX_VALUE_DEPTH + 1, 100_000])
def test_a_result_nested_past_the_limit_is_a_serialization_error(
    pool: RunnerPool, kind: str, depth: int
) -> None:
    outcome = run(pool, f"const depth = {depth}; {NESTED[kind]} export default v;", JS)

    assert outcome.status == "error"
    assert outcome.error is not None
    assert outcome.error.name == "SerializationError"
    assert f"nested deeper than {MAX_VALUE_DEPTH} levels (MAX_VALUE_DEPTH)" in outcome.error.message


def test_a_host_call_argument_nested_past_the_limit_rejects_in_the_guest(pool: RunnerPool) -> None:
    source = f"""
    const depth = {MAX_VALUE_DEPTH + 1}; {NESTED["array"]}
    export default await echo(v).then(() => 'sent', (e) => `${{e.name}}: ${{e.message}}`);
    """
    outcome = run(pool, source, {**JS, "globals": {"echo": lambda value: value}})

    assert outcome.result.startswith("SerializationError: globals.echo(arguments)[0]")
    assert outcome.result.endswith("MAX_VALUE_DEPTH), which cannot cross")


def test_a_host_value_nested_past_the_limit_is_refused_before_or_in_the_guest(
    pool: RunnerPool,
) -> None:
    too_deep = _python_nested("array", MAX_VALUE_DEPTH + 1)

    refused = run(pool, "export default 1;", {"globals": {"g": too_deep}})
    rejected = run(
        pool,
        "export default await f().catch((e) => `${e.name}: ${e.message}`);",
        {"globals": {"f": lambda: too_deep}},
    )

    assert refused.status == "link_error"
    assert refused.error is not None
    assert refused.error.name == "InvalidCodeExecutionOptions"
    assert "MAX_VALUE_DEPTH" in refused.error.message
    assert rejected.result.startswith("SerializationError: host result[0][0]")


def test_lone_surrogates_cross_both_ways_unchanged(pool: RunnerPool) -> None:
    """Python strings can hold them; whether they can be stored is the caller's concern."""
    received: list[str] = []

    def take(text: str) -> str:
        received.append(text)
        return "\udc00"

    source = """
    console.log('log \\uD800');
    const back = await take('arg \\uDBFF');
    export default [back.length, back.charCodeAt(0), '\\uD800x', fromHost === '\\uDFFF'];
    """
    outcome = run(pool, source, {**JS, "globals": {"take": take, "fromHost": "\udfff"}})

    assert outcome.result == [1, 0xDC00, "\ud800x", True]
    assert received == ["arg \udbff"]
    assert outcome.logs[0].args == ["log \ud800"]
    thrown = run(pool, "throw new Error('bad \\uD800');", JS)
    assert thrown.error is not None
    assert (thrown.status, thrown.error.message) == ("error", "bad \ud800")


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({}, "source is not valid Unicode: a lone surrogate U+D800 at 2:17"),
        ({"filename": "a\ud800.ts"}, "filename is not valid Unicode"),
        ({"modules": {"./m.ts": "export const a = '\udc00';"}}, "modules['./m.ts']"),
        ({"imports": {"m\udfff": {"a": 1}}}, "an imports specifier is not valid Unicode"),
    ],
)
def test_source_text_and_names_with_lone_surrogates_are_link_errors(
    pool: RunnerPool, options: dict[str, Any], words: str
) -> None:
    """UTF-8 cannot carry them, so neither the parser nor QuickJS could read them."""
    source = "const ok = 1;\nexport default '\ud800';" if not options else "export default 1;"

    outcome = run(pool, source, options)

    assert outcome.status == "link_error"
    assert outcome.error is not None
    assert outcome.error.name == "InvalidCodeExecutionOptions"
    assert words in outcome.error.message


def test_a_specifier_with_a_lone_surrogate_fails_linkage_naming_it(pool: RunnerPool) -> None:
    outcome = run(pool, 'import a from "\\uD800"; export default a;', JS)

    assert outcome.status == "link_error"
    assert outcome.error is not None
    assert outcome.error.specifier == "\ud800"
    assert "is not in options.imports" in outcome.error.message


@pytest.mark.parametrize(
    ("expression", "path"),
    [
        ("new Map([[1, 'a'], [1n, 'b']])", "result<key 1>"),
        ("new Map([[true, 'a'], [1, 'b']])", "result<key 1>"),
        ("new Set([new Date(0), new Date(0)])", "result<item 1>"),
        ("new Set([new Uint8Array([1]), new Uint8Array([1])])", "result<item 1>"),
    ],
)
def test_members_python_would_merge_are_refused_not_dropped(
    pool: RunnerPool, expression: str, path: str
) -> None:
    outcome = run(pool, f"export default {expression};", JS)

    assert outcome.status == "error"
    assert outcome.error is not None
    assert outcome.error.name == "SerializationError"
    assert outcome.error.message.startswith(f"{path}: two ")
    assert "distinct in JavaScript but equal in Python" in outcome.error.message


def test_a_line_the_host_cannot_read_settles_the_call_and_the_runner_is_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Skipping it would leave the call waiting forever for its `done`."""
    from sandbox import protocol

    real_loads = protocol.loads

    def loads(line: bytes) -> dict[str, Any]:
        if b"unreadable" in line:
            raise ValueError("not for this host")
        return real_loads(line)

    monkeypatch.setattr(protocol, "loads", loads)
    for pool in pool_of(1):
        (pid,) = pool.pids()

        outcome = run(pool, "export default 'unreadable';")

        assert outcome.status == "error"
        assert outcome.error is not None
        assert outcome.error.name == "RunnerLost"
        assert "it sent a line the host cannot read (not for this host)" in outcome.error.message
        pool.wait_ready()
        assert pool.pids() != [pid]
        assert run(pool, "export default 'readable';").result == "readable"
