"""run_code conformance for the global object and linker error positions, against real
runner processes: spec/standard-agents-runtime.md 13.1 and 13.9 (5) (a globalThis of
ECMAScript intrinsics only), 13.2 and 13.9 SHOULD (linker errors carry line/column in the
caller's source), and the error shape of spec/DIGEST.md section 17."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from sandbox import RunnerPool
from tests.sandbox.support import pool_of, run

# ECMA-262 (2025) section 19, the global object's properties: value properties (19.1),
# function properties (19.2), constructor properties (19.3) and other properties (19.4).
# Deliberately absent although standard, because spec 13.1 requires that they be
# refused: eval and Function (code generation from strings), SharedArrayBuffer and Atomics.
# The spec adds nothing on globalThis: console, report and options.globals live at module
# scope only (13.1), and host APIs are excluded (13.1).
STANDARD_GLOBALS = frozenset(
    {
        # 19.1 value properties
        "globalThis", "Infinity", "NaN", "undefined",
        # 19.2 function properties
        "isFinite", "isNaN", "parseFloat", "parseInt",
        "decodeURI", "decodeURIComponent", "encodeURI", "encodeURIComponent",
        # 19.3 constructor properties
        "AggregateError", "Array", "ArrayBuffer", "BigInt", "BigInt64Array", "BigUint64Array",
        "Boolean", "DataView", "Date", "Error", "EvalError", "FinalizationRegistry",
        "Float16Array", "Float32Array", "Float64Array", "Int8Array", "Int16Array",
        "Int32Array", "Iterator", "Map", "Number", "Object", "Promise", "Proxy", "RangeError",
        "ReferenceError", "RegExp", "Set", "String", "Symbol", "SyntaxError", "TypeError",
        "Uint8Array", "Uint8ClampedArray", "Uint16Array", "Uint32Array", "URIError",
        "WeakMap", "WeakRef", "WeakSet",
        # 19.4 other properties
        "JSON", "Math", "Reflect",
    }
)  # fmt: skip

GLOBAL_NAMES = """
export default {
  names: Object.getOwnPropertyNames(globalThis),
  symbols: Object.getOwnPropertySymbols(globalThis).map(String),
};
"""


@pytest.fixture(scope="module")
def pool() -> Iterator[RunnerPool]:
    yield from pool_of(1)


# -- 13.1, 13.9 (5): globalThis holds only ECMAScript intrinsics ------------------------


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"language": "javascript"},
        {
            "globals": {"answer": 42, "greet": lambda name: f"hello {name}"},
            "imports": {"env": {"key": "value"}},
            "modules": {"./m.ts": "export const m = 1;"},
            "report": lambda value: None,
        },
    ],
    ids=["typescript", "javascript", "every-option"],
)
def test_global_this_lists_only_ecmascript_standard_globals(
    pool: RunnerPool, options: Mapping[str, Any]
) -> None:
    """13.1, 13.9 (5): Object.getOwnPropertyNames(globalThis) is within ECMA-262's list of
    the global object's properties; no option adds to it (globals are module-scope)."""
    outcome = run(pool, GLOBAL_NAMES, options)

    assert outcome.status == "success", outcome.error
    names = outcome.result["names"]
    assert len(names) == len(set(names))
    assert sorted(set(names) - STANDARD_GLOBALS) == []
    assert outcome.result["symbols"] == []


def test_every_standard_global_but_the_refused_ones_is_present(pool: RunnerPool) -> None:
    """13.1: removing what is not standard leaves the standard intrinsics in place."""
    outcome = run(pool, GLOBAL_NAMES)

    assert set(outcome.result["names"]) == STANDARD_GLOBALS


@pytest.mark.parametrize(
    "name",
    [
        "InternalError",  # QuickJS's own error type
        "escape",  # Annex B: optional outside web browsers
        "unescape",
        "SuppressedError",  # the resource-management proposal, not in ECMA-262 (2025)
        "DisposableStack",
        "AsyncDisposableStack",
        "queueMicrotask",  # host APIs QuickJS installs
        "performance",
        "atob",
        "btoa",
        "DOMException",
        "eval",  # standard, refused by 13.1
        "Function",
        "SharedArrayBuffer",
        "Atomics",
    ],
)
def test_non_standard_and_refused_globals_are_not_reachable(pool: RunnerPool, name: str) -> None:
    """13.1: QuickJS's non-standard intrinsics are gone before guest code runs, both as
    properties of globalThis and as global identifiers."""
    source = f"export default ['{name}' in globalThis, typeof {name}, typeof globalThis.{name}];"

    assert run(pool, source).result == [False, "undefined", "undefined"]


# -- 13.2, 13.9 SHOULD: linker errors point at the import in the caller's source --------


def test_an_unknown_module_points_at_its_import_in_javascript(pool: RunnerPool) -> None:
    """13.2: an unknown specifier fails linkage; 13.9 SHOULD: the linker error carries the
    line/column of the import in the caller's source (DIGEST 17: error.line/column)."""
    lines = [
        "// helpers first",
        "const twice = (n) => n * 2;",
        "",
        'import { x } from "nope";',
        "export default twice(x);",
    ]

    outcome = run(pool, "\n".join(lines), {"language": "javascript", "filename": "main.js"})

    assert outcome.status == "link_error"
    assert outcome.error is not None
    assert outcome.error.specifier == "nope"
    assert (outcome.error.filename, outcome.error.line) == ("main.js", 4)
    assert outcome.error.column == lines[3].index('"nope"') + 1


def test_an_unknown_module_points_at_its_import_in_the_typescript_as_written(
    pool: RunnerPool,
) -> None:
    """13.2, 13.9 SHOULD: for TypeScript the position is in the text the caller wrote; a
    type-only import of the same module (erased, never linked) is not blamed."""
    lines = [
        "interface Point {",
        "  x: number;",
        "}",
        "import type { Shape } from 'nope';",
        "type Id = string; import { x } from 'nope';",
        "export default (p: Point): number => p.x + x;",
    ]

    outcome = run(pool, "\n".join(lines), {"filename": "main.ts"})

    assert outcome.status == "link_error"
    assert outcome.error is not None
    assert outcome.error.specifier == "nope"
    assert (outcome.error.filename, outcome.error.line) == ("main.ts", 5)
    assert outcome.error.column == lines[4].index("'nope'") + 1


@pytest.mark.parametrize("language", ["javascript", "typescript"])
def test_a_missing_export_points_at_the_imported_name(pool: RunnerPool, language: str) -> None:
    """13.2: an import of a name the module does not export fails linkage; 13.9 SHOULD:
    at the imported name, with the module named as the caller wrote it."""
    lines = ["const a = 1;", "", "import { key, secret } from 'env';", "export default a;"]

    outcome = run(
        pool,
        "\n".join(lines),
        {"language": language, "imports": {"env": {"key": "k"}}},
    )

    assert outcome.status == "link_error"
    assert outcome.error is not None
    assert outcome.error.message == "Could not find export 'secret' in module 'env'"
    assert outcome.error.specifier == "env"
    assert (outcome.error.filename, outcome.error.line) == ("<runCode>", 3)
    assert outcome.error.column == lines[2].index("secret") + 1


def test_a_linker_error_in_a_supplied_module_points_into_that_module(
    pool: RunnerPool,
) -> None:
    """13.2, 13.9 SHOULD: the failing import of a module from options.modules is reported
    at its line in that module."""
    module = "export const base = 10;\n\nimport { nothing } from './gone.ts';\n"

    outcome = run(pool, "import { base } from './lib.ts';\nexport default base;", {
        "modules": {"./lib.ts": module},
    })  # fmt: skip

    assert outcome.status == "link_error"
    assert outcome.error is not None
    assert outcome.error.specifier == "./gone.ts"
    assert (outcome.error.filename, outcome.error.line, outcome.error.column) == (
        "./lib.ts",
        3,
        module.splitlines()[2].index("'./gone.ts'") + 1,
    )
