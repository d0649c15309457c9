"""Celery tasks of threads: thin wrappers that take ids and call the runtime."""

from __future__ import annotations

from celery import shared_task

from threads.runtime.driver import thread_drive, threads_sweep


@shared_task(name="threads.drive_thread", ignore_result=True)
def drive_thread(thread_id: str, tenant_id: str | None = None) -> None:
    """Run the thread's pending work (idempotent: the lock makes duplicates no-ops).
    ``tenant_id`` is the thread's (optional: read from the thread when absent)."""
    thread_drive(thread_id=thread_id, tenant_id=tenant_id)


def wake_thread(thread_id: object, tenant_id: object) -> None:
    """Enqueue :func:`drive_thread` for a thread: the one place that builds its arguments."""
    drive_thread.delay(str(thread_id), str(tenant_id))


@shared_task(name="threads.sweep_threads", ignore_result=True)
def sweep_threads() -> int:
    """Beat: wake threads whose work has no live worker."""
    return threads_sweep()
