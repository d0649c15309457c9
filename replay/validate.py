"""The replay validator (agent-runtime-events, Validation: "events contain stable ids and
can be replayed into a read model"): fold a thread's events into its read model
(:mod:`replay.readmodel`) and compare it with the read model of the stored tables.

No difference means the thread's events tell its stored state. A thread whose log was
pruned by the retention policy cannot be replayed from its first event: it is reported
``unverifiable``, never as a mismatch; so is a thread that has events newer than the export
being checked. Retention also deletes old log rows and ended turns while their events stay:
an event's log row or ended turn missing from the tables is a note, not a difference.

Read from the live tables, the events and the rows are read in one repeatable-read
transaction (one snapshot), so a thread that runs meanwhile is still compared with itself.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction

from common.errors import NotFound, ValidationFailed
from replay.export import FORMAT, KINDS, ExportScope, scope_threads, thread_events
from replay.readmodel import Projection, ThreadReadModel, read_model_stored
from tenancy.models import Tenant
from threads.models import TURN_TERMINAL, Thread
from threads.services.events import event_last_sequence, event_pruned_through
from threads.services.threads import thread_get


@dataclass(frozen=True)
class Difference:
    """Where the events and the stored state disagree: ``what`` (a read-model field, or
    ``events`` for the log itself), what the events say and what is stored."""

    thread_id: str
    what: str
    events: Any
    stored: Any

    def __str__(self) -> str:
        return (
            f"thread {self.thread_id}: {self.what}: the events say {self.events!r}, "
            f"stored {self.stored!r}"
        )


@dataclass(frozen=True)
class Unverifiable:
    """A thread the events cannot be compared for, and why."""

    thread_id: str
    reason: str

    def __str__(self) -> str:
        return f"thread {self.thread_id}: not verifiable: {self.reason}"


@dataclass
class Validation:
    """The outcome: ``ok`` when nothing differs and every thread could be verified."""

    threads: int = 0
    differences: list[Difference] = field(default_factory=list)
    unverifiable: list[Unverifiable] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.differences and not self.unverifiable


def read_models_compare(replayed: ThreadReadModel, stored: ThreadReadModel) -> Validation:
    """The differences between a thread's read model folded from its events and the one
    read from its rows (notes for what retention may have deleted)."""
    found = Validation(threads=1, counts={stored.thread_id: replayed.counts()})
    tid = stored.thread_id

    def differ(what: str, events: Any, rows: Any) -> None:
        found.differences.append(Difference(tid, what, events, rows))

    for what in ("agent", "status", "terminated"):
        if getattr(replayed, what) != getattr(stored, what):
            differ(what, getattr(replayed, what), getattr(stored, what))
    for turn_id, status in sorted(replayed.turns.items()):
        if turn_id not in stored.turns:
            if status in TURN_TERMINAL:
                found.notes.append(f"thread {tid}: ended turn {turn_id} is no longer stored")
            else:
                differ(f"turn {turn_id}", status, None)
        elif stored.turns[turn_id] != status:
            differ(f"turn {turn_id}", status, stored.turns[turn_id])
    for turn_id in sorted(set(stored.turns) - set(replayed.turns)):
        differ(f"turn {turn_id}", None, stored.turns[turn_id])
    for what in ("messages", "pending_actions", "files"):
        _sets(found, tid, what, getattr(replayed, what), getattr(stored, what))
    for what in ("model_calls", "tool_calls"):
        gone = getattr(replayed, what) - getattr(stored, what)
        if gone:
            found.notes.append(f"thread {tid}: {len(gone)} {what} log rows are no longer stored")
        for log_id in sorted(getattr(stored, what) - getattr(replayed, what)):
            differ(f"{what} log {log_id}", None, "stored")
    for child in sorted(set(replayed.subagents) | set(stored.subagents)):
        if replayed.subagents.get(child) != stored.subagents.get(child):
            differ(f"subagent {child}", replayed.subagents.get(child), stored.subagents.get(child))
    return found


def _sets(found: Validation, tid: str, what: str, events: set[str], rows: set[str]) -> None:
    for item in sorted(events - rows):
        found.differences.append(Difference(tid, f"{what} {item}", "present", None))
    for item in sorted(rows - events):
        found.differences.append(Difference(tid, f"{what} {item}", None, "present"))


def _merge(into: Validation, part: Validation) -> None:
    into.threads += part.threads
    into.differences.extend(part.differences)
    into.unverifiable.extend(part.unverifiable)
    into.notes.extend(part.notes)
    into.counts.update(part.counts)


class _LogCheck:
    """The log's own shape as it is folded: gap-free sequences, unique event ids."""

    def __init__(self) -> None:
        self.expected: dict[str, int] = {}
        self.event_ids: set[str] = set()
        self.differences: list[Difference] = []

    def start(self, thread_id: str, pruned_through: int) -> None:
        self.expected[thread_id] = pruned_through + 1

    def see(self, event: Mapping[str, Any]) -> None:
        thread_id, sequence = str(event["thread_id"]), event.get("sequence")
        expected = self.expected.get(thread_id, 1)
        if sequence != expected:
            self.differences.append(Difference(thread_id, "events sequence", sequence, expected))
        self.expected[thread_id] = int(sequence or expected) + 1
        event_id = str(event.get("event_id") or "")
        if not event_id or event_id in self.event_ids:
            self.differences.append(Difference(thread_id, "event_id", event_id, "unique"))
        self.event_ids.add(event_id)


@contextlib.contextmanager
def _snapshot() -> Iterator[None]:
    """One snapshot for every read of the block: a repeatable-read transaction, or (inside
    a transaction already, where the isolation level is set) that transaction."""
    if connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        yield


def validate_scope(scope: ExportScope) -> Validation:
    """Replay each thread of ``scope`` from its stored events and compare with its rows."""
    result = Validation()
    with _snapshot():
        for thread in scope_threads(scope):
            _merge(result, _validate_thread(thread))
    return result


def _validate_thread(thread: Thread) -> Validation:
    pruned = event_pruned_through(thread=thread)
    if pruned:
        return Validation(threads=1, unverifiable=[_pruned(thread, pruned)])
    projection, check = Projection(), _LogCheck()
    for event in thread_events(thread):
        check.see(event)
        projection.apply(event)
    result = read_models_compare(projection.model(str(thread.pk)), read_model_stored(thread=thread))
    result.differences[:0] = check.differences
    return result


def _pruned(thread: Thread, pruned: int) -> Unverifiable:
    return Unverifiable(
        str(thread.pk),
        f"its events up to sequence {pruned} were pruned by the retention policy; the read "
        "model cannot be replayed from the first event",
    )


class BadExport(ValidationFailed):
    """An export file that is not one: a line that is not a JSON object with a ``kind``,
    another format, no header or no end."""


def validate_export(lines: Iterable[str], *, tenant: Tenant) -> Validation:
    """Replay the events of an export (its JSON lines) and compare each exported thread's
    read model with ``tenant``'s stored rows. Raises BadExport."""
    projection, check = Projection(), _LogCheck()
    threads: dict[str, int] = {}  # id -> events_pruned_through
    counts: dict[str, int] = dict.fromkeys(KINDS, 0)
    header: Mapping[str, Any] | None = None
    end: Mapping[str, Any] | None = None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        record = _record(line, number)
        kind = record["kind"]
        if header is None:
            header = _header(record, tenant)
            continue
        if end is not None:
            raise BadExport(f"line {number}: a record after the end record", field="line")
        if kind == "end":
            end = record
        elif kind == "thread":
            threads[str(record["id"])] = int(record.get("events_pruned_through") or 0)
            check.start(str(record["id"]), threads[str(record["id"])])
        elif kind == "event":
            check.see(record)
            projection.apply(record)
        if kind in counts:
            counts[kind] += 1
    if header is None or end is None:
        raise BadExport("the export has no " + ("header" if header is None else "end record"))
    result = Validation(differences=list(check.differences))
    if end.get("counts") != counts:
        result.differences.append(Difference("-", "record counts", counts, end.get("counts")))
    with _snapshot():
        for thread_id, pruned in threads.items():
            _merge(result, _against_stored(tenant, thread_id, pruned, projection))
    return result


def _record(line: str, number: int) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except ValueError as error:
        raise BadExport(f"line {number} is not JSON: {error}", field="line") from error
    if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
        raise BadExport(f"line {number} is not a record with a kind", field="line")
    return record


def _header(record: Mapping[str, Any], tenant: Tenant) -> Mapping[str, Any]:
    if record["kind"] != "header" or record.get("format") != FORMAT:
        raise BadExport(f"the first record must be a header of format {FORMAT}", field="format")
    if record.get("tenant_id") != str(tenant.pk):
        raise BadExport("the export belongs to another tenant", field="tenant_id")
    return record


def _against_stored(
    tenant: Tenant, thread_id: str, pruned: int, projection: Projection
) -> Validation:
    try:
        thread = thread_get(tenant=tenant, thread_id=thread_id)
    except NotFound:
        return Validation(
            threads=1, differences=[Difference(thread_id, "thread", "exported", None)]
        )
    if pruned:
        return Validation(threads=1, unverifiable=[_pruned(thread, pruned)])
    exported, stored = projection.last_sequence(thread_id), event_last_sequence(thread=thread)
    if stored > exported:
        reason = (
            f"it has events after the export (exported up to sequence {exported}, stored up "
            f"to {stored}); export it again"
        )
        return Validation(threads=1, unverifiable=[Unverifiable(thread_id, reason)])
    if stored < exported:
        return Validation(
            threads=1, differences=[Difference(thread_id, "last event sequence", exported, stored)]
        )
    return read_models_compare(projection.model(thread_id), read_model_stored(thread=thread))


def validation_lines(result: Validation) -> list[str]:
    """What a person reads: OK or each problem, one per line, then the notes."""
    lines = [str(item) for item in (*result.differences, *result.unverifiable)]
    if not lines:
        lines.append(f"OK: {result.threads} thread(s) replay into their stored read model")
    return lines + [f"note: {note}" for note in result.notes]
