"""A terminated thread accepts no more writes to its state: its KV values, files and env
variables answer 409 ``terminated`` like its messages and turns, and stay as they were; the
thread's code sees the same refusal."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from common.errors import Conflict
from tenancy.models import Role, Tenant
from tests.factories import make_thread
from threads.models import Thread, ThreadEnv, ThreadFile, ThreadValue
from threads.services.control import thread_terminate
from threads.services.env import thread_env_set
from threads.services.files import file_write
from threads.services.values import value_set
from threads.state import ThreadState

pytestmark = pytest.mark.django_db


@pytest.fixture
def terminated(tenant: Tenant) -> Thread:
    """A thread with a KV value, a file and an env variable, then terminated."""
    thread = make_thread(tenant)
    value_set(thread=thread, key="plan", value={"steps": 1})
    file_write(thread=thread, path="/notes/plan.txt", data=b"plan", mime_type="text/plain")
    thread_env_set(thread=thread, name="TOKEN", value="secret")
    thread_terminate(thread=thread)
    thread.refresh_from_db()
    return thread


def _state(thread: Thread) -> object:
    return (
        list(ThreadValue.objects.filter(thread=thread).values("key", "value_encrypted")),
        list(ThreadFile.objects.filter(thread=thread).values("path", "size")),
        list(ThreadEnv.objects.filter(thread=thread).values("name", "value_encrypted")),
    )


@pytest.mark.parametrize(
    ("method", "path", "body", "what"),
    [
        ("put", "kv/plan", {"value": 2}, "KV values"),
        ("put", "kv/new", {"value": 2}, "KV values"),
        ("delete", "kv/plan", None, "KV values"),
        ("put", "fs/notes/plan.txt", {"data": "aGk=", "mimeType": "text/plain"}, "files"),
        ("post", "fs/notes/drafts", {"type": "directory"}, "files"),
        ("delete", "fs/notes/plan.txt", None, "files"),
        ("put", "env/TOKEN", {"value": "other"}, "env variables"),
        ("delete", "env/TOKEN", None, "env variables"),
    ],
)
def test_a_write_to_a_terminated_threads_state_is_a_409_and_changes_nothing(
    terminated: Thread, client_for: Callable[..., APIClient], method: str, path: str,
    body: dict[str, object] | None, what: str,
) -> None:  # fmt: skip
    api = client_for(terminated.tenant, Role.MEMBER)
    before = _state(terminated)

    response = getattr(api, method)(f"/api/v1/threads/{terminated.id}/{path}", body, format="json")

    assert response.status_code == 409, response.json()
    error = response.json()["error"]
    assert error["code"] == "terminated"
    assert what in error["message"]
    assert _state(terminated) == before


def test_the_threads_own_code_is_refused_the_same_way(terminated: Thread) -> None:
    state = ThreadState(terminated)

    for write in (
        lambda: state.set_value("plan", 3),
        lambda: state.write_file("/notes/other.txt", b"x", "text/plain"),
    ):
        with pytest.raises(Conflict) as caught:
            write()
        assert caught.value.code == "terminated"


def test_reads_of_a_terminated_thread_still_answer(
    terminated: Thread, client_for: Callable[..., APIClient]
) -> None:
    api = client_for(terminated.tenant, Role.READ_ONLY)
    base = f"/api/v1/threads/{terminated.id}"

    assert api.get(f"{base}/kv/plan").status_code == 200
    assert api.get(f"{base}/fs/notes/plan.txt").status_code == 200
    assert api.get(f"{base}/env").status_code == 200
