"""replay/readmodel.py and replay/validate.py, with ``manage.py replay_validate``: a thread's
events replay into the read model its rows hold, and the validator says where they do not
(or that it cannot tell, after retention pruned the log)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import call_command

from replay.export import export_records, export_scope_thread, record_line
from replay.readmodel import read_model_of_events, read_model_stored
from replay.validate import validate_scope
from tests.replay.replays import assert_replays
from tests.threads.runtime.conftest import Engine, prompt
from threads.events import envelope_of, publish
from threads.models import Event, Message, Thread, Turn

pytestmark = pytest.mark.django_db

HELPER = [{"name": "helper", "side_a": {"prompt": "helper"}}]


def _ran(engine: Engine, turns: int = 1) -> Thread:
    """A thread that ran ``turns`` turns, each with one tool call and an answer."""
    engine.define(prompts=[prompt("helper", tools=["echo"])], agents=HELPER)
    thread = engine.thread("helper")
    for n in range(turns):
        engine.script.tool_calls([{"name": "echo", "arguments": {"text": f"{n}"}}]).text("ok")
        engine.send(thread, f"turn {n}")
        engine.drive(thread)
    return thread


def _command(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("replay_validate", *args, stdout=out)
    except SystemExit as exit:
        return int(exit.code or 0), out.getvalue()
    return 0, out.getvalue()


def test_a_thread_that_ran_replays_into_its_stored_read_model(engine: Engine) -> None:
    thread = _ran(engine, turns=2)
    events = [envelope_of(row) for row in Event.objects.filter(thread=thread).order_by("sequence")]

    replayed = read_model_of_events(events)[str(thread.pk)]

    assert replayed == read_model_stored(thread=thread)
    assert replayed.counts() == {
        "turns": 2, "messages": 8, "model_calls": 4, "tool_calls": 2, "pending_actions": 0,
        "subagents": 0, "files": 0,
    }  # fmt: skip
    assert (replayed.status, replayed.agent, set(replayed.turns.values())) == (
        "waiting_input", "helper", {"completed"},
    )  # fmt: skip
    assert_replays(thread)


def test_a_turn_status_changed_behind_the_events_back_is_a_difference(engine: Engine) -> None:
    thread = _ran(engine)
    turn = Turn.objects.get(thread=thread)
    Turn.objects.filter(pk=turn.pk).update(status="failed")

    result = validate_scope(export_scope_thread(tenant=thread.tenant, thread_id=thread.pk))

    assert not result.ok
    assert [(d.what, d.events, d.stored) for d in result.differences] == [
        (f"turn {turn.pk}", "completed", "failed"),
    ]  # fmt: skip
    code, out = _command("--tenant", thread.tenant.slug, "--thread", str(thread.pk))
    assert code == 1
    assert f"turn {turn.pk}: the events say 'completed', stored 'failed'" in out


def test_a_message_deleted_without_its_event_and_a_thread_status_are_differences(
    engine: Engine,
) -> None:
    thread = _ran(engine)
    last = Message.objects.filter(thread=thread).order_by("-seq").first()
    assert last is not None
    last_id = last.pk
    last.delete()
    Thread.objects.filter(pk=thread.pk).update(status="failed")

    result = validate_scope(export_scope_thread(tenant=thread.tenant, thread_id=thread.pk))

    assert {(d.what, d.events, d.stored) for d in result.differences} == {
        ("status", "waiting_input", "failed"), (f"messages {last_id}", "present", None),
    }  # fmt: skip


def test_an_export_file_validates_and_a_tampered_one_does_not(
    engine: Engine, tmp_path: Path
) -> None:
    thread = _ran(engine)
    scope = export_scope_thread(tenant=thread.tenant, thread_id=thread.pk)
    path = tmp_path / "thread.ndjson"
    path.write_text("".join(record_line(r) for r in export_records(scope)))

    assert _command("--tenant", thread.tenant.slug, str(path)) == (
        0, "OK: 1 thread(s) replay into their stored read model\n",
    )  # fmt: skip
    lines = path.read_text().splitlines(keepends=True)
    created = [n for n, line in enumerate(lines) if '"type":"message.created"' in line]
    (tmp_path / "cut.ndjson").write_text("".join(lines[: created[0]] + lines[created[0] + 1 :]))
    code, out = _command("--tenant", thread.tenant.slug, str(tmp_path / "cut.ndjson"))
    assert code == 1
    assert "record counts" in out
    assert "events sequence" in out
    assert "messages " in out  # the message whose creation was cut is stored


def test_a_thread_with_events_after_the_export_is_unverifiable_not_different(
    engine: Engine, tmp_path: Path
) -> None:
    thread = _ran(engine)
    scope = export_scope_thread(tenant=thread.tenant, thread_id=thread.pk)
    path = tmp_path / "thread.ndjson"
    path.write_text("".join(record_line(r) for r in export_records(scope)))
    last = Event.objects.filter(thread=thread).count()
    publish(thread, "custom", {"name": "later", "data": 1})

    code, out = _command("--tenant", thread.tenant.slug, str(path))

    assert code == 2
    assert out == (
        f"thread {thread.pk}: not verifiable: it has events after the export (exported up "
        f"to sequence {last}, stored up to {last + 1}); export it again\n"
    )


def test_pruned_events_make_a_thread_unverifiable_and_say_so(engine: Engine) -> None:
    thread = _ran(engine)
    Event.objects.filter(thread=thread, sequence__lte=3).delete()  # as retention prunes

    result = validate_scope(export_scope_thread(tenant=thread.tenant, thread_id=thread.pk))

    assert (result.differences, [u.thread_id for u in result.unverifiable]) == (
        [],
        [str(thread.pk)],
    )
    code, out = _command("--tenant", thread.tenant.slug, "--thread", str(thread.pk))
    assert code == 2
    assert out == (
        f"thread {thread.pk}: not verifiable: its events up to sequence 3 were pruned by the "
        "retention policy; the read model cannot be replayed from the first event\n"
    )


def test_the_command_refuses_an_unknown_thread_and_a_missing_scope(engine: Engine) -> None:
    thread = _ran(engine)

    with pytest.raises(Exception, match="no thread"):
        call_command(
            "replay_validate",
            "--tenant",
            thread.tenant.slug,
            "--thread",
            str(Turn.objects.get().pk),
        )
    with pytest.raises(Exception, match="give one of"):
        call_command("replay_validate", "--tenant", thread.tenant.slug)
