"""run_code conformance: spec/standard-agents-runtime.md section 13 (checklist 13.9) and
the caller contract of spec/DIGEST.md section 17, against real runner processes."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from sandbox import (
    UNDEFINED,
    AbortSignal,
    CodeExecution,
    CodeExecutionResult,
    JSMap,
    RunnerPool,
    TypedArray,
)
from sandbox.options import (
    DEFAULT_MEMORY_LIMIT_BYTES,
    MAX_LOG_ENTRIES,
    MAX_PENDING_HOST_CALLS,
    MEMORY_LIMIT_CEILING_BYTES,
)
from tests.sandbox.support import SETTLE_TIMEOUT, pool_of, run, wait_for

MiB = 1024 * 1024
ECMASCRIPT_GLOBALS = {
    "Object", "Array", "Number", "parseFloat", "parseInt", "Infinity", "NaN", "undefined",
    "Boolean", "String", "Symbol", "Date", "Promise", "RegExp", "Error", "AggregateError",
    "EvalError", "RangeError", "ReferenceError", "SyntaxError", "TypeError", "URIError",
    "InternalError", "SuppressedError", "globalThis", "JSON", "Math", "Intl", "ArrayBuffer",
    "Uint8Array", "Int8Array", "Uint16Array", "Int16Array", "Uint32Array", "Int32Array",
    "Float16Array", "Float32Array", "Float64Array", "Uint8ClampedArray", "BigUint64Array",
    "BigInt64Array", "DataView", "Map", "BigInt", "Set", "WeakMap", "WeakSet", "Proxy",
    "Reflect", "FinalizationRegistry", "WeakRef", "decodeURI", "decodeURIComponent",
    "encodeURI", "encodeURIComponent", "escape", "unescape", "isFinite", "isNaN", "Iterator",
    "DisposableStack", "AsyncDisposableStack",
}  # fmt: skip


@pytest.fixture(scope="module")
def pool() -> Iterator[RunnerPool]:
    yield from pool_of(2)


# -- 1. runCode returns a CodeExecution handle -----------------------------------------


def test_run_code_returns_a_handle_that_settles(pool: RunnerPool) -> None:
    """13.9 (1): runCode(source, options?) returns a CodeExecution handle."""
    execution = pool.run_code("export default 6 * 7")

    assert isinstance(execution, CodeExecution)
    outcome = execution.result(timeout=SETTLE_TIMEOUT)
    assert outcome == CodeExecutionResult(
        status="success", result=42, duration_ms=outcome.duration_ms, cpu_ms=outcome.cpu_ms
    )
    assert not execution.running
    assert outcome.duration_ms > 0


def test_the_handle_is_awaitable(pool: RunnerPool) -> None:
    """13.9 (1), DIGEST 17: the handle is awaitable (`then`)."""

    async def main() -> CodeExecutionResult:
        return await pool.run_code("export default await Promise.resolve('awaited')")

    assert asyncio.run(main()).result == "awaited"


def test_running_is_true_until_settled(pool: RunnerPool) -> None:
    """DIGEST 17: `running: boolean` on the handle."""
    execution = pool.run_code("while (true) {}")
    assert execution.running
    execution.terminate()
    assert not execution.running


# -- 2. TypeScript by default, evaluated as an ES module --------------------------------


def test_typescript_is_the_default_language(pool: RunnerPool) -> None:
    """13.9 (2), 13.6: TypeScript source is accepted by default; types are erased, not checked."""
    source = """
interface Point { x: number; y: number }
type Pair<T> = [T, T];
function swap<T>(pair: Pair<T>): Pair<T> { return [pair[1], pair[0]]; }
const wrong: string = 5 as unknown as string;  // a type error: erasure ignores it
export default (p: Point): Pair<number> => swap([p.x, p.y]);
"""
    outcome = run(pool, source, {"execute": {"args": [{"x": 1, "y": 2}]}})

    assert outcome.status == "success", outcome.error
    assert outcome.result == [2, 1]


def test_source_is_an_es_module_with_top_level_await_and_import_meta(pool: RunnerPool) -> None:
    """13.9 (2), 13.7, 13.2: an ES module with top-level await; import.meta.url is
    sandbox:<filename>."""
    source = "const v = await Promise.resolve(3); export default [v, import.meta.url, typeof this];"

    outcome = run(pool, source, {"filename": "agent/tool.ts"})

    assert outcome.result == [3, "sandbox:agent/tool.ts", "undefined"]


def test_javascript_mode_does_not_erase_types(pool: RunnerPool) -> None:
    """DIGEST 17: language 'javascript' evaluates the source as is."""
    outcome = run(pool, "const x: number = 1;", {"language": "javascript"})

    assert outcome.status == "link_error"
    assert outcome.error is not None
    assert outcome.error.name == "SyntaxError"


def test_enums_are_erased_to_objects(pool: RunnerPool) -> None:
    """13.6: erasure keeps the runtime meaning of enums."""
    outcome = run(
        pool, "enum Color { Red, Green = 5, Blue }\nexport default [Color.Blue, Color[5]];"
    )

    assert outcome.result == [6, "Green"]


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("namespace N { export const a = 1 }", "namespaces"),
        ("class P { constructor(private x: number) {} }", "parameter properties"),
        ("@sealed class C {}", "decorators"),
    ],
)
def test_unsupported_typescript_is_a_link_error_that_says_so(
    pool: RunnerPool, source: str, what: str
) -> None:
    """13.6: only erasure runs; syntax that cannot be erased is refused as link_error."""
    outcome = run(pool, source)

    assert outcome.status == "link_error"
    assert outcome.error is not None
    assert what in outcome.error.message
    assert "not supported" in outcome.error.message


# -- 3. module resolution --------------------------------------------------------------


def test_bare_specifiers_resolve_from_imports_with_default_export(pool: RunnerPool) -> None:
    """13.9 (3), 13.2: bare specifiers come from options.imports; the key `default` is the
    default export."""
    source = "import lib, { add, PI } from 'math-lib'; export default [lib, await add(2, 3), PI];"
    options = {"imports": {"math-lib": {"default": "LIB", "add": lambda a, b: a + b, "PI": 3.5}}}

    assert run(pool, source, options).result == ["LIB", 5, 3.5]


def test_import_namespaces_are_frozen(pool: RunnerPool) -> None:
    """13.2: an imports entry is a synthetic module whose namespace is a frozen copy."""
    source = """
import * as ns from 'cfg';
import { settings } from 'cfg';
const errors = [];
try { settings.mode = 'hacked'; } catch (e) { errors.push(e.name); }
try { ns.settings = {}; } catch (e) { errors.push(e.name); }
try { ns.extra = 1; } catch (e) { errors.push(e.name); }
export default [Object.isExtensible(ns), Object.isFrozen(settings), settings.mode, errors];
"""
    outcome = run(pool, source, {"imports": {"cfg": {"settings": {"mode": "safe"}}}})

    assert outcome.result == [False, True, "safe", ["TypeError", "TypeError", "TypeError"]]


def test_relative_specifiers_resolve_from_modules(pool: RunnerPool) -> None:
    """13.9 (3), 13.2: relative specifiers come from options.modules (source-backed modules)."""
    options = {
        "modules": {
            "./lib/math.ts": (
                "import { twice } from './twice.ts';\nexport const f = (n: number) => twice(n) + 1;"
            ),
            "./lib/twice.ts": "export const twice = (n: number): number => n * 2;",
        }
    }

    outcome = run(pool, "import { f } from './lib/math.ts'; export default f(20);", options)

    assert outcome.result == 41


@pytest.mark.parametrize(
    ("source", "specifier"),
    [
        ("import x from 'left-pad';", "left-pad"),
        ("import x from './missing.ts';", "./missing.ts"),
        ("import x from 'https://cdn.example.com/x.js';", "https://cdn.example.com/x.js"),
        ("import fs from 'node:fs';", "node:fs"),
    ],
)
def test_unknown_and_url_specifiers_fail_linkage(
    pool: RunnerPool, source: str, specifier: str
) -> None:
    """13.9 (3), 13.2: unknown and URL specifiers fail linkage with status link_error."""
    outcome = run(pool, source)

    assert outcome.status == "link_error"
    assert outcome.error is not None
    assert outcome.error.specifier == specifier


def test_imports_may_not_hold_relative_specifiers(pool: RunnerPool) -> None:
    """DIGEST 17: imports are bare specifiers; relative ones are rejected (link_error)."""
    outcome = run(pool, "export default 1", {"imports": {"./x": {"a": 1}}})

    assert outcome.status == "link_error"
    assert outcome.error is not None
    assert outcome.error.specifier == "./x"


def test_missing_named_import_is_a_link_error(pool: RunnerPool) -> None:
    """13.2: linkage fails when an imported name is not exported."""
    outcome = run(
        pool, "import { nope } from './a.ts';", {"modules": {"./a.ts": "export const a = 1;"}}
    )

    assert outcome.status == "link_error"
    assert outcome.error is not None
    assert "nope" in outcome.error.message


# -- 4. globals at module scope, not on globalThis -------------------------------------


def test_globals_are_module_scope_bindings_not_global_properties(pool: RunnerPool) -> None:
    """13.9 (4), 13.1: options.globals are installed at module scope only."""
    source = """
export default [answer, 'answer' in globalThis, Object.keys(globalThis).length,
                typeof globalThis.answer, await greet('ada')];
"""
    options = {"globals": {"answer": 42, "greet": lambda name: f"hello {name}"}}

    assert run(pool, source, options).result == [42, False, 0, "undefined", "hello ada"]


def test_globals_are_visible_in_supplied_modules_too(pool: RunnerPool) -> None:
    """13.1: globals are module-scope identifiers in every source module of the call."""
    options = {"globals": {"base": 10}, "modules": {"./m.ts": "export const g = () => base + 1;"}}

    assert run(pool, "import { g } from './m.ts'; export default g();", options).result == 11


def test_a_module_may_shadow_a_global(pool: RunnerPool) -> None:
    """13.1: globals behave like outer-scope bindings; a module's own declaration wins."""
    outcome = run(pool, "const answer = 1; export default answer;", {"globals": {"answer": 42}})

    assert outcome.result == 1


# -- 5. isolated globalThis: only ECMAScript intrinsics --------------------------------


def test_global_this_holds_only_ecmascript_intrinsics(pool: RunnerPool) -> None:
    """13.9 (5), 13.1: no host APIs (fetch, setTimeout, console, process, require...)."""
    source = """
const names = Reflect.ownKeys(globalThis).map(String);
const host = ['fetch', 'setTimeout', 'setInterval', 'console', 'process', 'require', 'performance',
  'queueMicrotask', 'atob', 'btoa', 'WebAssembly', 'Deno', 'Bun', 'window', 'self', 'global',
  'DOMException', 'print', 'std', 'os'].filter((n) => n in globalThis);
export default { names, host };
"""
    outcome = run(pool, source)

    assert outcome.status == "success", outcome.error
    assert outcome.result["host"] == []
    assert set(outcome.result["names"]) <= ECMASCRIPT_GLOBALS


# -- 6. eval, Function, SharedArrayBuffer, Atomics, URL dynamic imports refused ---------


@pytest.mark.parametrize(
    "expression",
    [
        "eval('1 + 1')",
        "new Function('return 1')()",
        "Function('return 1')()",
        "(function () {}).constructor('return 1')()",
        "(() => {}).constructor('return 1')()",
        "(async function () {}).constructor('return 1')",
        "(function* () {}).constructor('yield 1')",
        "(async function* () {}).constructor('yield 1')",
        "(class {}).constructor('return 1')()",
        "''.constructor.constructor('return 1')()",
        "Reflect.construct(Object.getPrototypeOf(function () {}).constructor, ['return 1'])",
        "new SharedArrayBuffer(8)",
        "Atomics.add(new Int32Array(4), 0, 1)",
    ],
)
def test_code_generation_and_shared_memory_are_refused(pool: RunnerPool, expression: str) -> None:
    """13.9 (6), 13.1: eval, every Function constructor, SharedArrayBuffer and Atomics throw."""
    outcome = run(pool, f"export default () => {expression};")

    assert outcome.status == "error"
    assert outcome.error is not None
    assert outcome.error.name in ("EvalError", "ReferenceError", "TypeError")


def test_function_constructor_cannot_be_restored(pool: RunnerPool) -> None:
    """13.1: the refusing constructor is neither writable nor configurable."""
    source = """
const proto = Object.getPrototypeOf(function () {});
let outcome = [];
try { proto.constructor = function () {}; outcome.push('assigned'); }
catch (e) { outcome.push(e.name); }
try { Object.defineProperty(proto, 'constructor', { value: 1 }); outcome.push('defined'); }
catch (e) { outcome.push(e.name); }
export default outcome;
"""
    assert run(pool, source).result == ["TypeError", "TypeError"]


def test_url_dynamic_imports_are_refused(pool: RunnerPool) -> None:
    """13.9 (6), 13.1: URL dynamic imports reject; relative ones resolve only from modules."""
    source = """
const attempts = await Promise.allSettled([
  import('https://evil.example/x.js'), import('./missing.js'), import('./here.js')]);
export default attempts.map((a) => a.status === 'fulfilled' ? a.value.v : a.reason.name);
"""
    outcome = run(pool, source, {"modules": {"./here.js": "export const v = 'ok';"}})

    assert outcome.result == ["ReferenceError", "ReferenceError", "ok"]


# -- 7. memory limit ------------------------------------------------------------------


def test_memory_limit_overrun_settles_memory_naming_the_limit(pool: RunnerPool) -> None:
    """13.9 (7), 13.4: memoryLimitBytes is enforced; overrun settles with status memory."""
    source = "const keep = []; while (true) keep.push(new Array(10000).fill(1));"

    outcome = run(pool, source, {"memoryLimitBytes": 16 * MiB})

    assert outcome.status == "memory"
    assert outcome.error is not None
    assert str(16 * MiB) in outcome.error.message


def test_memory_limit_above_the_ceiling_is_clamped(pool: RunnerPool) -> None:
    """13.4 option (a): a request above the ceiling is clamped; the message names the ceiling."""
    source = "const keep = []; while (true) keep.push('x'.repeat(1 << 20) + keep.length);"

    outcome = run(pool, source, {"memoryLimitBytes": 10 * MEMORY_LIMIT_CEILING_BYTES})

    assert outcome.status == "memory"
    assert outcome.error is not None
    assert str(MEMORY_LIMIT_CEILING_BYTES) in outcome.error.message


def test_the_default_memory_limit_applies_when_omitted(pool: RunnerPool) -> None:
    """13.4: a runtime-defined default applies when memoryLimitBytes is omitted."""
    outcome = run(pool, "const a = []; while (true) a.push({ n: a.length });")

    assert outcome.status == "memory"
    assert outcome.error is not None
    assert str(DEFAULT_MEMORY_LIMIT_BYTES) in outcome.error.message


@pytest.mark.parametrize("value", [0, -1, math.inf, math.nan, "64MB", True])
def test_invalid_memory_limits_are_link_errors(pool: RunnerPool, value: object) -> None:
    """DIGEST 17: memoryLimitBytes is a positive finite number."""
    assert run(pool, "export default 1", {"memoryLimitBytes": value}).status == "link_error"


# -- 8. terminate ---------------------------------------------------------------------


def test_terminate_settles_a_tight_loop_as_terminated_with_the_reason(pool: RunnerPool) -> None:
    """13.9 (8), 13.4: terminate() settles with status terminated; the reason is in
    error.message."""
    execution = pool.run_code("while (true) {}")
    wait_for(lambda: execution.runner_pid is not None)
    time.sleep(0.05)  # let the loop spin

    started = time.perf_counter()
    execution.terminate("budget exhausted")
    outcome = execution.result(timeout=SETTLE_TIMEOUT)
    elapsed = time.perf_counter() - started

    assert outcome.status == "terminated"
    assert outcome.error is not None
    assert outcome.error.message == "budget exhausted"
    assert elapsed < 1.0  # generous: the 50 ms figure is measured by `make bench`


def test_terminate_is_idempotent(pool: RunnerPool) -> None:
    """13.4: terminate is idempotent; subsequent calls are no-ops."""
    execution = pool.run_code("while (true) {}")
    execution.terminate("first")
    execution.terminate("second")

    outcome = execution.result(timeout=SETTLE_TIMEOUT)
    assert outcome.error is not None
    assert outcome.error.message == "first"
    assert run(pool, "export default 'still serving'").result == "still serving"


def test_terminate_after_settling_changes_nothing(pool: RunnerPool) -> None:
    """13.4: terminate on a settled handle is a no-op."""
    execution = pool.run_code("export default 1")
    first = execution.result(timeout=SETTLE_TIMEOUT)
    execution.terminate()

    assert execution.result() is first
    assert first.status == "success"


def test_no_wall_clock_timeout_is_invented(pool: RunnerPool) -> None:
    """13.4: the runtime does not invent a wall-clock timeout."""
    source = (
        "const end = Date.now() + 1500; let n = 0; while (Date.now() < end) n++;"
        "export default n > 0;"
    )

    assert run(pool, source).result is True


def test_an_abort_signal_terminates_the_execution(pool: RunnerPool) -> None:
    """13.9 SHOULD: terminate() is called when the execution's abort signal fires."""
    signal = AbortSignal()
    execution = pool.run_code("while (true) {}", abort_signal=signal)
    signal.abort("thread stopped")

    outcome = execution.result(timeout=SETTLE_TIMEOUT)
    assert outcome.status == "terminated"
    assert outcome.error is not None
    assert outcome.error.message == "thread stopped"


# -- 9. marshaling ------------------------------------------------------------------------


def test_values_cross_by_structured_clone_both_ways(pool: RunnerPool) -> None:
    """13.9 (9), 13.3: primitives, bigint, undefined, objects, arrays, Map, Set, Date and typed
    arrays cross both directions by value."""
    when = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    value: dict[str, Any] = {
        "n": 1.5, "i": 7, "s": "é✓", "t": True, "z": None, "u": UNDEFINED, "big": 2**70,
        "nan": math.nan, "negzero": -0.0, "list": [1, [2, {"x": 3}]],
        "map": JSMap({"k": 1, 2: "two"}), "set": {1, "a"}, "date": when,
        "bytes": b"\x00\x01\xff", "floats": TypedArray("Float64Array", b"\x00" * 8),
    }  # fmt: skip
    source = """
export default (v) => ({
  types: [typeof v.u, typeof v.big, v.map instanceof Map, v.set instanceof Set,
          v.date instanceof Date, v.bytes instanceof Uint8Array, v.floats instanceof Float64Array,
          Object.is(v.negzero, -0), Number.isNaN(v.nan)],
  back: v,
});
"""
    outcome = run(pool, source, {"execute": {"args": [value]}})

    assert outcome.status == "success", outcome.error
    assert outcome.result["types"] == [
        "undefined",
        "bigint",
        True,
        True,
        True,
        True,
        True,
        True,
        True,
    ]
    back = outcome.result["back"]
    assert math.isnan(back.pop("nan"))  # NaN != NaN: compared apart
    assert math.isnan(value.pop("nan"))
    assert math.copysign(1, back["negzero"]) == -1
    assert back == value
    assert isinstance(back["map"], JSMap)


def test_no_reference_is_shared_across_the_boundary(pool: RunnerPool) -> None:
    """13.9 (9), 13.3: structured clone is a deep copy; no shared reference either way."""
    host_object = {"items": [1, 2]}
    seen_by_host: list[Any] = []

    def keep(value: Any) -> None:
        seen_by_host.append(value)

    source = """
export default async (arg) => {
  arg.items.push(3);
  const mine = { items: ['guest'] };
  await keep(mine);
  mine.items.push('changed after the call');
  return arg;
};
"""
    outcome = run(pool, source, {"execute": {"args": [host_object]}, "globals": {"keep": keep}})

    assert host_object == {"items": [1, 2]}
    assert outcome.result == {"items": [1, 2, 3]}
    assert seen_by_host == [{"items": ["guest"]}]


def test_host_functions_are_async_proxies_without_host_this(pool: RunnerPool) -> None:
    """13.3: functions cross as callable proxies that return promises; no host `this`."""
    source = """
const p = add(1, 2);
export default [p instanceof Promise, await p, add.length, add.prototype === undefined,
                Object.getOwnPropertyNames(add).sort()];
"""
    outcome = run(pool, source, {"globals": {"add": lambda a, b: a + b}})

    assert outcome.result == [True, 3, 0, True, ["length", "name"]]


def test_async_host_functions_are_awaited(pool: RunnerPool) -> None:
    """13.3: calls marshal the return value, awaiting a returned coroutine."""

    async def fetch_user(user_id: int) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"id": user_id, "name": "Ada"}

    outcome = run(
        pool, "export default await fetchUser(7);", {"globals": {"fetchUser": fetch_user}}
    )

    assert outcome.result == {"id": 7, "name": "Ada"}


@pytest.mark.parametrize(
    ("expression", "path"),
    [
        ("new (class Point { constructor() { this.x = 1 } })()", "result"),
        ("{ ok: 1, nested: [1, () => 2] }", "result.nested[1]"),
        ("{ s: Symbol('host') }", "result.s"),
        ("new WeakMap()", "result"),
        ("(() => { const a = {}; a.self = a; return a; })()", "result.self"),
        ("new Map([[1, Promise.resolve()]])", "result<value 0>"),
    ],
)
def test_non_transferable_results_are_serialization_errors_naming_the_path(
    pool: RunnerPool, expression: str, path: str
) -> None:
    """13.3: class instances, functions, symbols and WeakMaps are not transferable: a
    SerializationError naming the path."""
    outcome = run(pool, f"export default {expression};")

    assert outcome.status == "error"
    assert outcome.error is not None
    assert outcome.error.name == "SerializationError"
    assert outcome.error.message.startswith(f"{path}:")


def test_non_transferable_host_values_are_refused_up_front(pool: RunnerPool) -> None:
    """13.3: a host value that cannot cross is refused before anything runs."""
    outcome = run(pool, "export default 1", {"globals": {"lock": object()}})

    assert outcome.status == "link_error"
    assert outcome.error is not None
    assert "globals.lock" in outcome.error.message


# -- 10. configured export resolution ---------------------------------------------------


def test_default_function_export_is_called_and_awaited(pool: RunnerPool) -> None:
    """13.9 (10), 13.5: execute.fn defaults to 'default'; functions are called and
    thenables awaited."""
    source = "export default () => ({ then(resolve) { resolve(Promise.resolve('deep')); } });"

    assert run(pool, source).result == "deep"


def test_named_export_is_called_with_args(pool: RunnerPool) -> None:
    """13.5: execute {fn, args} calls that export with args inside the sandbox."""
    source = "export async function sum(...xs: number[]) { return xs.reduce((a, b) => a + b, 0); }"

    outcome = run(pool, source, {"execute": {"fn": "sum", "args": [1, 2, 3]}})

    assert outcome.result == 6


def test_non_function_export_is_returned_as_is(pool: RunnerPool) -> None:
    """13.5: a non-function export is the result (awaited if a thenable)."""
    assert run(
        pool, "export const config = Promise.resolve({ a: 1 });", {"execute": {"fn": "config"}}
    ).result == {"a": 1}


def test_non_function_export_with_args_is_an_error(pool: RunnerPool) -> None:
    """13.5: a non-function export with non-empty execute.args settles with status error."""
    outcome = run(pool, "export const value = 1;", {"execute": {"fn": "value", "args": [1]}})

    assert outcome.status == "error"


def test_missing_export_is_a_link_error(pool: RunnerPool) -> None:
    """13.5: a missing selected export settles with status link_error."""
    outcome = run(pool, "export const a = 1;", {"execute": {"fn": "main"}})

    assert outcome.status == "link_error"
    assert outcome.error is not None
    assert "main" in outcome.error.message


@pytest.mark.parametrize(
    "source",
    [
        "export default () => { throw new RangeError('sync boom'); };",
        "export default async () => { throw new RangeError('async boom'); };",
        "export default () => Promise.reject(new RangeError('rejected boom'));",
        "throw new RangeError('top-level boom');",
    ],
)
def test_throws_and_rejections_are_errors(pool: RunnerPool, source: str) -> None:
    """13.5: an uncaught throw or a rejection settles with status error."""
    outcome = run(pool, source)

    assert outcome.status == "error"
    assert outcome.error is not None
    assert outcome.error.name == "RangeError"
    assert outcome.error.message.endswith("boom")


# -- 11. exact status codes -------------------------------------------------------------


def test_every_status_code_is_one_of_the_five(pool: RunnerPool) -> None:
    """13.9 (11), DIGEST 17: statuses are success, error, link_error, memory, terminated."""
    stopped = pool.run_code("while (true) {}")
    stopped.terminate()
    outcomes = [
        run(pool, "export default 1"),
        run(pool, "throw new Error('x')"),
        run(pool, "import 'nope';"),
        run(pool, "const a = []; while (true) a.push([a.length]);", {"memoryLimitBytes": 8 * MiB}),
        stopped.result(timeout=SETTLE_TIMEOUT),
    ]

    assert [o.status for o in outcomes] == [
        "success",
        "error",
        "link_error",
        "memory",
        "terminated",
    ]


def test_an_unknown_option_is_a_link_error(pool: RunnerPool) -> None:
    """DIGEST 17: any other option key settles immediately as link_error."""
    outcome = run(pool, "export default 1", {"timeoutMs": 100})

    assert outcome.status == "link_error"
    assert outcome.error is not None
    assert outcome.error.name == "InvalidCodeExecutionOptions"
    assert "timeoutMs" in outcome.error.message


def test_an_unknown_language_is_a_link_error(pool: RunnerPool) -> None:
    """DIGEST 17: language other than typescript/javascript is link_error."""
    assert run(pool, "1", {"language": "python"}).status == "link_error"


# -- 12. fresh isolate per call ---------------------------------------------------------


def test_no_state_leaks_between_calls(pool: RunnerPool) -> None:
    """13.9 (12), 13.1: a fresh isolate per call; intrinsics and bindings do not leak."""
    polluter = """
Object.prototype.polluted = 'yes';
Array.prototype.map = () => 'hijacked';
JSON.stringify = () => 'hijacked';
globalThis.leaked = 1;
export default 'polluted';
"""
    probe = """
export default [({}).polluted, [1].map((x) => x + 1), JSON.stringify({ a: 1 }), typeof leaked];
"""
    for _ in range(4):  # every runner of the pool serves at least one of each
        assert run(pool, polluter).status == "success"
        assert run(pool, probe).result == [UNDEFINED, [2], '{"a":1}', "undefined"]


def test_module_state_is_not_cached_between_calls(pool: RunnerPool) -> None:
    """13.1: no module cache survives a call."""
    options = {"modules": {"./counter.ts": "export const state = { n: 0 };"}}
    source = "import { state } from './counter.ts'; state.n++; export default state.n;"

    assert [run(pool, source, options).result for _ in range(4)] == [1, 1, 1, 1]


# -- SHOULDs: console capture, error positions ---------------------------------------------


def test_console_is_captured_into_logs_with_level_and_timestamp(pool: RunnerPool) -> None:
    """13.9 SHOULD, DIGEST 17: console.* is captured (levels, args, timestamp in ms)."""
    before = time.time() * 1000
    source = (
        "console.log('a', 1, { b: [2n] }); console.warn('w');"
        "console.error(new Error('e')); export default 0;"
    )

    outcome = run(pool, source)

    assert [(log.level, log.args) for log in outcome.logs] == [
        ("log", ["a", 1, {"b": [2]}]),
        ("warn", ["w"]),
        ("error", ["Error: e"]),
    ]
    assert all(before - 1000 <= log.timestamp <= time.time() * 1000 + 1000 for log in outcome.logs)


def test_a_console_global_overrides_the_capturing_one(pool: RunnerPool) -> None:
    """DIGEST 17: a capturing console is provided unless the caller supplies one."""
    lines: list[Any] = []
    outcome = run(
        pool,
        "await console.log('hi'); export default 1;",
        {"globals": {"console": {"log": lines.append}}},
    )

    assert outcome.logs == []
    assert lines == ["hi"]


def test_runtime_errors_point_into_the_callers_typescript(pool: RunnerPool) -> None:
    """13.9 SHOULD: errors carry line/column of the caller's source (types erased in place)."""
    failing_line = "  const y: { z: number } = (x as any).a.b.c;"
    source = "\n".join(
        [
            "type T = { a: number };",
            "const f = (x: T): number => {",
            failing_line,
            "  return y.z;",
            "};",
            "export default () => f({ a: 1 });",
        ]
    )

    outcome = run(pool, source, {"filename": "calc.ts"})

    assert outcome.status == "error"
    assert outcome.error is not None
    assert (outcome.error.filename, outcome.error.line) == ("calc.ts", 3)
    # QuickJS points at the start of the failing member expression, here `x as any`,
    # which sits after type syntax on the same line: erasure moved nothing.
    assert outcome.error.column == failing_line.index("x as any") + 1


def test_syntax_errors_point_into_the_callers_source(pool: RunnerPool) -> None:
    """13.9 SHOULD: syntactic errors report line/column in the caller's source."""
    ts = run(pool, "const a: number = 1;\nconst b = (;\n", {"filename": "bad.ts"})
    js = run(pool, "const a = 1;\nconst b = (;\n", {"language": "javascript", "filename": "bad.js"})
    nested = run(pool, "import './m.ts';", {"modules": {"./m.ts": "\n\nlet = = 2;"}})

    assert ts.status == js.status == nested.status == "link_error"
    assert ts.error is not None
    assert ts.error.line == 2
    assert ts.error.column is not None
    assert 1 <= ts.error.column <= len("const b = (;")
    assert js.error is not None
    assert (js.error.filename, js.error.line) == ("bad.js", 2)
    assert nested.error is not None
    assert (nested.error.filename, nested.error.line) == ("./m.ts", 3)


def test_reports_are_collected_and_forwarded(pool: RunnerPool) -> None:
    """DIGEST 17: with a report callback the guest gets report(value); values land in reports."""
    received: list[Any] = []
    source = "report({ step: 1 }); report('two'); export default 'done';"

    outcome = run(pool, source, {"report": received.append})

    wait_for(lambda: len(received) == 2)
    assert outcome.result == "done"
    assert received == [{"step": 1}, "two"]


# -- hostile programs -----------------------------------------------------------------------


def test_prototype_pollution_does_not_reach_the_host(pool: RunnerPool) -> None:
    """13.1: mutating intrinsics inside the sandbox has zero effect on the host."""
    source = """
Object.prototype.isAdmin = true;
const payload = JSON.parse('{"__proto__": {"isAdmin": true}, "name": "x"}');
export default payload;
"""
    outcome = run(pool, source)

    assert outcome.status == "success"
    assert outcome.result == {"__proto__": {"isAdmin": True}, "name": "x"}
    assert not hasattr({}, "isAdmin")


def test_constructor_chain_escape_is_refused(pool: RunnerPool) -> None:
    """13.1: the classic `this.constructor.constructor('return process')()` escape fails."""
    source = "export default () => [].constructor.constructor('return globalThis.process')();"

    outcome = run(pool, source)

    assert outcome.status == "error"
    assert outcome.error is not None
    assert outcome.error.name == "EvalError"


def test_deep_recursion_is_an_error_not_a_crash(pool: RunnerPool) -> None:
    """13.4: runaway recursion hits the stack limit and settles error; the runner survives."""
    outcome = run(pool, "const f = (n: number): number => f(n + 1) + 1; export default () => f(0);")

    assert outcome.status == "error"
    assert outcome.error is not None
    assert outcome.error.name == "RangeError"
    assert run(pool, "export default 'alive'").result == "alive"


@pytest.mark.parametrize(
    "source",
    [
        "export default 'x'.repeat(2 ** 29);",
        "const a = []; for (let i = 0; ; i++) a[i] = i;",
        "export default new Array(2 ** 27).fill(0);",
        "let s = 'ab'; while (true) s = s + s;",
        "export default new Uint8Array(2 ** 30);",
    ],
)
def test_huge_strings_and_arrays_are_contained(pool: RunnerPool, source: str) -> None:
    """13.4: memory bombs settle as memory (or a RangeError for impossible lengths)."""
    outcome = run(pool, source, {"memoryLimitBytes": 32 * MiB})

    assert outcome.status in ("memory", "error")
    if outcome.status == "error":  # lengths past the engine's own caps
        assert outcome.error is not None
        assert outcome.error.name in ("RangeError", "InternalError")
    assert run(pool, "export default 1").result == 1


def test_catastrophic_regex_can_be_terminated(pool: RunnerPool) -> None:
    """13.4: a catastrophic backtracking regex is stopped by terminate()."""
    execution = pool.run_code("export default /(a+)+$/.test('a'.repeat(40) + '!');")
    wait_for(lambda: execution.runner_pid is not None)
    time.sleep(0.05)
    execution.terminate("regex took too long")

    assert execution.result(timeout=SETTLE_TIMEOUT).status == "terminated"
    assert run(pool, "export default 'next'").result == "next"


def test_throwing_host_functions_reject_in_the_guest(pool: RunnerPool) -> None:
    """13.3: a host exception becomes a rejection the guest can catch."""

    def fail(reason: str) -> None:
        raise PermissionError(f"denied: {reason}")

    source = """
let caught;
try { await fail('why'); } catch (e) { caught = [e.name, e.message, e instanceof Error]; }
export default caught;
"""
    assert run(pool, source, {"globals": {"fail": fail}}).result == [
        "PermissionError",
        "denied: why",
        True,
    ]


def test_uncaught_host_exception_settles_error(pool: RunnerPool) -> None:
    """13.5: a rejection from a host call that the guest does not catch settles error."""

    def fail() -> None:
        raise ValueError("nope")

    outcome = run(pool, "export default async () => await fail();", {"globals": {"fail": fail}})

    assert outcome.status == "error"
    assert outcome.error is not None
    assert (outcome.error.name, outcome.error.message) == (
        "ValueError",
        "nope",
    )


def test_non_transferable_host_results_reject_in_the_guest(pool: RunnerPool) -> None:
    """13.3: a host return value that cannot cross rejects the guest's promise."""
    outcome = run(
        pool,
        "export default await get().catch((e) => e.name);",
        {"globals": {"get": lambda: object()}},
    )

    assert outcome.result == "SerializationError"


def test_thousands_of_log_lines_are_capped(pool: RunnerPool) -> None:
    """13.9 SHOULD: console capture is bounded (MAX_LOG_ENTRIES) and says what it dropped."""
    outcome = run(pool, "for (let i = 0; i < 5000; i++) console.log('line', i); export default 1;")

    assert outcome.status == "success"
    assert len(outcome.logs) == MAX_LOG_ENTRIES + 1
    assert outcome.logs[-1].level == "warn"
    assert "4000 console entries dropped" in outcome.logs[-1].args[0]
    assert outcome.logs[MAX_LOG_ENTRIES - 1].args == ["line", MAX_LOG_ENTRIES - 1]


def test_a_promise_that_can_never_settle_is_an_error(pool: RunnerPool) -> None:
    """13.7: with no job and no host call pending, a pending module can never complete."""
    outcome = run(pool, "await new Promise(() => {});")

    assert outcome.status == "error"
    assert outcome.error is not None
    assert "never settle" in outcome.error.message


def test_a_flood_of_host_calls_is_bounded(pool: RunnerPool) -> None:
    """13.3: a guest cannot make the host hold unbounded work (MAX_PENDING_HOST_CALLS)."""
    source = """
const calls = [];
for (let i = 0; i < 1000; i++) calls.push(ping(i));
const settled = await Promise.allSettled(calls);
const rejected = settled.filter((s) => s.status === 'rejected');
export default [settled.length - rejected.length, rejected.length, rejected[0].reason.name,
                rejected[0].reason.message.includes('MAX_PENDING_HOST_CALLS')];
"""
    outcome = run(pool, source, {"globals": {"ping": lambda i: i}})

    assert outcome.result == [MAX_PENDING_HOST_CALLS, 1000 - MAX_PENDING_HOST_CALLS, "RangeError",
                              True]  # fmt: skip


def test_oversized_host_call_arguments_are_refused(pool: RunnerPool) -> None:
    """13.3: one host call's encoded arguments are capped (MAX_HOST_CALL_BYTES)."""
    source = "export default await ping('x'.repeat(5 * 1024 * 1024)).catch((e) => e.message);"

    outcome = run(pool, source, {"globals": {"ping": lambda s: len(s)}})

    assert "MAX_HOST_CALL_BYTES" in outcome.result
