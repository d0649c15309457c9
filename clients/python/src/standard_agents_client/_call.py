"""One description of a request: what to send and how to read the answer.

Every operation of the client is a pure function that builds a :class:`Call` from its
arguments (``_operations/``); :class:`~standard_agents_client.Client` sends it with
``httpx.Client`` and :class:`~standard_agents_client.AsyncClient` with
``httpx.AsyncClient``, each raising the same errors and parsing the answer with the call's
own ``parse``. Nothing about an operation is written twice.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from standard_agents_client.errors import UnexpectedAnswer
from standard_agents_client.pagination import Page, page_from_json

T = TypeVar("T")

API_PREFIX = "/api/v1"
EVENT_STREAM = "text/event-stream"
IDEMPOTENCY_KEY = "Idempotency-Key"


@dataclass(frozen=True)
class Upload:
    """Bytes to send as a request body: in memory, a file's path, or an open binary file
    (read from where it stands)."""

    source: bytes | Path | IO[bytes]

    @classmethod
    def of(cls, data: bytes | str | os.PathLike[str] | IO[bytes]) -> Upload:
        """``bytes`` as they are, ``str`` or a path-like as a file to read, else an open
        binary file."""
        if isinstance(data, bytes | bytearray | memoryview):
            return cls(bytes(data))
        if isinstance(data, str | os.PathLike):
            return cls(Path(data))
        return cls(data)

    def size(self) -> int | None:
        """The body's length when it can be known before sending."""
        if isinstance(self.source, bytes):
            return len(self.source)
        if isinstance(self.source, Path):
            return self.source.stat().st_size
        try:
            return os.fstat(self.source.fileno()).st_size - self.source.tell()
        except (AttributeError, OSError, ValueError):
            return None


@dataclass(frozen=True)
class Call(Generic[T]):
    """A request to the API and the reading of its answer.

    ``path`` is under ``/api/v1`` (``/threads/…``), or an absolute URL (a page's
    ``next``). ``json`` is the body as JSON (None: no JSON body); ``content`` a raw body;
    ``files``/``data`` a multipart body. ``timeout`` overrides the client's read timeout
    (a call that waits on the server, like a turn's wait, needs longer). ``parse`` turns a
    successful, read answer into the result.
    """

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: Mapping[str, str] = field(default_factory=dict)
    json: Any = None
    content: Upload | None = None
    files: Mapping[str, tuple[str, Upload, str | None]] | None = None
    data: Mapping[str, str] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: float | None = None


@dataclass(frozen=True)
class Download:
    """A file's download streamed to ``destination`` (a local path or an open binary
    file)."""

    call: Call[bytes]
    destination: str | os.PathLike[str] | IO[bytes]


# Reading answers -------------------------------------------------------------------------------


def read_json(response: httpx.Response) -> Any:
    """The answer's JSON (a typed dictionary for the caller's type checker)."""
    try:
        return response.json()
    except ValueError:
        raise UnexpectedAnswer(
            f"{response.request.method} {response.request.url} answered "
            f"{response.status_code} without JSON: {response.text[:200]!r}"
        ) from None


def read_page(response: httpx.Response) -> Page[Any]:
    return page_from_json(read_json(response))


def read_nothing(response: httpx.Response) -> None:
    return None


def read_bytes(response: httpx.Response) -> bytes:
    return response.content


def read_text(response: httpx.Response) -> str:
    return response.text


def follow(url: str) -> Call[Page[Any]]:
    """The call that fetches a page from one of a list's ``next``/``previous`` URLs."""
    return Call("GET", url, read_page)


# Building requests -----------------------------------------------------------------------------


def segment(value: object) -> str:
    """One path segment: an id or a name, percent-encoded (a ``/`` too)."""
    return quote(str(value), safe="")


def subpath(value: str) -> str:
    """A path inside a path (a file's, a KV key): each segment encoded, ``/`` kept. A
    ``.`` or ``..`` segment is sent encoded, so the server judges it (HTTP clients would
    resolve it away)."""
    return "/".join(_DOTS.get(part, quote(part, safe="")) for part in value.lstrip("/").split("/"))


_DOTS = {".": "%2E", "..": "%2E%2E"}


QueryValue = str | int | float | bool | dt.datetime | None


def query(**values: QueryValue) -> dict[str, str]:
    """Query parameters: None left out, booleans ``true``/``false``, datetimes ISO 8601."""
    params: dict[str, str] = {}
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool):
            params[name] = "true" if value else "false"
        elif isinstance(value, dt.datetime):
            params[name] = value.isoformat()
        else:
            params[name] = str(value)
    return params


def body(**values: Any) -> dict[str, Any]:
    """A JSON body of the values given (None left out)."""
    return {name: value for name, value in values.items() if value is not None}


def idempotency(key: str | None) -> dict[str, str]:
    return {IDEMPOTENCY_KEY: key} if key is not None else {}


def json_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
