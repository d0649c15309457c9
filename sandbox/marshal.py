"""Values across the sandbox boundary: Python objects <-> the tagged JSON the guest reads.

Only JSON text crosses between the host, the runner process and the guest. JSON alone
cannot say ``undefined``, ``NaN``, ``-0``, bigint, ``Map``, ``Set``, ``Date``, typed
arrays or "this is a host function", so those travel as tagged nodes; the same codec is
implemented in JavaScript in ``prelude.js``.

Encoded form (``Node``):

- ``null``, booleans, strings and finite numbers other than ``-0`` are themselves;
- a JSON array is an array whose elements are nodes;
- every JSON object is a tagged node ``{"$": tag, ...}``: ``object`` (``v``: name -> node),
  ``undefined``, ``number`` (``v``: ``"NaN"``, ``"Infinity"``, ``"-Infinity"``, ``"-0"``),
  ``bigint`` (``v``: decimal text), ``date`` (``v``: epoch milliseconds), ``map``
  (``v``: ``[[key, value], ...]``), ``set`` (``v``: ``[...]``), ``bytes`` (``k``: the
  typed-array class or ``ArrayBuffer``, ``v``: base64) and ``function`` (``id``: a host
  function id, host -> guest only).

Python representations: ``UNDEFINED``; ``int`` (a JS number that is an integer, or a
bigint; Python ints outside the safe-integer range become bigints); ``float``; ``str``;
``dict`` with string keys (plain object); ``list``/``tuple`` (array); ``JSMap``;
``set``/``frozenset``; aware ``datetime`` (Date, UTC); ``bytes``/``bytearray``
(``Uint8Array``); ``TypedArray`` (every other typed array and ``ArrayBuffer``);
callables (host functions, host -> guest only). Anything else is a
``SerializationError`` naming where it was found, and so is what one side has but the
other cannot hold: containers nested deeper than ``MAX_VALUE_DEPTH``, integers beyond
Python's 4300-digit conversion limit, Dates outside the years 1-9999, and Map keys or Set
items that are distinct in JavaScript but equal (or unhashable) in Python. Strings with
lone surrogates cross as they are (Python can hold them; storing them is the caller's
concern).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

Node = Any  # a JSON value in the tagged form above

MAX_SAFE_INTEGER: Final = 2**53 - 1
# Containers inside containers, both ways. Each side walks values recursively (the guest
# in QuickJS under its 1 MiB stack, the host and the runner in Python and its json module
# under the default recursion limit of 1000, with a Map costing three JSON levels): 200
# leaves room in all of them, so the limit, not a stack, is what a deep value meets.
MAX_VALUE_DEPTH: Final = 200
TYPED_ARRAY_KINDS: Final = frozenset(
    {
        "ArrayBuffer", "Int8Array", "Uint8Array", "Uint8ClampedArray", "Int16Array",
        "Uint16Array", "Int32Array", "Uint32Array", "Float16Array", "Float32Array",
        "Float64Array", "BigInt64Array", "BigUint64Array",
    }
)  # fmt: skip
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class SerializationError(ValueError):
    """A value that cannot cross the sandbox boundary; ``path`` says where it was."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class _Undefined:
    """JavaScript's ``undefined`` (``None`` is ``null``)."""

    _instance: _Undefined | None = None

    def __new__(cls) -> _Undefined:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNDEFINED"

    def __bool__(self) -> bool:
        return False


UNDEFINED: Final = _Undefined()


class JSMap(dict[Any, Any]):
    """A JavaScript ``Map``: a dict that crosses back as a ``Map``, keys of any type."""


@dataclass(frozen=True)
class TypedArray:
    """A typed array other than ``Uint8Array`` (which is ``bytes``), or an ``ArrayBuffer``."""

    kind: str
    data: bytes

    def __post_init__(self) -> None:
        if self.kind not in TYPED_ARRAY_KINDS:
            raise ValueError(f"unknown typed array kind {self.kind!r}")


class HostFunctions:
    """Host callables met while encoding, by the id the guest will call them with."""

    def __init__(self) -> None:
        self.by_id: dict[str, Callable[..., Any]] = {}

    def register(self, function: Callable[..., Any], path: str) -> str:
        function_id = f"f{len(self.by_id)}:{path}"
        self.by_id[function_id] = function
        return function_id


def encode(value: object, path: str, functions: HostFunctions | None = None) -> Node:
    """The tagged-JSON node for ``value``; callables are allowed only with ``functions``.

    Raises ``SerializationError`` naming the path of the first value that cannot cross
    (including cycles and nesting deeper than ``MAX_VALUE_DEPTH``).
    """
    try:
        return _encode(value, path, functions, set(), 0)
    except RecursionError:  # a caller already deep in its own stack
        raise SerializationError(path, _TOO_DEEP_FOR_THE_HOST) from None


_TOO_DEEP_FOR_THE_HOST: Final = "nested too deeply for the host's recursion limit"


def _too_deep(path: str) -> SerializationError:
    shown = path if len(path) <= 100 else f"{path[:60]}...{path[-30:]}"
    return SerializationError(
        shown, f"nested deeper than {MAX_VALUE_DEPTH} levels (MAX_VALUE_DEPTH), which cannot cross"
    )


def _encode(
    value: object, path: str, functions: HostFunctions | None, seen: set[int], depth: int
) -> Node:
    if value is None or isinstance(value, bool | str):
        return value
    if value is UNDEFINED:
        return {"$": "undefined"}
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            try:
                return {"$": "bigint", "v": str(value)}
            except ValueError:  # past sys.get_int_max_str_digits()
                raise SerializationError(
                    path, "an int too long to convert to decimal (Python's 4300-digit limit)"
                ) from None
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return {"$": "number", "v": "NaN"}
        if math.isinf(value):
            return {"$": "number", "v": "Infinity" if value > 0 else "-Infinity"}
        if value == 0 and math.copysign(1.0, value) < 0:
            return {"$": "number", "v": "-0"}
        return value
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise SerializationError(path, "naive datetime (give it a timezone)")
        return {"$": "date", "v": (value - _EPOCH) / timedelta(milliseconds=1)}
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        return {"$": "bytes", "k": "Uint8Array", "v": base64.b64encode(data).decode()}
    if isinstance(value, TypedArray):
        return {"$": "bytes", "k": value.kind, "v": base64.b64encode(value.data).decode()}
    if callable(value) and not isinstance(value, type):
        if functions is None:
            raise SerializationError(path, "functions cross only through imports and globals")
        return {"$": "function", "id": functions.register(value, path)}
    if id(value) in seen:
        raise SerializationError(path, "cyclic structure")
    if depth >= MAX_VALUE_DEPTH:
        raise _too_deep(path)
    seen.add(id(value))
    try:
        return _encode_container(value, path, functions, seen, depth + 1)
    finally:
        seen.discard(id(value))


def _encode_container(
    value: object, path: str, functions: HostFunctions | None, seen: set[int], depth: int
) -> Node:
    # Loops rather than comprehensions: each comprehension is one more frame per level.
    if isinstance(value, JSMap):
        pairs: list[Node] = []
        for i, (key, item) in enumerate(value.items()):
            encoded_key = _encode(key, f"{path}<key {i}>", functions, seen, depth)
            pairs.append([encoded_key, _encode(item, f"{path}<value {i}>", functions, seen, depth)])
        return {"$": "map", "v": pairs}
    if isinstance(value, dict):
        members: dict[str, Node] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise SerializationError(f"{path}", f"object key {key!r} is not a string")
            members[key] = _encode(item, _member(path, key), functions, seen, depth)
        return {"$": "object", "v": members}
    if isinstance(value, list | tuple | set | frozenset):
        is_set = isinstance(value, set | frozenset)
        items: list[Node] = []
        for i, item in enumerate(value):
            where = f"{path}<item {i}>" if is_set else f"{path}[{i}]"
            items.append(_encode(item, where, functions, seen, depth))
        return {"$": "set", "v": items} if is_set else items
    raise SerializationError(path, f"a {type(value).__name__} is not transferable")


def _member(path: str, key: str) -> str:
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]"


def decode(node: Node, path: str = "value") -> Any:
    """The Python value of a tagged-JSON node produced by the guest.

    Raises ``SerializationError`` for malformed nodes, nesting deeper than
    ``MAX_VALUE_DEPTH``, and values Python cannot hold (see the module docstring).
    """
    try:
        return _decode(node, path, 0)
    except RecursionError:
        raise SerializationError(path, _TOO_DEEP_FOR_THE_HOST) from None


def _decode(node: Node, path: str, depth: int) -> Any:
    if node is None or isinstance(node, bool | int | float | str):
        return node
    if depth >= MAX_VALUE_DEPTH:
        raise _too_deep(path)
    depth += 1
    if isinstance(node, list):
        items = []
        for i, item in enumerate(node):
            items.append(_decode(item, f"{path}[{i}]", depth))
        return items
    if not isinstance(node, dict):
        raise SerializationError(path, "malformed value")
    tag = node.get("$")
    if tag == "object":
        members = {}
        for key, item in node["v"].items():
            members[key] = _decode(item, _member(path, key), depth)
        return members
    if tag == "map":
        result = JSMap()
        for i, (key, item) in enumerate(node["v"]):
            decoded_key = _decode(key, f"{path}<key {i}>", depth)
            _require_new(decoded_key, result, f"{path}<key {i}>", "keys of this Map")
            result[decoded_key] = _decode(item, f"{path}<value {i}>", depth)
        return result
    if tag == "set":
        members_of_set: set[Any] = set()
        for i, item in enumerate(node["v"]):
            decoded = _decode(item, f"{path}<item {i}>", depth)
            _require_new(decoded, members_of_set, f"{path}<item {i}>", "items of this Set")
            members_of_set.add(decoded)
        return members_of_set
    return _decode_scalar(node, tag, path)


def _decode_scalar(node: dict[str, Any], tag: object, path: str) -> Any:
    if tag == "undefined":
        return UNDEFINED
    if tag == "number":
        return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf, "-0": -0.0}[
            node["v"]
        ]
    if tag == "bigint":
        try:
            return int(node["v"])
        except ValueError as error:  # longer than Python converts (sys.int_info)
            raise SerializationError(
                path, f"a BigInt of {len(str(node['v']))} digits is larger than the host "
                "accepts (4300 digits); send it as a string",
            ) from error  # fmt: skip
    if tag == "date":
        millis = node["v"]
        if not isinstance(millis, int | float) or not math.isfinite(millis):
            raise SerializationError(path, "an invalid Date is not transferable")
        try:
            return _EPOCH + timedelta(milliseconds=millis)
        except OverflowError as error:
            raise SerializationError(
                path, "a Date outside the years 1-9999 cannot cross to the host; send "
                "date.toISOString() or its epoch milliseconds",
            ) from error  # fmt: skip
    if tag == "bytes":
        data = base64.b64decode(node["v"])
        return data if node["k"] == "Uint8Array" else TypedArray(node["k"], data)
    raise SerializationError(path, f"unknown tag {tag!r}")


def _require_new(value: object, seen: set[Any] | dict[Any, Any], path: str, what: str) -> None:
    """Refuse what Python cannot hash, or would merge with an earlier member: 1 and 1n,
    two Date objects of the same instant, two typed arrays with the same bytes."""
    _require_hashable(value, path)
    if value in seen:
        raise SerializationError(
            path, f"two {what} are distinct in JavaScript but equal in Python ({value!r})"
        )


def _require_hashable(value: object, path: str) -> None:
    try:
        hash(value)
    except TypeError:
        raise SerializationError(path, "not hashable in Python (an object as a key)") from None
