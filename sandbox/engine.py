"""One guest execution in a fresh QuickJS context, inside a runner process.

``execute`` takes a validated ``ExecutePayload`` and returns the body of the ``done``
message. It never raises for anything the guest does. Host calls leave through
``Link.send_tool_call`` and their answers (or a cancel) come back through
``Link.next_message``; the engine blocks there only while the guest waits on a host call.

Stages and the status each failure settles with:

1. TypeScript erasure of every source module (``link_error``: syntax, unsupported syntax);
2. a fresh context: memory and stack limits, interrupt handler, module loader, the
   ``prelude.js`` bridge, then hardening (no code generation from strings, no
   non-ECMAScript globals);
3. compile and link the module graph (``link_error``: syntax errors, unknown, URL or
   relative-but-unsupplied specifiers, missing exports; a linkage failure is located at
   the import that caused it, in the importer's own source);
4. evaluate and resolve the configured export per spec 13.5 (``error``, ``link_error``
   for a missing export, ``success``), draining jobs and serving host calls.

Out-of-memory anywhere is ``memory``; a cancel, or guest code that runs past the
execution's CPU budget (the interrupt handler checks it), is ``terminated``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterable
from importlib import resources
from typing import Any, Final, NamedTuple, Protocol

import quickjs

from sandbox import capi
from sandbox.capi import JSValue, lib
from sandbox.confine import CpuBudget
from sandbox.options import normalize_relative
from sandbox.protocol import REPORT_TARGET, ErrorInfo, ExecutePayload
from sandbox.typescript import (
    TypeScriptSyntaxError,
    UnsupportedTypeScript,
    declared_names,
    erase,
    import_site,
    nesting_at,
)

PRELUDE: Final = resources.files("sandbox").joinpath("prelude.js").read_text()
_prelude_bytecode: bytes | None = None
GLOBALS_SPECIFIER: Final = "sandbox:globals"
# The two trusted importers of the entry module: the binding's name for the stub that
# links it ("<input>") and the prelude's, whose driver imports it for its namespace.
_DRIVERS: Final = frozenset({"<input>", "<prelude>"})
_URL_LIKE: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_FRAME: Final = re.compile(r"^\s*at (?:[^(]*\()?(?P<file>.+?):(?P<line>\d+):(?P<column>\d+)\)?\s*$")
MEMORY_SUSPICION_RATIO: Final = 0.25
_MEMORY: Final = re.compile(r"out of memory|too large to allocate|allocation failed", re.I)
_STACK: Final = re.compile(r"stack size exceeded|stack overflow", re.I)
# QuickJS's linkage failures for an export (not found, ambiguous, circular), which name the
# module by its resolved name.
_EXPORT_FAILURE: Final = re.compile(r"export '(?P<name>[^']*)' in module '(?P<module>[^']*)'")
# Syntax-tree levels around a compile error from which nesting is named as its cause
# (QuickJS gives up somewhere between 1,000 and 4,000, depending on the construct).
DEEP_NESTING: Final = 1000


class Link(Protocol):
    """The engine's way out to the dispatcher (implemented by the runner's I/O loop)."""

    def send_tool_call(self, call_id: str, target: str, payload_json: str) -> None: ...

    def next_message(self) -> dict[str, Any]:
        """Block for the next ``tool_result`` or ``cancel`` of this execution."""
        ...


class _Request(NamedTuple):
    """One module request met while linking: ``importer`` asked for ``specifier``."""

    importer: str
    specifier: str
    resolved: str


class _Settled(Exception):
    """Ends an execution early with a ``done`` body."""

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(body.get("status"))
        self.body = body


def execute(
    payload: ExecutePayload,
    link: Link,
    cancelled: threading.Event,
    cpu: CpuBudget | None = None,
) -> dict[str, Any]:
    """Run one call; returns ``{status, result?, error?, logs, durationMs}``.

    ``cpu``, when given, is checked by the interrupt handler: guest code past its
    deadline is stopped and the call settles ``terminated``.
    """
    started = time.perf_counter()
    run = _Run(payload, link, cancelled, cpu)
    try:
        body = run.go()
    except _Settled as settled:
        body = settled.body
    finally:
        logs = run.logs()
        run.close()
    body["logs"] = logs
    body["durationMs"] = round((time.perf_counter() - started) * 1000, 3)
    return body


class _Run:
    def __init__(
        self,
        payload: ExecutePayload,
        link: Link,
        cancelled: threading.Event,
        cpu: CpuBudget | None = None,
    ) -> None:
        self.payload = payload
        self.link = link
        self.cancelled = cancelled
        self.cpu = cpu
        self.cpu_exceeded = False
        self.interruptible = True
        self.filename = payload["filename"]
        self.sources: dict[str, str] = {}
        self.context: quickjs.Context | None = None
        self.bridge: Any = None
        self.js_context = 0
        self.module_access: JSValue | None = None
        self.linking = True
        self.failed_specifier: str | None = None
        self.failed_module: str | None = None
        self.requests: list[_Request] = []
        self._callbacks: tuple[Any, ...] = ()

    # -- stages -----------------------------------------------------------------------

    def go(self) -> dict[str, Any]:
        self.sources = self._erase_all()
        self._open_context()
        self._link_and_evaluate()
        return self._drive()

    def _erase_all(self) -> dict[str, str]:
        modules = {self.filename: self.payload["source"], **self.payload["modules"]}
        injected = self._global_names()
        sources = {}
        for name, text in modules.items():
            try:
                if self.payload["language"] == "typescript":
                    erased = erase(text)
                    javascript, declared = erased.javascript, erased.top_level_names
                else:
                    javascript, declared = text, declared_names(text)
            except (TypeScriptSyntaxError, UnsupportedTypeScript) as error:
                kind = "SyntaxError" if isinstance(error, TypeScriptSyntaxError) else "TypeError"
                raise _Settled(
                    _failure("link_error", kind, str(error), name, error.line, error.column)
                ) from None
            except UnicodeEncodeError as error:  # options refuse it; a raw runner may not
                message = f"the source is not valid Unicode: {error}"
                raise _Settled(_failure("link_error", "SyntaxError", message, name)) from None
            # Globals are module-scope bindings: an import appended after the caller's last
            # line (imports hoist), so no line or column of the caller's source moves. A
            # name the module declares itself shadows the global instead of clashing.
            names = [n for n in injected if n not in declared]
            if names:
                javascript += f'\n;import {{ {", ".join(names)} }} from "{GLOBALS_SPECIFIER}";'
            sources[name] = javascript
        return sources

    def _open_context(self) -> None:
        context = quickjs.Context()
        self.context = context
        runtime, self.js_context = capi.context_pointers(context)
        interrupt = capi.INTERRUPT_T(self._interrupt)
        normalize = capi.NORMALIZE_T(self._normalize)
        load = capi.LOAD_T(self._load)
        self._callbacks = (interrupt, normalize, load)  # alive as long as the context
        lib.JS_SetInterruptHandler(runtime, capi.function_pointer(interrupt), None)
        lib.JS_SetModuleLoaderFunc(
            runtime, capi.function_pointer(normalize), capi.function_pointer(load), None
        )
        context.add_callable("__sandbox_host_call", self._host_call)
        if not capi.run_script_bytecode(self.js_context, _prelude()):
            self._check_cancelled()
            raise _Settled(_failure("error", "Error", "the sandbox prelude failed to start"))
        self.bridge = context.get("__sandbox_bridge")
        self._call("init", self._input_json())
        global_object = lib.JS_GetGlobalObject(self.js_context)
        self.module_access = lib.JS_GetPropertyStr(
            self.js_context, global_object, b"__sandbox_modules"
        )
        lib.JS_FreeValue(self.js_context, global_object)
        self._call("harden")
        context.set_max_stack_size(self.payload["stack_limit_bytes"])
        context.set_memory_limit(self.payload["memory_limit_bytes"])

    def _link_and_evaluate(self) -> None:
        # A one-line stub module imports the entry module through the loader: compile and
        # link failures anywhere in the graph then throw here, synchronously, while an
        # evaluation failure only rejects the promise the driver later awaits.
        stub = f"import {json.dumps(self.filename)};"
        context = self.context
        assert context is not None
        try:
            context.module(stub)
        except quickjs.JSException as error:
            self._check_cancelled()
            raise _Settled(self._exception("link_error", str(error))) from None
        self.linking = False
        self._check_cancelled()

    def _drive(self) -> dict[str, Any]:
        self._call("start", self.filename)
        while True:
            self._drain_jobs()
            outcome = self._call("outcome")
            if not isinstance(outcome, str):
                return _failure("error", "Error", "the sandbox bridge was tampered with")
            if outcome:
                return self._finish(json.loads(outcome))
            if not self._call("pendingCalls"):
                return _failure(
                    "error",
                    "Error",
                    "the module's promise can never settle: it awaits something that is "
                    "neither a job nor a pending host call",
                )
            self._wait_for_host()

    def _wait_for_host(self) -> None:
        message = self.link.next_message()
        if message["type"] == "cancel":
            self.cancelled.set()
            self._check_cancelled()
        ok = bool(message.get("ok"))
        body = message.get("result") if ok else message.get("error", {})
        self._call("settle", str(message["callId"]), ok, json.dumps(body))

    def _finish(self, outcome: dict[str, Any]) -> dict[str, Any]:
        status = outcome.get("status")
        if status == "success":
            return {"status": "success", "result": json.loads(outcome["result"])}
        error = outcome.get("error") or {}
        if status not in ("error", "link_error"):
            status = "error"
        return self._classify(status, error)

    def _global_names(self) -> list[str]:
        """Module-scope names: the capturing console (unless the caller gave one), the
        caller's globals and ``report`` when a report callback was given."""
        names = [] if "console" in self.payload["globals"] else ["console"]
        names += self.payload["globals"]
        if self.payload["report"]:
            names.append("report")
        return names

    # -- host side of the bridge ------------------------------------------------------

    def _input_json(self) -> str:
        payload = self.payload
        return json.dumps(
            {key: payload[key] for key in (  # type: ignore[literal-required]
                "fn", "args", "has_args", "imports", "globals", "report",
                "max_log_entries", "max_log_bytes", "max_result_bytes",
                "max_host_call_bytes", "max_pending_host_calls", "max_value_depth",
            )}
        )  # fmt: skip

    def _host_call(self, call_id: str, target: str, payload_json: str) -> str:
        # Called from inside QuickJS: it must never raise (a raising callable leaves the
        # binding with an exception set), so failures come back as a refusal message.
        try:
            if target == REPORT_TARGET and not self.payload["report"]:
                return "report is not available"
            self.link.send_tool_call(str(call_id), str(target), str(payload_json))
            return ""
        except (
            Exception
        ) as error:  # reported to the guest instead: raising here would break the binding
            return f"host call failed: {error}"

    # -- module loading ---------------------------------------------------------------

    def _interrupt(self, _runtime: int, _opaque: int) -> int:
        """QuickJS asks every few thousand operations; non-zero stops guest code."""
        if not self.interruptible:
            return 0
        if self.cancelled.is_set():
            return 1
        if self.cpu is not None and self.cpu.exceeded():
            self.cpu_exceeded = True
            return 1
        return 0

    def _normalize(self, js_context: int, base: bytes, name: bytes, _opaque: int) -> int | None:
        # QuickJS hands over a lone surrogate in a specifier as its WTF-8 bytes:
        # "surrogatepass" keeps it a character instead of failing the resolution.
        try:
            importer, specifier = _text(base), _text(name)
            resolved = self._resolve(importer, specifier)
        except Exception as error:  # must not unwind through C
            capi.throw_reference_error(js_context, f"cannot resolve module: {error}")
            return None
        if self.linking:
            self.requests.append(_Request(importer, specifier, resolved))
        address: int | None = lib.js_strdup(js_context, resolved.encode("utf-8", "surrogatepass"))
        return address

    def _resolve(self, base: str, specifier: str) -> str:
        if base in _DRIVERS:
            return specifier if specifier == self.filename else "denied:" + specifier
        if specifier.startswith(("./", "../")) or specifier in (".", ".."):
            base_dir = "" if base == self.filename else base[2:].rpartition("/")[0]
            return normalize_relative(base_dir, specifier)
        if specifier == GLOBALS_SPECIFIER:
            return specifier
        if _URL_LIKE.match(specifier) or specifier.startswith("/"):
            return "url:" + specifier
        return "import:" + specifier

    def _load(self, js_context: int, name_bytes: bytes, _opaque: int) -> int | None:
        name = _text(name_bytes)
        try:
            source, url = self._module_source(name)
        except LookupError as refusal:
            if self.linking and self.failed_specifier is None:
                self.failed_specifier = name.partition(":")[2] if ":" in name else name
                self.failed_module = name
            capi.throw_reference_error(js_context, str(refusal.args[0]))
            return None
        except Exception as error:  # must not unwind through C
            capi.throw_reference_error(js_context, f"cannot load module '{name}': {error}")
            return None
        data = source.encode("utf-8")
        compiled = lib.JS_Eval(
            js_context, data, len(data), name_bytes, capi.EVAL_MODULE | capi.EVAL_COMPILE_ONLY
        )
        if compiled.tag == capi.TAG_EXCEPTION:
            return None
        synthetic = name.startswith("import:") or name == GLOBALS_SPECIFIER
        self._set_import_meta(compiled.u, url, synthetic)
        # The loader hands back a borrowed JSModuleDef*: drop the reference JS_Eval returned.
        lib.JS_FreeValue(js_context, compiled)
        address: int = compiled.u
        return address

    def _module_source(self, name: str) -> tuple[str, str]:
        if name == self.filename:
            return self.sources[name], name
        if name.startswith("./"):
            if name in self.sources:
                return self.sources[name], name
            raise LookupError(
                f"module '{name}' is not in options.modules (relative imports resolve only there)"
            )
        if name == GLOBALS_SPECIFIER:
            return _synthetic_source(GLOBALS_SPECIFIER, self._global_names()), GLOBALS_SPECIFIER
        if name.startswith("import:"):
            specifier = name[len("import:") :]
            namespace = self.payload["imports"].get(specifier)
            if namespace is None:
                raise LookupError(
                    f"module '{specifier}' is not in options.imports "
                    "(bare specifiers resolve only there)"
                )
            return _synthetic_source(specifier, namespace["v"]), specifier
        if name.startswith("url:"):
            raise LookupError(f"module '{name[4:]}' refused: URL specifiers are not importable")
        raise LookupError(f"module '{name.partition(':')[2] or name}' is not importable")

    def _set_import_meta(self, module: int, url: str, synthetic: bool | None) -> None:
        meta = lib.JS_GetImportMeta(self.js_context, module)
        if meta.tag == capi.TAG_EXCEPTION:
            return
        lib.JS_SetPropertyStr(
            self.js_context, meta, b"url", capi.new_string(self.js_context, f"sandbox:{url}")
        )
        if synthetic and self.module_access is not None:
            access = lib.JS_DupValue(self.js_context, self.module_access)
            lib.JS_SetPropertyStr(self.js_context, meta, b"sandbox", access)
        lib.JS_FreeValue(self.js_context, meta)

    # -- errors -----------------------------------------------------------------------

    def _exception(self, status: str, text: str) -> dict[str, Any]:
        """A settlement from the text of an exception that escaped the binding."""
        first = text.splitlines()[0] if text else ""
        name, separator, message = first.partition(": ")
        if not separator:
            name, message = "Error", first
        error: dict[str, Any] = {"name": name, "message": message, "stack": text}
        if status == "link_error":
            self._point_at_import(error)
        return self._classify(status, error)

    def _point_at_import(self, error: dict[str, Any]) -> None:
        """Tie a linkage failure to the import that caused it, which QuickJS does not: the
        specifier of a module that could not be loaded, or the name imported from a module
        that does not export it. The position, in the importer's source as the caller wrote
        it (the TypeScript, not its erasure), goes into the stack as a frame, where
        ``_classify`` finds it like any other.
        """
        site: tuple[str, int, int] | None = None
        if self.failed_module is not None:
            error["specifier"] = self.failed_specifier
            # The module that failed to load is the last one requested under its name.
            failed = [r for r in self.requests if r.resolved == self.failed_module]
            site = self._site(failed[-1]) if failed else None
        elif (missing := _EXPORT_FAILURE.search(error["message"])) is not None:
            site = self._export_site(error, missing["module"], missing["name"])
        if site is not None:
            importer, line, column = site
            stack = str(error.get("stack") or "").rstrip("\n")
            error["stack"] = f"{stack}\n    at {importer}:{line}:{column}\n"

    def _export_site(
        self, error: dict[str, Any], module: str, name: str
    ) -> tuple[str, int, int] | None:
        """Where the missing export ``name`` of ``module`` is first imported. QuickJS names
        the module by its resolved name (``import:env``): the message gets the importer's
        specifier instead, which also becomes the error's ``specifier``."""
        requests = [r for r in self.requests if r.resolved == module]
        if not requests:
            return None
        for request in requests:
            site = self._site(request, name)
            if site is not None:
                break
        else:  # no import names it (an `export *` chain, say): point at the first request
            request = requests[0]
            site = self._site(request)
        for key in ("message", "stack"):
            head, quoted, tail = str(error.get(key) or "").rpartition(f"'{module}'")
            error[key] = f"{head}'{request.specifier}'{tail}" if quoted else tail
        error["specifier"] = request.specifier
        return site

    def _site(self, request: _Request, name: str | None = None) -> tuple[str, int, int] | None:
        if request.importer == self.filename:
            source: str | None = self.payload["source"]
        else:
            source = self.payload["modules"].get(request.importer)
        if source is None:
            return None
        typescript = self.payload["language"] == "typescript"
        position = import_site(source, request.specifier, name, typescript=typescript)
        return None if position is None else (request.importer, *position)

    def _classify(self, status: str, error: dict[str, Any]) -> dict[str, Any]:
        info: ErrorInfo = {
            "name": str(error.get("name") or "Error"),
            "message": str(error.get("message") or ""),
        }
        if isinstance(error.get("stack"), str) and error["stack"]:
            info["stack"] = error["stack"]
            location = _location(error["stack"], self._user_modules())
            if location is not None:
                info["filename"], info["line"], info["column"] = location
        if error.get("specifier"):
            info["specifier"] = str(error["specifier"])
        if status == "link_error":
            self._name_the_nesting(info)
        if _MEMORY.search(info["message"]) or self._memory_exhausted(info):
            return self._memory(f"{info['name']}: {info['message']}")
        return {"status": status, "error": info}

    def _name_the_nesting(self, info: ErrorInfo) -> None:
        """Say so when a compile failure comes from nesting. QuickJS's parser recurses;
        past its stack limit it reports a stack overflow, or "invalid property name" in a
        deep object literal, so a syntax error as deep as ``DEEP_NESTING`` counts too."""
        overflow = _STACK.search(info["message"]) is not None
        if not overflow and info["name"] != "SyntaxError":
            return
        source = self.sources.get(info.get("filename", ""))
        depth = 0
        if source is not None and "line" in info and "column" in info:
            depth = nesting_at(source, info["line"], info["column"])
        if not overflow and depth < DEEP_NESTING:
            return
        where = (
            f" ({depth} levels deep at {info['line']}:{info['column']})"
            if depth
            else " (brackets, blocks or functions inside one another past the parser's limit)"
        )
        info["name"] = "SyntaxError"
        info["message"] = f"the code is nested too deeply to compile{where}: {info['message']}"

    def _memory_exhausted(self, info: ErrorInfo) -> bool:
        # When even the error object cannot be allocated QuickJS throws `null`; it is an
        # overrun when the heap is at the limit.
        if info["message"] not in ("", "null") and info["name"] != "null":
            return False
        context = self.context
        if context is None:
            return False
        try:
            used = int(context.memory()["malloc_size"])
        except Exception:  # the memory probe itself may fail at the limit
            return True
        # malloc_size counts the allocator's view, which sits at the limit right after an
        # allocation was refused; a guest's own `throw null` far from it stays an error.
        return used >= self.payload["memory_limit_bytes"] * MEMORY_SUSPICION_RATIO

    def _memory(self, detail: str) -> dict[str, Any]:
        limit = self.payload["memory_limit_bytes"]
        return {
            "status": "memory",
            "error": {
                "name": "MemoryError",
                "message": f"out of memory: the memory limit is {limit} bytes ({detail.strip()})",
            },
        }

    def _user_modules(self) -> set[str]:
        return set(self.sources)

    def _check_cancelled(self) -> None:
        if self.cpu_exceeded and self.cpu is not None:
            raise _Settled(
                _failure(
                    "terminated",
                    "TerminatedError",
                    f"the call used more than its CPU time limit of {self.cpu.seconds:g} s "
                    "(a safety cap of the sandbox)",
                )
            )
        if self.cancelled.is_set():
            raise _Settled(
                _failure("terminated", "TerminatedError", "terminated by the dispatcher")
            )

    # -- plumbing ---------------------------------------------------------------------

    def _call(self, op: str, *args: object) -> Any:
        return self._guard(lambda: self.bridge(op, *args))

    def _drain_jobs(self) -> None:
        context = self.context
        assert context is not None
        while self._guard(context.execute_pending_job):
            pass

    def _guard(self, action: Any) -> Any:
        """Run a binding call; map what escapes it (interrupts, OOM) to a settlement."""
        try:
            return action()
        except quickjs.JSException as error:
            self._check_cancelled()
            raise _Settled(self._exception("error", str(error))) from None
        except MemoryError:
            raise _Settled(self._memory("the host ran out of memory")) from None

    def logs(self) -> list[Any]:
        if self.bridge is None:
            return []
        try:
            self.interruptible = False  # the capture itself must be allowed to run
            try:
                text = self.bridge("logs")
            finally:
                self.interruptible = True
            return json.loads(text) if isinstance(text, str) else []
        except Exception:  # logs are best effort after an overrun or a cancel
            return []

    def close(self) -> None:
        if self.module_access is not None and self.js_context:
            lib.JS_FreeValue(self.js_context, self.module_access)
            self.module_access = None
        self.bridge = None
        self.context = None  # frees the runtime; the callbacks must outlive it
        self._callbacks = ()


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogatepass")


def _synthetic_source(specifier: str, names: Iterable[str]) -> str:
    lines = [f"const ns = import.meta.sandbox.namespace({json.dumps(specifier)});"]
    for index, name in enumerate(names):
        if name == "default":
            lines.append('export default ns["default"];')
        else:
            lines.append(
                f"const e{index} = ns[{json.dumps(name)}];"
                f" export {{ e{index} as {json.dumps(name)} }};"
            )
    return "\n".join(lines)


def _location(stack: str, modules: set[str]) -> tuple[str, int, int] | None:
    """The first frame of ``stack`` that lies in one of the caller's modules."""
    for line in stack.splitlines():
        match = _FRAME.match(line)
        if match is not None and match["file"] in modules:
            return match["file"], int(match["line"]), int(match["column"])
    return None


def _failure(
    status: str,
    name: str,
    message: str,
    filename: str | None = None,
    line: int | None = None,
    column: int | None = None,
) -> dict[str, Any]:
    error: dict[str, Any] = {"name": name, "message": message}
    if filename is not None:
        error["filename"] = filename
    if line is not None:
        error["line"] = line
        error["column"] = column
    return {"status": status, "error": error}


def _prelude() -> bytes:
    """The prelude's bytecode, compiled once per runner process (parsing it per call
    would cost about a millisecond)."""
    global _prelude_bytecode
    if _prelude_bytecode is None:
        _prelude_bytecode = capi.compile_script_bytecode(
            "globalThis.__sandbox_bridge = " + PRELUDE, "<prelude>"
        )
    return _prelude_bytecode


class _NoHost:
    def send_tool_call(self, call_id: str, target: str, payload_json: str) -> None:
        raise RuntimeError("no host during warm-up")

    def next_message(self) -> dict[str, Any]:
        raise RuntimeError("no host during warm-up")


def warm_up() -> None:
    """Compile the prelude and exercise the parser and a context once, so that a runner's
    first real call costs what every later one does."""
    payload: ExecutePayload = {
        "source": "export default (x: number): number => x;",
        "language": "typescript",
        "filename": "<warm-up>",
        "fn": "default",
        "args": [1],
        "has_args": True,
        "imports": {},
        "globals": {},
        "modules": {},
        "report": False,
        "memory_limit_bytes": 16 * 1024 * 1024,
        "stack_limit_bytes": 256 * 1024,
        "max_log_entries": 1,
        "max_log_bytes": 1024,
        "max_result_bytes": 1024,
        "max_host_call_bytes": 1024,
        "max_pending_host_calls": 1,
        "max_value_depth": 1,
    }
    body = execute(payload, _NoHost(), threading.Event())
    if body["status"] != "success" or body.get("result") != 1:
        raise RuntimeError(f"the sandbox engine failed its warm-up: {body}")
