"""Linker errors name the import that failed, at its place in the importer's own source."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox import RunnerPool
from sandbox.typescript import import_site
from tests.sandbox.support import pool_of, run


@pytest.fixture(scope="module")
def pool() -> Iterator[RunnerPool]:
    yield from pool_of(1)


# -- import_site: where a declaration imports a specifier or a name ---------------------


def test_import_site_is_the_specifier_string_of_the_first_matching_declaration() -> None:
    source = "const a = 1;\nimport 'other';\nimport { x } from 'm';\nimport { y } from 'm';\n"

    assert import_site(source, "m") == (3, 19)
    assert import_site(source, "absent") is None


def test_import_site_finds_the_imported_name_in_every_import_form() -> None:
    source = (
        "import d, { a as b, 'c d' as e, default as f } from 'm';\nexport { g as h } from 'm';\n"
    )

    assert import_site(source, "m", "default") == (1, 8)
    assert import_site(source, "m", "a") == (1, 13)
    assert import_site(source, "m", "c d") == (1, 21)
    assert import_site(source, "m", "g") == (2, 10)
    assert import_site(source, "m", "z") is None


def test_import_site_skips_type_only_imports_in_typescript_only() -> None:
    source = "import type { T } from 'm';\nimport { type U, v } from 'm';\nimport type from 'm';\n"

    assert import_site(source, "m") == (2, 27)
    assert import_site(source, "m", "U") is None
    assert import_site(source, "m", "v") == (2, 18)
    assert import_site(source, "m", "default") == (3, 8)
    assert import_site("import { U } from 'm';", "m", "U", typescript=False) == (1, 10)


def test_import_site_compares_specifier_values_not_their_spelling() -> None:
    source = "import a from 'n\\u006f\\x70e';\nimport b from \"line\\\n-continued\";\n"

    assert import_site(source, "nope") == (1, 15)
    assert import_site(source, "line-continued") == (2, 15)


def test_import_site_columns_count_utf8_bytes_like_quickjs() -> None:
    assert import_site("const s = 'é'; import { a } from 'm';", "m") == (1, 35)


# -- the engine: the position of the failing import, in the caller's source -------------


def test_the_stack_of_a_linker_error_ends_with_a_frame_at_the_import(pool: RunnerPool) -> None:
    outcome = run(pool, "\n\nimport x from 'left-pad';", {"filename": "app.ts"})

    assert outcome.error is not None
    assert outcome.error.stack == (
        "ReferenceError: module 'left-pad' is not in options.imports "
        "(bare specifiers resolve only there)\n    at app.ts:3:15\n"
    )


def test_typescript_positions_are_those_of_the_text_as_written(pool: RunnerPool) -> None:
    """An enum is rewritten, not blanked, so the erased line is longer than the written
    one: the reported column is still the one in the TypeScript."""
    line = "enum Color { Red, Green }; import { paint } from 'nope';"

    outcome = run(pool, f"const a: number = 1;\n{line}\nexport default paint(Color.Red);")

    assert outcome.error is not None
    assert (outcome.status, outcome.error.line) == ("link_error", 2)
    assert outcome.error.column == line.index("'nope'") + 1


@pytest.mark.parametrize(
    ("source", "specifier", "column"),
    [
        ("const a = 1;\nimport x from 'https://cdn.example/x.js';", "https://cdn.example/x.js", 15),
        ("const a = 1;\nimport x from 'node:fs';", "node:fs", 15),
        ("const a = 1;\nimport './sub/../missing.ts';", "./missing.ts", 8),
        ("const a = 1;\nexport * from 'nope';", "nope", 15),
        ("const a = 1;\nexport { x } from \"nope\";", "nope", 19),
    ],
    ids=["url", "scheme", "relative", "export-star", "re-export"],
)  # fmt: skip
def test_every_kind_of_unresolvable_specifier_is_located(
    pool: RunnerPool, source: str, specifier: str, column: int
) -> None:
    outcome = run(pool, source)

    assert outcome.status == "link_error"
    assert outcome.error is not None
    assert (outcome.error.specifier, outcome.error.line, outcome.error.column) == (
        specifier,
        2,
        column,
    )


def test_a_missing_export_reached_through_a_star_re_export_blames_the_import(
    pool: RunnerPool,
) -> None:
    modules = {"./a.ts": "\nexport * from './b.ts';\n", "./b.ts": "export const b = 1;\n"}

    outcome = run(pool, "const z = 0;\nimport { c } from './a.ts';", {"modules": modules})

    assert outcome.error is not None
    assert outcome.error.message == "Could not find export 'c' in module './a.ts'"
    assert (outcome.error.filename, outcome.error.line, outcome.error.column) == (
        "<runCode>",
        2,
        10,
    )


def test_a_missing_re_exported_name_points_at_the_re_export(pool: RunnerPool) -> None:
    modules = {"./a.ts": "export const a = 1;"}

    outcome = run(pool, "const z = 0;\nexport { a, b } from './a.ts';", {"modules": modules})

    assert outcome.error is not None
    assert (outcome.error.specifier, outcome.error.line, outcome.error.column) == (
        "./a.ts",
        2,
        13,
    )


def test_a_missing_default_export_points_at_the_default_import(pool: RunnerPool) -> None:
    outcome = run(pool, "// config\nimport env from 'env';", {"imports": {"env": {"key": 1}}})

    assert outcome.error is not None
    assert outcome.error.message == "Could not find export 'default' in module 'env'"
    assert (outcome.error.line, outcome.error.column) == (2, 8)


def test_a_refused_dynamic_import_stays_a_runtime_error(pool: RunnerPool) -> None:
    """Only linkage is located here: a dynamic import rejects inside the guest's code."""
    source = "const r = await import('nope').catch((e) => e.name);\nexport default r;"

    assert run(pool, source).result == "ReferenceError"
