"""run_code options: validation, limits and their encoding into an ``execute`` payload.

Options follow the caller contract (camelCase keys as in the spec, snake_case accepted
too): ``language``, ``filename``, ``execute`` ``{fn, args}``, ``imports``, ``globals``,
``modules``, ``memoryLimitBytes``, ``report``. Any other key, or a bad value, is an
``InvalidCodeExecutionOptions`` that the caller sees as ``status: 'link_error'``.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from sandbox.marshal import MAX_VALUE_DEPTH, HostFunctions, SerializationError, encode
from sandbox.protocol import ExecutePayload

MiB: Final = 1024 * 1024

# Memory: a caller value above the ceiling is clamped to it (the spec's option (a)); an
# overrun then settles ``memory`` with a message naming the effective limit.
DEFAULT_MEMORY_LIMIT_BYTES: Final = 64 * MiB
MEMORY_LIMIT_CEILING_BYTES: Final = 256 * MiB
# Native stack for guest code: deep recursion throws RangeError (status ``error``).
STACK_LIMIT_BYTES: Final = 1 * MiB
# Console capture caps: entries past either are dropped and counted in a final warning.
MAX_LOG_ENTRIES: Final = 1000
MAX_LOG_BYTES: Final = 1 * MiB
# The encoded result may not exceed this.
MAX_RESULT_BYTES: Final = 16 * MiB
# Host calls: the encoded arguments of one call, and how many calls (report() included)
# may await the host at once; beyond either the guest's call rejects with a RangeError.
# Together they bound what one guest can make the host hold (32 x 4 MiB).
MAX_HOST_CALL_BYTES: Final = 4 * MiB
MAX_PENDING_HOST_CALLS: Final = 32
# Source text of the entry module plus options.modules.
MAX_SOURCE_BYTES: Final = 4 * MiB

DEFAULT_FILENAME: Final = "<runCode>"
_KNOWN = {
    "language": "language",
    "filename": "filename",
    "execute": "execute",
    "imports": "imports",
    "globals": "globals",
    "modules": "modules",
    "memoryLimitBytes": "memory_limit_bytes",
    "memory_limit_bytes": "memory_limit_bytes",
    "report": "report",
}
_IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")
_URL_LIKE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_RESERVED_GLOBALS = frozenset({"report"})


class InvalidCodeExecutionOptions(ValueError):
    """Options the sandbox refuses; run_code settles them as ``link_error``."""

    def __init__(self, message: str, *, specifier: str | None = None) -> None:
        super().__init__(message)
        self.specifier = specifier


@dataclass(frozen=True)
class PreparedCall:
    payload: ExecutePayload
    functions: HostFunctions
    report: Callable[[Any], object] | None


def prepare(source: str, options: Mapping[str, Any] | None) -> PreparedCall:
    """Validate ``options`` and encode everything the runner needs.

    Raises ``InvalidCodeExecutionOptions`` (the caller's ``link_error``) for unknown keys,
    bad values, relative or URL specifiers in ``imports``, non-relative keys in
    ``modules``, non-identifier ``globals`` names, values that cannot cross, and source
    text, filenames or specifiers that are not valid Unicode (a lone surrogate).
    """
    if not isinstance(source, str):
        raise InvalidCodeExecutionOptions("source must be a string")
    _require_unicode(source, "source")
    given: dict[str, Any] = {}
    for key, value in (options or {}).items():
        if key not in _KNOWN:
            raise InvalidCodeExecutionOptions(
                f"unknown option {key!r}; known: language, filename, execute, imports, "
                "globals, modules, memoryLimitBytes, report"
            )
        given[_KNOWN[key]] = value
    functions = HostFunctions()
    language = _language(given.get("language", "typescript"))
    filename = _filename(given.get("filename", DEFAULT_FILENAME))
    fn, args, has_args = _execute(given.get("execute"), functions)
    modules = _modules(given.get("modules"))
    size = len(source.encode()) + sum(len(text.encode()) for text in modules.values())
    if size > MAX_SOURCE_BYTES:
        raise InvalidCodeExecutionOptions(
            f"source and modules total {size} bytes, over MAX_SOURCE_BYTES={MAX_SOURCE_BYTES}"
        )
    report = given.get("report")
    if report is not None and not callable(report):
        raise InvalidCodeExecutionOptions("report must be a callable")
    payload: ExecutePayload = {
        "source": source,
        "language": language,
        "filename": filename,
        "fn": fn,
        "args": args,
        "has_args": has_args,
        "imports": _imports(given.get("imports"), functions),
        "globals": _globals(given.get("globals"), functions),
        "modules": modules,
        "report": report is not None,
        "memory_limit_bytes": _memory_limit(given.get("memory_limit_bytes")),
        "stack_limit_bytes": STACK_LIMIT_BYTES,
        "max_log_entries": MAX_LOG_ENTRIES,
        "max_log_bytes": MAX_LOG_BYTES,
        "max_result_bytes": MAX_RESULT_BYTES,
        "max_host_call_bytes": MAX_HOST_CALL_BYTES,
        "max_pending_host_calls": MAX_PENDING_HOST_CALLS,
        "max_value_depth": MAX_VALUE_DEPTH,
    }
    return PreparedCall(payload=payload, functions=functions, report=report)


def _require_unicode(text: str, what: str, *, specifier: str | None = None) -> None:
    """Refuse text UTF-8 cannot carry: QuickJS and the parser read source as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        line = text.count("\n", 0, error.start) + 1
        column = error.start - (text.rfind("\n", 0, error.start) + 1) + 1
        raise InvalidCodeExecutionOptions(
            f"{what} is not valid Unicode: a lone surrogate U+{ord(text[error.start]):04X} "
            f"at {line}:{column}",
            specifier=specifier,
        ) from None


def effective_memory_limit(requested: int | None) -> int:
    """The limit a call runs under: the default when omitted, clamped to the ceiling."""
    if requested is None:
        return DEFAULT_MEMORY_LIMIT_BYTES
    return min(requested, MEMORY_LIMIT_CEILING_BYTES)


def _language(value: object) -> Literal["typescript", "javascript"]:
    if value == "typescript":
        return "typescript"
    if value == "javascript":
        return "javascript"
    raise InvalidCodeExecutionOptions(
        f"language must be 'typescript' or 'javascript', not {value!r}"
    )


def _filename(value: object) -> str:
    if not isinstance(value, str) or not value or "\x00" in value:
        raise InvalidCodeExecutionOptions("filename must be a non-empty string")
    _require_unicode(value, "filename")
    # The entry module is registered under its filename; these prefixes name other kinds
    # of module inside the runner, and "<input>" is the runner's own script names.
    if value.startswith(("./", "../", "import:", "sandbox:")) or value in ("<input>", "<prelude>"):
        raise InvalidCodeExecutionOptions(
            f"filename {value!r} may not start with './', '../', 'import:' or 'sandbox:'"
        )
    return value


def _execute(value: object, functions: HostFunctions) -> tuple[str, list[Any], bool]:
    if value is None:
        return "default", [], False
    if not isinstance(value, Mapping) or set(value) - {"fn", "args"}:
        raise InvalidCodeExecutionOptions("execute must be a mapping with only 'fn' and 'args'")
    fn = value.get("fn", "default")
    if not isinstance(fn, str) or not fn:
        raise InvalidCodeExecutionOptions("execute.fn must be a non-empty string")
    args = value.get("args", [])
    if not isinstance(args, Sequence) or isinstance(args, str | bytes):
        raise InvalidCodeExecutionOptions("execute.args must be a list")
    try:
        encoded = [encode(arg, f"execute.args[{i}]", functions) for i, arg in enumerate(args)]
    except SerializationError as error:
        raise InvalidCodeExecutionOptions(str(error)) from error
    return fn, encoded, len(args) > 0


def _imports(value: object, functions: HostFunctions) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidCodeExecutionOptions("imports must be a mapping of specifier -> namespace")
    result: dict[str, Any] = {}
    for specifier, namespace in value.items():
        if not isinstance(specifier, str) or not specifier or "\x00" in specifier:
            raise InvalidCodeExecutionOptions("imports keys must be non-empty strings")
        _require_unicode(specifier, "an imports specifier")
        if specifier.startswith((".", "/")) or _URL_LIKE.match(specifier):
            raise InvalidCodeExecutionOptions(
                f"imports may hold bare specifiers only, not {specifier!r}", specifier=specifier
            )
        if not isinstance(namespace, Mapping) or not all(isinstance(k, str) for k in namespace):
            raise InvalidCodeExecutionOptions(
                f"imports[{specifier!r}] must be a mapping of export name -> value",
                specifier=specifier,
            )
        for name in namespace:
            _require_unicode(name, f"an export name of imports[{specifier!r}]", specifier=specifier)
        try:
            result[specifier] = encode(dict(namespace), f"imports[{specifier!r}]", functions)
        except SerializationError as error:
            raise InvalidCodeExecutionOptions(str(error), specifier=specifier) from error
    return result


def _globals(value: object, functions: HostFunctions) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidCodeExecutionOptions("globals must be a mapping of name -> value")
    result: dict[str, Any] = {}
    for name, item in value.items():
        if not isinstance(name, str) or not _IDENTIFIER.match(name):
            raise InvalidCodeExecutionOptions(f"globals name {name!r} is not an identifier")
        if name in _RESERVED_GLOBALS:
            raise InvalidCodeExecutionOptions(f"globals name {name!r} is reserved")
        try:
            result[name] = encode(item, f"globals.{name}", functions)
        except SerializationError as error:
            raise InvalidCodeExecutionOptions(str(error)) from error
    return result


def _modules(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidCodeExecutionOptions("modules must be a mapping of './path' -> source")
    result: dict[str, str] = {}
    for specifier, text in value.items():
        if not isinstance(specifier, str) or not specifier.startswith(("./", "../")):
            raise InvalidCodeExecutionOptions(
                f"modules keys must be relative specifiers ('./x.ts'), not {specifier!r}",
                specifier=specifier if isinstance(specifier, str) else None,
            )
        if not isinstance(text, str):
            raise InvalidCodeExecutionOptions(f"modules[{specifier!r}] must be source text")
        _require_unicode(specifier, "a modules specifier", specifier=specifier)
        _require_unicode(text, f"modules[{specifier!r}]", specifier=specifier)
        result[normalize_relative("", specifier)] = text
    return result


def normalize_relative(base_dir: str, specifier: str) -> str:
    """``specifier`` resolved against ``base_dir`` inside the sandbox's virtual root.

    The entry module sits at the root; ``..`` never climbs above it. The result is
    always ``./path``.
    """
    joined = posixpath.normpath(posixpath.join("/", base_dir, specifier))
    return "./" + joined.lstrip("/")


def _memory_limit(value: object) -> int:
    if value is None:
        return DEFAULT_MEMORY_LIMIT_BYTES
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InvalidCodeExecutionOptions("memoryLimitBytes must be a positive finite number")
    if value == float("inf"):
        raise InvalidCodeExecutionOptions("memoryLimitBytes must be a positive finite number")
    return effective_memory_limit(int(value))
