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
``SerializationError`` naming where it was found.
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
    (including cycles).
    """
    return _encode(value, path, functions, set())


def _encode(value: object, path: str, functions: HostFunctions | None, seen: set[int]) -> Node:
    if value is None or isinstance(value, bool | str):
        return value
    if value is UNDEFINED:
        return {"$": "undefined"}
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            return {"$": "bigint", "v": str(value)}
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
    seen.add(id(value))
    try:
        return _encode_container(value, path, functions, seen)
    finally:
        seen.discard(id(value))


def _encode_container(
    value: object, path: str, functions: HostFunctions | None, seen: set[int]
) -> Node:
    if isinstance(value, JSMap):
        return {
            "$": "map",
            "v": [
                [_encode(k, f"{path}<key {i}>", functions, seen),
                 _encode(v, f"{path}<value {i}>", functions, seen)]
                for i, (k, v) in enumerate(value.items())
            ],
        }  # fmt: skip
    if isinstance(value, dict):
        encoded: dict[str, Node] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise SerializationError(f"{path}", f"object key {key!r} is not a string")
            encoded[key] = _encode(item, _member(path, key), functions, seen)
        return {"$": "object", "v": encoded}
    if isinstance(value, list | tuple):
        return [_encode(item, f"{path}[{i}]", functions, seen) for i, item in enumerate(value)]
    if isinstance(value, set | frozenset):
        return {
            "$": "set",
            "v": [_encode(item, f"{path}<item {i}>", functions, seen)
                  for i, item in enumerate(value)],
        }  # fmt: skip
    raise SerializationError(path, f"a {type(value).__name__} is not transferable")


def _member(path: str, key: str) -> str:
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]"


def decode(node: Node, path: str = "value") -> Any:
    """The Python value of a tagged-JSON node produced by the guest.

    Raises ``SerializationError`` for malformed nodes and for map keys or set items
    that Python cannot hash (a ``Map`` keyed by objects, for example).
    """
    if node is None or isinstance(node, bool | int | float | str):
        return node
    if isinstance(node, list):
        return [decode(item, f"{path}[{i}]") for i, item in enumerate(node)]
    if not isinstance(node, dict):
        raise SerializationError(path, "malformed value")
    tag = node.get("$")
    if tag == "object":
        return {key: decode(item, _member(path, key)) for key, item in node["v"].items()}
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
    if tag == "map":
        result = JSMap()
        for i, (key, item) in enumerate(node["v"]):
            decoded_key = decode(key, f"{path}<key {i}>")
            _require_hashable(decoded_key, f"{path}<key {i}>")
            result[decoded_key] = decode(item, f"{path}<value {i}>")
        return result
    if tag == "set":
        items = [decode(item, f"{path}<item {i}>") for i, item in enumerate(node["v"])]
        for i, item in enumerate(items):
            _require_hashable(item, f"{path}<item {i}>")
        return set(items)
    raise SerializationError(path, f"unknown tag {tag!r}")


def _require_hashable(value: object, path: str) -> None:
    try:
        hash(value)
    except TypeError:
        raise SerializationError(path, "not hashable in Python (an object as a key)") from None
