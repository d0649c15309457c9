"""Every declared event type and status is produced by some test: a pytest plugin.

A run of the whole suite that passed fails, naming them, when values of
:data:`VOCABULARIES` were never produced: each needs a test that produces it, or it leaves
its vocabulary. Values no row ever holds (:data:`NEVER_STORED`, each with its reason) are
not checked. A partial run (node ids, a file or subdirectory, ``-k``, ``-m``, deselection)
checks and prints nothing. ``--vocabulary-dump=FILE`` records any run and writes to ``FILE``
(JSON) what it produced, the test that first produced each, and what it did not produce.

What counts as produced:

- a stored event: recorded by the database, so the events the Celery workers and ASGI
  servers the tests start write count as the test process's do. A statement trigger on the
  events table advances one sequence per declared name it sees (``event=<type>``, and
  ``<type>=<status>`` for the status a status-bearing event carries, ``queue.changed``'s
  items' included). Sequences are not transactional, so what a test wrote and rolled back
  still counts; the cost is one trigger call per insert statement (some 20 µs).
- an ephemeral event (broadcast, never stored): recorded by this process as the outbox
  broadcasts it. The ephemeral types are also produced in the test process, so subprocesses
  need no recorder of their own.
- a status of a table no event announces (:attr:`Vocabulary.table`): a row trigger on its
  ``status`` column, the same way (rows a test writes itself count too).

The triggers live only in the test database, in a schema of their own; the product is
unchanged.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import DatabaseError, connection
from django.db.backends.base.base import BaseDatabaseWrapper

from common.tenant_wall import as_owner, system_scope
from compaction.models import Compaction, CompactionStatus
from threads.broadcast import broadcast
from threads.events import outbox
from threads.events.vocabulary import EventType
from threads.models import ActionStatus, EffectStatus, Event, MessageStatus, RunStatus
from threads.models.subagents import VariableRequest
from threads.models.webhooks import DeliveryStatus, WebhookDelivery
from threads.services.status import NOT_STORED

SCHEMA = "vocabulary_seen"
EVENT = "event"
# A subagent registry entry's status (spec DIGEST §6.4: ``running``, ``idle``, ``failed``,
# ``awaiting_human``, ``terminated``, or a child's free-form text, which is not checked).
SUBAGENT_REGISTRY = frozenset({"running", "idle", "failed", "awaiting_human", "terminated"})
# Declared values no row ever holds, so no test can produce them in storage: why, by vocabulary.
NEVER_STORED: Mapping[str, Mapping[str, str]] = {
    "RunStatus": NOT_STORED,
    "EffectStatus": {
        EffectStatus.PROCESSING: "the API shows a pending effect whose handler runs as "
        "processing; the row stays pending (threads.services.effects)",
    },
}


@dataclass(frozen=True)
class Vocabulary:
    """A closed vocabulary and where its values are seen: as event types (``name`` is
    ``event type``), in the ``status`` of the payloads of ``events``, or in the ``status``
    column of ``table``."""

    name: str
    values: frozenset[str]
    events: frozenset[str] = frozenset()
    table: str = ""

    @property
    def checked(self) -> frozenset[str]:
        """The values a run must produce: all but those never stored."""
        return self.values - set(NEVER_STORED.get(self.name, {}))

    def names(self, value: str) -> list[str]:
        """The recorder's names for ``value`` (any one seen means it was produced)."""
        if self.name == "event type":
            return [f"{EVENT}={value}"]
        if self.table:
            return [f"{self.table}={value}"]
        return [f"{source}={value}" for source in sorted(self.events)]


def _choices(values: Iterable[str]) -> frozenset[str]:
    return frozenset(str(value) for value in values)


def _announced(*events: str) -> frozenset[str]:
    """Event types: each of ``events`` that ends with a dot names every type it begins."""
    return frozenset(
        str(kind) for kind in EventType
        if any(kind == event or (event.endswith(".") and kind.startswith(event))
               for event in events)
    )  # fmt: skip


VOCABULARIES: tuple[Vocabulary, ...] = (
    Vocabulary("event type", _choices(EventType)),
    Vocabulary(
        "RunStatus",
        _choices(RunStatus.values),
        events=_announced(
            "thread.status", "turn.completed", "turn.failed", "turn.cancelled", "queue.changed"
        ),
    ),
    Vocabulary(
        "ActionStatus",
        _choices(ActionStatus.values),
        events=_announced("action.required", "action.resolved"),
    ),
    Vocabulary(
        "EffectStatus",
        _choices(EffectStatus.values),
        events=_announced("effect."),
    ),
    Vocabulary(
        "MessageStatus",
        _choices(MessageStatus.values),
        events=_announced("message.created", "message.updated"),
    ),
    Vocabulary(
        "subagent registry status",
        SUBAGENT_REGISTRY,
        events=_announced("subagent."),
    ),
    Vocabulary(
        "CompactionStatus", _choices(CompactionStatus.values), table=Compaction._meta.db_table
    ),
    Vocabulary(
        "DeliveryStatus", _choices(DeliveryStatus.values), table=WebhookDelivery._meta.db_table
    ),
    Vocabulary(
        "VariableRequest.Status",
        _choices(VariableRequest.Status.values),
        table=VariableRequest._meta.db_table,
    ),
)


def declared_names() -> set[str]:
    """Every name the recorder may see for a checked value (one sequence each)."""
    return {name for vocabulary in VOCABULARIES for value in vocabulary.checked
            for name in vocabulary.names(value)}  # fmt: skip


def missing(seen: Iterable[str]) -> dict[str, list[str]]:
    """The checked values no name of which was ``seen``, by vocabulary (none: all produced)."""
    found = set(seen)
    absent = {
        vocabulary.name: sorted(
            value for value in vocabulary.checked
            if not found.intersection(vocabulary.names(value))
        )
        for vocabulary in VOCABULARIES
    }  # fmt: skip
    return {name: values for name, values in absent.items() if values}


# The recorder in the database ------------------------------------------------------------

# ``%(schema)s`` is an identifier of ours, the only thing formatted into these statements.
_FUNCTIONS = """
CREATE FUNCTION %(schema)s.seen(name text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE found regclass;
BEGIN
    IF name IS NULL OR length(name) > 63 THEN RETURN; END IF;
    found := to_regclass(format('%(schema)s.%%I', name));
    IF found IS NOT NULL THEN PERFORM nextval(found); END IF;
END $$;

CREATE FUNCTION %(schema)s.events_seen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('%(schema)s.paused', true) = 'on' THEN RETURN NULL; END IF;
    PERFORM %(schema)s.seen(name) FROM (
        SELECT 'event=' || type AS name FROM added
        UNION SELECT type || '=' || (payload ->> 'status') FROM added
        UNION SELECT type || '=' || (payload -> 'item' ->> 'status') FROM added
        UNION SELECT added.type || '=' || (item ->> 'status')
            FROM added, jsonb_array_elements(CASE jsonb_typeof(added.payload -> 'items')
                WHEN 'array' THEN added.payload -> 'items' ELSE '[]'::jsonb END) AS item
    ) AS names;
    RETURN NULL;
END $$;

CREATE FUNCTION %(schema)s.status_seen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('%(schema)s.paused', true) = 'on' THEN RETURN NULL; END IF;
    PERFORM %(schema)s.seen(TG_TABLE_NAME || '=' || NEW.status);
    RETURN NULL;
END $$;
"""


def recorder_install(database: BaseDatabaseWrapper = connection, *, schema: str = SCHEMA) -> None:
    """Create ``schema`` afresh with a sequence per :func:`declared_names` and the triggers
    that advance them (a database kept from an earlier run starts over)."""
    tables = sorted({vocabulary.table for vocabulary in VOCABULARIES if vocabulary.table})
    events = Event._meta.db_table
    with database.cursor() as cursor:
        cursor.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")
        for name in sorted(declared_names()):
            cursor.execute(f'CREATE SEQUENCE {schema}."{name}"')
        cursor.execute(_FUNCTIONS % {"schema": schema})
        cursor.execute(
            f"CREATE OR REPLACE TRIGGER {schema}_events AFTER INSERT ON {events} "
            f"REFERENCING NEW TABLE AS added FOR EACH STATEMENT "
            f"EXECUTE FUNCTION {schema}.events_seen()"
        )
        for table in tables:
            cursor.execute(
                f"CREATE OR REPLACE TRIGGER {schema}_status AFTER INSERT OR UPDATE OF status "
                f"ON {table} FOR EACH ROW EXECUTE FUNCTION {schema}.status_seen()"
            )
        role = settings.DATABASE_APPLICATION_ROLE  # the triggers run as the application
        cursor.execute(f'GRANT USAGE ON SCHEMA {schema} TO "{role}"')
        cursor.execute(
            f'GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {schema} TO "{role}"'
        )


def recorder_read(database: BaseDatabaseWrapper = connection, *, schema: str = SCHEMA) -> set[str]:
    """The names whose sequence advanced since :func:`recorder_install`."""
    with database.cursor() as cursor:
        cursor.execute(
            "SELECT sequencename FROM pg_sequences "
            "WHERE schemaname = %s AND last_value IS NOT NULL",
            [schema],
        )
        return {str(row[0]) for row in cursor.fetchall()}


@contextlib.contextmanager
def recorder_paused(
    database: BaseDatabaseWrapper = connection, *, schema: str = SCHEMA
) -> Iterator[None]:
    """The recorder of ``schema`` sees nothing this connection writes inside: for the tests
    of the recorder, whose writes must not count as the suite's."""
    with database.cursor() as cursor:
        cursor.execute("SELECT set_config(%s, 'on', false)", [f"{schema}.paused"])
        try:
            yield
        finally:
            cursor.execute("SELECT set_config(%s, '', false)", [f"{schema}.paused"])


# The recorder in this process ------------------------------------------------------------


@dataclass
class EphemeralRecorder:
    """The ephemeral events the outbox broadcasts in this process, as recorder names."""

    seen: set[str] = field(default_factory=set)

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Record inside the block (the outbox's one door for ephemeral events)."""

        def recording(groups: Sequence[str], envelope: Mapping[str, Any]) -> None:
            self.seen.add(f"{EVENT}={envelope['type']}")
            broadcast(groups, envelope)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(outbox, "broadcast", recording)
            yield


# The run ---------------------------------------------------------------------------------

# Options that run part of the suite (``lf`` and ``stepwise`` may leave whole files out).
NARROWING = ("keyword", "markexpr", "deselect", "ignore", "ignore_glob", "lf", "stepwise",
             "collectonly")  # fmt: skip


@dataclass
class _Run:
    """One session's selection and record. ``read`` (while the recorder runs) returns what
    was seen so far; ``first`` names, in a dump, the test that first produced each name."""

    whole: bool
    dump: Path | None
    deselected: int = 0
    read: Callable[[], set[str]] | None = None
    recorded: bool = False
    seen: set[str] = field(default_factory=set)
    first: dict[str, str] = field(default_factory=dict)
    report: list[str] = field(default_factory=list)

    @property
    def recording(self) -> bool:
        return self.whole or self.dump is not None


_RUN = pytest.StashKey[_Run]()


def whole_selection(config: pytest.Config) -> bool:
    """Whether the command line selects the whole suite (see :func:`selects_whole_suite`);
    deselection by a plugin is counted apart (``pytest_deselected``)."""
    from_testpaths = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    return selects_whole_suite(
        config.args,
        base=config.rootpath if from_testpaths else config.invocation_params.dir,
        suite=config.rootpath / "tests",
        narrowed=any(config.getoption(name, None) for name in NARROWING),
    )


def selects_whole_suite(args: Sequence[str], *, base: Path, suite: Path, narrowed: bool) -> bool:
    """True when ``args`` (relative to ``base``) each name the ``suite`` directory (no node
    id, no file or subdirectory) and no option ``narrowed`` the selection."""
    root = suite.resolve()
    return (
        not narrowed
        and bool(args)
        and all("::" not in arg and (base / arg).resolve() == root for arg in args)
    )


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--vocabulary-dump", metavar="FILE", default=None,
        help="record the event types and statuses this run produces (any selection) and "
        "write them, with the declared ones it did not produce, to FILE as JSON",
    )  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    dump = config.getoption("vocabulary_dump", None)
    config.stash[_RUN] = _Run(whole=whole_selection(config), dump=Path(dump) if dump else None)


def pytest_deselected(items: Sequence[pytest.Item]) -> None:
    if items:
        items[0].config.stash[_RUN].deselected += len(items)


@pytest.fixture(scope="session", autouse=True)
def _vocabulary_recorder(request: pytest.FixtureRequest) -> Iterator[None]:
    """Records for the whole session when the run checks or dumps (see the module)."""
    run = request.config.stash[_RUN]
    if not run.recording:
        yield
        return
    request.getfixturevalue("django_db_setup")
    blocker = request.getfixturevalue("django_db_blocker")
    with blocker.unblock(), as_owner(), system_scope("tests"):  # triggers on the owner's tables
        recorder_install()
    ephemeral = EphemeralRecorder()

    def read() -> set[str]:
        with blocker.unblock(), system_scope("tests"):
            return recorder_read() | ephemeral.seen

    run.read = read
    with ephemeral.watching():
        yield
    run.read = None
    connection.close()  # a fresh one: some tests restart PostgreSQL under it
    run.seen = read()
    run.recorded = True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """In a dump, after each test: the names it was first to produce (those its teardown
    produces go to the next test)."""
    try:
        return (yield)
    finally:
        run = item.config.stash[_RUN]
        if run.dump is not None and run.read is not None:
            with contextlib.suppress(DatabaseError):  # a test that broke its transaction
                now = run.read()
                run.first.update((name, item.nodeid) for name in now - run.seen)
                run.seen = now


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    run = session.config.stash[_RUN]
    if not run.recorded:
        return
    absent = missing(run.seen)
    if run.dump is not None:
        first = dict(sorted(run.first.items()))
        body = {"seen": sorted(run.seen), "first": first, "missing": absent}
        run.dump.write_text(json.dumps(body, indent=2))
    checked = run.whole and not run.deselected and session.testscollected > 0
    if not checked or session.exitstatus != pytest.ExitCode.OK or not absent:
        return
    run.report = [f"{name}: {', '.join(values)}" for name, values in absent.items()]
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    report = config.stash[_RUN].report if _RUN in config.stash else []
    if not report:
        return
    terminalreporter.section("declared but never produced", sep="=", red=True, bold=True)
    terminalreporter.line(
        "The whole suite ran and no test produced these declared values (tests/"
        "vocabulary_plugin.py). Add a test that produces each, or remove it from its "
        "vocabulary:"
    )
    for line in report:
        terminalreporter.line(f"  {line}")
