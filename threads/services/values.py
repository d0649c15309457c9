"""The durable per-thread KV store behind ``getValue`` / ``setValue`` (runtime spec §14).

Contracts:

* Each thread has its own key space (rows are keyed by ``(thread, key)``); nothing is copied
  to child threads.
* Values are JSON: ``None``, ``bool``, ``int``, finite ``float``, ``str``, ``list`` and
  ``dict`` with ``str`` keys, of exactly those types. Tuples, sets, bytes, subclasses (an
  ``IntEnum``, an ``OrderedDict``) and any other object are rejected, because they would not
  come back as what was stored; so are NaN/Infinity, lone surrogates and cycles. A violation
  raises :class:`ValidationFailed` (``field="value"``) whose message and ``details["path"]``
  give a ``$``-rooted path such as ``$.a[2].b``.
* ``value_set(key, None)`` deletes the key.
* Values are stored encrypted with the tenant data key, bound to
  ``threads.ThreadValue:<thread id>:<key>`` (a rename re-encrypts).
* Every write runs in ``transaction.atomic``: on return it is committed, unless the caller
  holds an outer transaction, in which case it is durable when that one commits.

Caps (runtime §14.2), each named in its :class:`LimitExceeded` message:
:data:`MAX_KEY_LENGTH`, :data:`MAX_VALUE_BYTES`, :data:`MAX_KEYS_PER_THREAD`,
:data:`MAX_VALUE_DEPTH`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from common.errors import Conflict, DomainError, LimitExceeded, NotFound, ValidationFailed
from common.time import now_us
from tenancy.encryption import secret_decrypt, secret_encrypt
from threads.events import Outbox, publish
from threads.models import Thread, ThreadValue
from threads.services.fence import terminated_check

MAX_KEY_LENGTH = 255  # characters (ThreadValue.key's column width)
MAX_VALUE_BYTES = 1024 * 1024  # bytes of the compact UTF-8 JSON serialisation
MAX_KEYS_PER_THREAD = 10_000
MAX_VALUE_DEPTH = 64  # nested arrays/objects


class CorruptValue(DomainError):
    """A stored value decrypted but is not JSON (spec: corrupt stored JSON throws)."""

    code = "corrupt_value"
    status = 500


@dataclass(frozen=True)
class ValueChange:
    """What a write did, for the ``kv.changed`` event (no value payload, by spec)."""

    key: str
    deleted: bool
    updated_at: int  # microseconds


@dataclass(frozen=True)
class StoredValue:
    key: str
    value: Any
    size: int
    updated_at: int


# Validation ------------------------------------------------------------------------------


def _key_check(key: object, field: str = "key") -> str:
    if not isinstance(key, str) or not key:
        raise ValidationFailed("a KV key must be a non-empty string", field=field)
    if len(key) > MAX_KEY_LENGTH:
        raise LimitExceeded(
            f"KV key is {len(key)} characters; the cap MAX_KEY_LENGTH is {MAX_KEY_LENGTH}",
            field=field,
        )
    if "\x00" in key:
        raise ValidationFailed("a KV key may not contain NUL characters", field=field)
    return key


def _child_path(path: str, key: str) -> str:
    if key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key)}]"


def _invalid(path: str, problem: str) -> ValidationFailed:
    return ValidationFailed(
        f"value is not JSON at {path}: {problem}", field="value", details={"path": path}
    )


def _string_check(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise _invalid(path, "string is not valid Unicode (lone surrogate)") from error


def _json_check(value: object, path: str, open_containers: set[int], depth: int) -> None:
    """Raise ValidationFailed at the first non-JSON part of ``value``.

    ``open_containers`` holds the ids of the arrays/objects on the current path, so a
    container that contains itself is a cycle while one shared by two siblings is not.
    """
    kind = type(value)
    if value is None or kind is bool or kind is int:
        return
    if kind is float:
        if not math.isfinite(value):  # type: ignore[arg-type]
            raise _invalid(path, f"{value!r} is not a finite number")
        return
    if kind is str:
        _string_check(value, path)  # type: ignore[arg-type]
        return
    if kind is not list and kind is not dict:
        raise _invalid(path, f"{kind.__name__} is not a JSON type")
    if id(value) in open_containers:
        raise _invalid(path, "cycle: the value contains itself")
    if depth >= MAX_VALUE_DEPTH:
        raise LimitExceeded(
            f"value nests deeper than the cap MAX_VALUE_DEPTH ({MAX_VALUE_DEPTH}) at {path}",
            field="value",
            details={"path": path},
        )
    open_containers.add(id(value))
    if isinstance(value, list):
        for index, item in enumerate(value):
            _json_check(item, f"{path}[{index}]", open_containers, depth + 1)
    else:
        assert isinstance(value, dict)
        for name, item in value.items():
            if type(name) is not str:
                raise _invalid(path, f"object key {name!r} is not a string")
            child = _child_path(path, name)
            _string_check(name, child)
            _json_check(item, child, open_containers, depth + 1)
    open_containers.discard(id(value))


def value_serialize(value: object) -> bytes:
    """``value`` as compact UTF-8 JSON after :func:`_json_check`; enforces MAX_VALUE_BYTES."""
    _json_check(value, "$", set(), 0)
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError as error:  # e.g. an int past Python's digit limit
        raise _invalid("$", str(error)) from error
    data = text.encode("utf-8")
    if len(data) > MAX_VALUE_BYTES:
        raise LimitExceeded(
            f"value is {len(data)} bytes serialised; the cap MAX_VALUE_BYTES is {MAX_VALUE_BYTES}",
            field="value",
        )
    return data


# Storage ---------------------------------------------------------------------------------


def _context(thread: Thread, key: str) -> str:
    return f"threads.ThreadValue:{thread.id}:{key}"


def _seal(thread: Thread, key: str, data: bytes) -> bytes:
    return secret_encrypt(tenant=thread.tenant, plaintext=data, context=_context(thread, key))


def _open(thread: Thread, row: ThreadValue) -> bytes:
    return secret_decrypt(
        tenant=thread.tenant,
        ciphertext=bytes(row.value_encrypted),
        context=_context(thread, row.key),
    )


def _decode(thread: Thread, row: ThreadValue) -> Any:
    try:
        return json.loads(_open(thread, row))
    except (ValueError, UnicodeDecodeError) as error:
        raise CorruptValue(f"stored KV value {row.key!r} is not valid JSON") from error


def _rows(thread: Thread) -> QuerySet[ThreadValue]:
    return ThreadValue.objects.for_tenant(thread.tenant).filter(thread=thread)


def _count_check(thread: Thread) -> None:
    """Lock the thread row (serialising key creation) and refuse a key past the cap.

    ``FOR NO KEY UPDATE``, like every other writer's lock on the thread row: a full
    ``FOR UPDATE`` would also block the deferred foreign-key checks of other transactions'
    rows that reference the thread, which commit while holding the thread's event counter
    that this transaction then waits for (a deadlock)."""
    Thread.objects.select_for_update(no_key=True).filter(pk=thread.pk).values_list("pk").first()
    count = ThreadValue.objects.filter(thread=thread).count()
    if count >= MAX_KEYS_PER_THREAD:
        raise LimitExceeded(
            f"thread has {count} keys; the cap MAX_KEYS_PER_THREAD is {MAX_KEYS_PER_THREAD}",
            field="key",
        )


# Public API ------------------------------------------------------------------------------


def value_get(*, thread: Thread, key: str) -> Any | None:
    """The value stored under ``key``, or None when there is none.

    Raises CorruptValue when the stored bytes are not JSON, DecryptionFailed on tampering.
    """
    _key_check(key)
    row = _rows(thread).filter(key=key).first()
    return None if row is None else _decode(thread, row)


def value_stored(*, thread: Thread, key: str) -> StoredValue | None:
    """Like :func:`value_get`, with the size and update time (what the API shows)."""
    _key_check(key)
    row = _rows(thread).filter(key=key).first()
    return None if row is None else value_of(thread=thread, row=row)


@transaction.atomic
def value_set(*, thread: Thread, key: str, value: Any, outbox: Outbox | None = None) -> ValueChange:
    """Upsert ``key`` (``None`` deletes it) and return what changed.

    Raises ValidationFailed (bad key, non-JSON value with a ``$`` path) or LimitExceeded
    (a cap, named), Conflict on a terminated thread. Creating a new key locks the thread
    row briefly so the key count cap holds under concurrent writers.
    """
    terminated_check(thread=thread, what="KV values")
    _key_check(key)
    if value is None:
        return value_delete(thread=thread, key=key, outbox=outbox)
    data = value_serialize(value)
    sealed = _seal(thread, key, data)
    updated_at = now_us()
    changed = (
        _rows(thread)
        .filter(key=key)
        .update(value_encrypted=sealed, size=len(data), updated_at=updated_at)
    )
    if not changed:
        _count_check(thread)
        try:
            with transaction.atomic():
                ThreadValue.objects.create(
                    tenant_id=thread.tenant_id, thread=thread, key=key,
                    value_encrypted=sealed, size=len(data), updated_at=updated_at,
                )  # fmt: skip
        except IntegrityError:  # another writer created it between our update and insert
            _rows(thread).filter(key=key).update(
                value_encrypted=sealed, size=len(data), updated_at=updated_at
            )
    change = ValueChange(key=key, deleted=False, updated_at=updated_at)
    return _announced(thread, change, outbox)


def _announced(thread: Thread, change: ValueChange, outbox: Outbox | None = None) -> ValueChange:
    """Publish ``kv.changed`` (key, deleted, updated_at; never the value) after commit."""
    payload = {"key": change.key, "deleted": change.deleted, "updated_at": change.updated_at}
    publish(thread, "kv.changed", payload, outbox=outbox)
    return change


@transaction.atomic
def value_delete(*, thread: Thread, key: str, outbox: Outbox | None = None) -> ValueChange:
    """Delete ``key``; deleting a missing key is not an error (the change is still reported)."""
    terminated_check(thread=thread, what="KV values")
    _key_check(key)
    _rows(thread).filter(key=key).delete()
    change = ValueChange(key=key, deleted=True, updated_at=now_us())
    return _announced(thread, change, outbox)


def value_list(*, thread: Thread, search: str | None = None) -> QuerySet[ThreadValue]:
    """The thread's stored values ordered by key, those whose key holds ``search`` (a
    case-insensitive substring; values are encrypted, so not searchable). The rows are
    sealed: read each with :func:`value_of`."""
    rows = _rows(thread).order_by("key")
    if search:
        rows = rows.filter(key__icontains=search)
    return rows


def value_of(*, thread: Thread, row: ThreadValue) -> StoredValue:
    """The decrypted value of a row of :func:`value_list`, with its size and update time.

    Raises CorruptValue when the stored bytes are not JSON, DecryptionFailed on tampering.
    """
    return StoredValue(row.key, _decode(thread, row), row.size, row.updated_at)


@transaction.atomic
def value_rename(*, thread: Thread, key: str, new_key: str) -> list[ValueChange]:
    """Move ``key``'s value to ``new_key`` (re-encrypted for its new name).

    Returns the changes to announce, in order (old key deleted, new key written); none when
    the names are equal. Raises NotFound when ``key`` is absent, Conflict when ``new_key``
    already exists or the thread is terminated.
    """
    terminated_check(thread=thread, what="KV values")
    _key_check(key)
    _key_check(new_key, field="new_key")
    row = _rows(thread).select_for_update().filter(key=key).first()
    if row is None:
        raise NotFound(f"no KV key {key!r} in this thread")
    if key == new_key:
        return []
    if _rows(thread).filter(key=new_key).exists():
        raise Conflict(f"KV key {new_key!r} already exists", field="new_key")
    data = _open(thread, row)
    row.key = new_key
    row.value_encrypted = _seal(thread, new_key, data)
    row.updated_at = now_us()
    try:
        with transaction.atomic():
            row.save(update_fields=["key", "value_encrypted", "updated_at"])
    except IntegrityError as error:
        raise Conflict(f"KV key {new_key!r} already exists", field="new_key") from error
    return [
        _announced(thread, ValueChange(key=key, deleted=True, updated_at=row.updated_at)),
        _announced(thread, ValueChange(key=new_key, deleted=False, updated_at=row.updated_at)),
    ]
