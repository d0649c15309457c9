"""``assert_replays``: the end-to-end tests' one-line check that a thread's (or its whole
session's) events replay into its stored read model, through the export the API serves."""

from __future__ import annotations

from replay.export import export_records, export_scope_session, export_scope_thread, record_line
from replay.validate import validate_export, validate_scope, validation_lines
from threads.models import Thread


def assert_replays(thread: Thread, *, session: bool = False) -> None:
    """The thread's (with ``session``, its session's) events replay into the read model its
    rows hold, read live and from a fresh export of it; every thread verifiable."""
    tenant = thread.tenant
    scope = (
        export_scope_session(tenant=tenant, session_id=thread.root_id or thread.pk)
        if session
        else export_scope_thread(tenant=tenant, thread_id=thread.pk)
    )
    live = validate_scope(scope)
    assert live.ok, "\n".join(validation_lines(live))
    exported = validate_export((record_line(r) for r in export_records(scope)), tenant=tenant)
    assert exported.ok, "\n".join(validation_lines(exported))
    assert exported.threads == live.threads
