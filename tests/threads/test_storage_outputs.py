"""Every answer of a thread's storage and records (files, KV values, env variables, the
tenant env, logs, the event log) is the body the OpenAPI schema documents for it, checked
strictly on real answers, as a generated client parses them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.http import HttpResponseBase
from rest_framework.test import APIClient

from tenancy.models import Role
from tests.answers import documented, schema_document
from threads.models import Thread
from threads.services.env import tenant_env_set, thread_env_set
from threads.services.files import file_write
from threads.services.logs import log_create
from threads.services.values import value_set
from threads.state import ThreadState

pytestmark = pytest.mark.django_db

PART = "/api/v1/threads/{thread_id}/"
STORAGE = ("/fs", "/kv", "/env", "/logs", "/events")


@pytest.fixture
def stocked(thread: Thread) -> Thread:
    """A thread with something in each of its stores."""
    file_write(thread=thread, path="/d/a.txt", data=b"one\nneedle", mime_type="text/plain")
    file_write(
        thread=thread, path="/d/b.json", data=b"{}", mime_type="application/json",
        metadata={"source": "test"},
    )  # fmt: skip
    value_set(thread=thread, key="plan", value={"steps": [1, 2]})
    thread_env_set(thread=thread, name="REGION", value="eu", type="text")
    tenant_env_set(tenant=thread.tenant, name="COMPANY", value="Acme")
    parent = log_create(thread=thread, kind="flow", data={"steps": 1})
    log_create(thread=thread, kind="tool", data={"tool": "x"}, parent=parent)
    ThreadState(thread).emit("tick", 1)
    return thread


def _checked(method: str, template: str, response: HttpResponseBase) -> Any:
    assert response.status_code < 300, (method, template, response.status_code)
    return documented(method, template, response)


def test_every_answer_is_the_documented_body(
    member: APIClient, stocked: Thread, client_for: Callable[..., APIClient]
) -> None:
    admin = client_for(stocked.tenant, Role.ADMIN)
    base = f"/api/v1/threads/{stocked.id}/"
    log_id = member.get(f"{base}logs").json()["results"][0]["id"]
    answers = {
        ("get", PART + "fs"): member.get(f"{base}fs"),
        ("get", PART + "fs/{file_path}"): member.get(f"{base}fs/d", {"limit": "1"}),
        ("put", PART + "fs/{file_path}"): member.put(
            f"{base}fs/d/c.txt", b"new", content_type="text/plain"
        ),
        ("post", PART + "fs/{file_path}"): member.post(
            f"{base}fs/e", {"type": "directory"}, format="json"
        ),
        ("get", PART + "fs-search"): member.get(f"{base}fs-search", {"grep": "needle"}),
        ("get", PART + "fs-stats"): member.get(f"{base}fs-stats"),
        ("get", PART + "kv"): member.get(f"{base}kv"),
        ("get", PART + "kv/{key}"): member.get(f"{base}kv/plan"),
        ("put", PART + "kv/{key}"): member.put(
            f"{base}kv/next", {"value": [None, 1.5, "x"]}, format="json"
        ),
        ("get", PART + "env"): member.get(f"{base}env"),
        ("put", PART + "env/{name}"): member.put(f"{base}env/TOKEN", {"value": "s"}, format="json"),
        ("get", "/api/v1/env"): member.get("/api/v1/env"),
        ("put", "/api/v1/env/{name}"): admin.put("/api/v1/env/KEY", {"value": "k"}, format="json"),
        ("delete", "/api/v1/env/{name}"): admin.delete("/api/v1/env/KEY"),
        ("get", PART + "logs"): member.get(f"{base}logs", {"limit": "1"}),
        ("get", PART + "logs/{log_id}"): member.get(f"{base}logs/{log_id}"),
        ("get", PART + "events"): member.get(f"{base}events", {"limit": "1"}),
        ("delete", PART + "fs/{file_path}"): member.delete(f"{base}fs/d/c.txt"),
        ("delete", PART + "kv/{key}"): member.delete(f"{base}kv/next"),
        ("delete", PART + "env/{name}"): member.delete(f"{base}env/TOKEN"),
    }

    bodies = {key: _checked(*key, response) for key, response in answers.items()}

    assert bodies["get", PART + "fs/{file_path}"]["path"] == "/d"
    assert bodies["get", PART + "fs/{file_path}"]["next"] is not None
    assert bodies["get", PART + "logs"]["next"] is not None
    assert bodies["get", PART + "events"]["results"][0]["sequence"] == 1
    assert bodies["delete", PART + "kv/{key}"] is None
    documented_here = {
        (method, path)
        for path, item in schema_document()["paths"].items()
        for method in item
        if method in ("get", "put", "post", "delete")
        and (path.startswith("/api/v1/env") or path.removeprefix(PART[:-1]).startswith(STORAGE))
    }
    assert documented_here - set(answers) == set()


def test_a_file_record_and_a_find_page_are_documented(member: APIClient, stocked: Thread) -> None:
    base = f"/api/v1/threads/{stocked.id}/"

    record = _checked("get", PART + "fs/{file_path}", member.get(f"{base}fs/d/b.json?stat=1"))
    found = _checked("get", PART + "fs-search", member.get(f"{base}fs-search", {"find": "**"}))
    replaced = _checked(
        "put", PART + "fs/{file_path}",
        member.put(f"{base}fs/d/a.txt", b"two", content_type="text/plain"),
    )  # fmt: skip

    assert (record["path"], record["metadata"]) == ("/d/b.json", {"source": "test"})
    assert [r["path"] for r in found["results"]] == ["/d", "/d/a.txt", "/d/b.json"]
    assert replaced["size"] == 3
