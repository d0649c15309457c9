"""TypeScript erasure keeps every line and column and refuses what it cannot erase."""

from __future__ import annotations

import pytest

from sandbox.typescript import TypeScriptSyntaxError, UnsupportedTypeScript, declared_names, erase

SOURCE = """\
import type { A } from './a';
import { type B, c } from './b';
export interface Shape { area(): number }
export type Id = string | number;
declare const ambient: number;
abstract class Base<T> implements Shape {
  private readonly x!: number;
  protected abstract name(): string;
  area(this_: unknown, y?: number): number { return (y as number) ?? 0; }
}
function first<T,>(items: T[]): T | undefined { return items[0]!; }
const value = { a: 1 } satisfies Record<string, number>;
export default first<number>([1]);
"""


def test_erasure_keeps_lines_and_columns_of_remaining_code() -> None:
    javascript = erase(SOURCE).javascript
    before, after = SOURCE.splitlines(), javascript.splitlines()

    assert len(after) == len(before)
    for original, erased in zip(before, after, strict=True):
        assert len(erased) == len(original)
        for column, char in enumerate(erased):
            assert char in (" ", original[column])
    assert "return (y          ) ?? 0;" in javascript
    assert "items[0] ;" in javascript
    assert "import {         c } from './b';" in javascript


def test_top_level_names_are_reported() -> None:
    names = erase(
        "const a = 1, { b, c: [d] } = o; function f() {} class K {} import x, { y as z } from 'm';"
    ).top_level_names

    assert names == {"a", "b", "d", "f", "K", "x", "z"}


def test_enums_become_objects_on_the_same_lines() -> None:
    erased = erase("enum E {\n  A,\n  B = 'b',\n}\nexport const e = E.A;\n").javascript

    assert erased.count("\n") == 5
    assert erased.startswith(
        'var E; (function (E) { E[E["A"] = 0] = "A"; E["B"] = \'b\'; })(E || (E = {}));'
    )


@pytest.mark.parametrize(
    ("source", "line", "column"),
    [
        ("\nnamespace N {}", 2, 1),
        ("class P {\n  constructor(public x: number) {}\n}", 2, 15),
        ("const v = <number>w;", 1, 11),
        ("function f(this: Window) {}", 1, 12),
    ],
)
def test_non_erasable_syntax_is_refused_with_its_position(
    source: str, line: int, column: int
) -> None:
    with pytest.raises(UnsupportedTypeScript) as raised:
        erase(source)

    assert (raised.value.line, raised.value.column) == (line, column)


def test_syntax_errors_carry_a_position() -> None:
    with pytest.raises(TypeScriptSyntaxError) as raised:
        erase("let ok = 1;\nlet = = ;")

    assert raised.value.line == 2


@pytest.mark.parametrize(
    "source",
    [
        "let x = " + "(" * 2000 + "1" + ")" * 2000 + ";",
        "let x = " + "[" * 100_000 + "]" * 100_000 + ";",
        "let x = " + "f(" * 20_000 + ")" * 20_000 + ";",
        "let x = 1" + " as any" * 20_000 + ";",
        "let x = " + "a ? " * 5000 + "b" + " : c" * 5000 + ";",
    ],
    ids=["parentheses", "arrays", "calls", "as-chain", "ternaries"],
)
def test_deeply_nested_code_is_erased_without_recursion(source: str) -> None:
    """Whether code this deep can run is QuickJS's to decide (a link_error naming the
    nesting, see test_engine); the erasure itself must not fail."""
    assert len(erase(source).javascript) == len(source)


@pytest.mark.parametrize(
    "annotation",
    [
        "Array<" * 2000 + "number" + ">" * 2000,
        "number" + "[]" * 5000,
        "{a:" * 5000 + "T" + "}" * 5000,
    ],
    ids=["generics", "arrays", "object-types"],
)
def test_deeply_nested_types_are_blanked(annotation: str) -> None:
    source = f"let x: {annotation} = [];"

    assert erase(source).javascript == "let x" + " " * len(f": {annotation}") + " = [];"


def test_deeply_nested_destructuring_still_yields_its_names() -> None:
    source = "const " + "[" * 10_000 + "deep" + "]" * 10_000 + " = v, { a: [b] } = w;"

    assert declared_names(source) == {"deep", "b"}
