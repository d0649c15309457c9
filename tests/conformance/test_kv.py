"""Runtime spec §14 (Durable Key-Value Store): one test per item of §14.1, and §14.2 caps.

Item 9 (encryption is optional) is a MAY; our store does encrypt, which
tests/threads/test_secrets_never_in_clear.py proves.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.urls import include, path
from rest_framework.test import APIClient

from common.errors import LimitExceeded, ValidationFailed
from config.env import REPO_DIR, child_environment
from tenancy.models import Role, Tenant
from tests.agents.samples import seed_rich
from tests.support import current_database_url
from tests.threads.conftest import make_thread
from threads.api import values as values_api
from threads.models import Thread
from threads.services import values
from threads.services.threads import thread_create
from threads.services.values import MAX_KEY_LENGTH, MAX_VALUE_BYTES, value_get, value_set

urlpatterns = [path("api/v1/threads/<uuid:thread_id>/", include(values_api.urlpatterns))]


def _other_process(script: str) -> str:
    """Run ``script`` in a fresh ``manage.py shell`` against the same database."""
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script],
        cwd=REPO_DIR,
        env=child_environment({"DATABASE_URL": current_database_url()}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.django_db(transaction=True)
def test_item_1_values_survive_process_boundaries_in_both_directions(tenant: Tenant) -> None:
    """§14.1 item 1: values persist in durable per-thread storage that survives execution
    boundaries and process restarts (written in this process, read in another, and back)."""
    thread = make_thread(tenant)
    value_set(thread=thread, key="from-parent", value={"n": 1, "items": ["a", None, 2.5]})

    seen = _other_process(
        "import json\n"
        "from threads.models import Thread\n"
        "from threads.services.values import value_get, value_set\n"
        f"thread = Thread.objects.get(id='{thread.id}')\n"
        "value_set(thread=thread, key='from-child', value={'written_by': 'child'})\n"
        "print(json.dumps(value_get(thread=thread, key='from-parent')))\n"
    )

    assert json.loads(seen) == {"n": 1, "items": ["a", None, 2.5]}
    reloaded = Thread.objects.get(id=thread.id)
    assert value_get(thread=reloaded, key="from-child") == {"written_by": "child"}


@pytest.mark.django_db
def test_item_2_a_write_is_visible_to_every_later_read_in_any_context(
    tenant: Tenant, client_for: Callable[..., APIClient], settings: Any
) -> None:
    """§14.1 item 2: a value written by setValue is visible to every subsequent getValue on
    the same thread, across execution contexts (another loaded instance, an HTTP endpoint)."""
    settings.ROOT_URLCONF = __name__
    thread = make_thread(tenant)
    value_set(thread=thread, key="progress", value={"done": 3})

    other_instance = Thread.objects.get(id=thread.id)
    over_http = client_for(tenant, Role.READ_ONLY).get(f"/api/v1/threads/{thread.id}/kv/progress")

    assert value_get(thread=other_instance, key="progress") == {"done": 3}
    assert over_http.status_code == 200
    assert over_http.json()["value"] == {"done": 3}


@pytest.mark.django_db
def test_item_3_parent_child_and_sibling_threads_have_isolated_key_spaces(
    tenant: Tenant,
) -> None:
    """§14.1 item 3: each thread has its own key space; values are not readable by any
    other thread, including parent, child or sibling threads."""
    parent = make_thread(tenant)
    child = make_thread(tenant, parent=parent)
    sibling = make_thread(tenant, parent=parent)
    value_set(thread=parent, key="k", value="parent")
    value_set(thread=child, key="k", value="child")

    assert value_get(thread=parent, key="k") == "parent"
    assert value_get(thread=child, key="k") == "child"
    assert value_get(thread=sibling, key="k") is None
    value_set(thread=sibling, key="only-sibling", value=1)
    assert value_get(thread=parent, key="only-sibling") is None
    assert value_get(thread=child, key="only-sibling") is None


@pytest.mark.django_db
def test_item_4_values_round_trip_with_json_structure(tenant: Tenant) -> None:
    """§14.1 item 4: values round-trip with JSON-equivalent structure (objects, arrays,
    strings, numbers, booleans, null); non-JSON values are rejected with an error."""
    thread = make_thread(tenant)
    value = {
        "string": 'héllo \u2603 \x00 "quoted"',
        "int": -(2**62),
        "float": 0.1,
        "bools": [True, False],
        "null": None,
        "nested": {"list": [[], {}, [1, [2, [3]]]]},
    }

    value_set(thread=thread, key="doc", value=value)
    got = value_get(thread=thread, key="doc")

    assert got == value
    assert json.dumps(got, sort_keys=True) == json.dumps(value, sort_keys=True)
    with pytest.raises(ValidationFailed, match=r"at \$\.bad:"):
        value_set(thread=thread, key="doc", value={"bad": {1, 2}})


@pytest.mark.django_db
def test_item_5_get_returns_null_when_never_set_deleted_or_store_empty(tenant: Tenant) -> None:
    """§14.1 item 5: getValue returns null when no value was set for the key, when it was
    deleted, and on a thread whose store was never written."""
    untouched = make_thread(tenant)
    thread = make_thread(tenant)
    value_set(thread=thread, key="present", value=1)
    value_set(thread=thread, key="deleted", value=1)
    value_set(thread=thread, key="deleted", value=None)

    assert value_get(thread=untouched, key="anything") is None
    assert value_get(thread=thread, key="never-set") is None
    assert value_get(thread=thread, key="deleted") is None
    assert value_get(thread=thread, key="present") == 1


@pytest.mark.django_db
def test_item_6_setting_null_deletes_the_key(tenant: Tenant) -> None:
    """§14.1 item 6: setValue(key, null/undefined) deletes the key (Python has one None)."""
    thread = make_thread(tenant)
    value_set(thread=thread, key="k", value=[1])

    change = value_set(thread=thread, key="k", value=None)

    assert change.deleted is True
    assert value_get(thread=thread, key="k") is None
    assert thread.threadvalue_set.filter(key="k").count() == 0


@pytest.mark.django_db(transaction=True)
def test_item_7_a_write_is_committed_before_set_returns(tenant: Tenant) -> None:
    """§14.1 item 7: writes are durable before setValue returns: another database
    connection sees the row as soon as the call returns (no outer transaction)."""
    thread = make_thread(tenant)
    db = connection.settings_dict
    host = db["HOST"] or db["OPTIONS"].get("host", "")

    value_set(thread=thread, key="durable", value="yes")

    with psycopg.connect(
        dbname=db["NAME"], user=db["USER"], password=db["PASSWORD"], host=host,
        port=db["PORT"] or None,
    ) as other:  # fmt: skip
        # As the platform's processes connect: acting for the thread's tenant (the wall).
        other.execute("SELECT set_config('app.tenant_id', %s, false)", [str(tenant.pk)])
        row = other.execute(
            "SELECT size FROM threads_threadvalue WHERE thread_id = %s AND key = %s",
            [thread.id, "durable"],
        ).fetchone()
    assert row == (len(b'"yes"'),)


@pytest.mark.django_db
def test_item_8_values_are_not_copied_to_a_spawned_child(tenant: Tenant) -> None:
    """§14.1 item 8: values are not copied, inherited or synchronised between threads when
    a subagent thread is spawned, nor afterwards."""
    seed_rich(tenant)
    parent = thread_create(tenant=tenant, agent_name="helper")
    value_set(thread=parent, key="secret-plan", value="parent's")

    child = thread_create(tenant=tenant, agent_name="helper", parent=parent)
    value_set(thread=parent, key="later", value="also parent's")

    assert child.parent_id == parent.id
    assert child.threadvalue_set.count() == 0
    assert value_get(thread=child, key="secret-plan") is None
    assert value_get(thread=child, key="later") is None


@pytest.mark.django_db
def test_caps_reject_with_an_error_naming_the_limit(
    tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """§14.2: key length, value size and keys per thread are capped; exceeding one rejects
    with an error that identifies which limit was hit."""
    thread = make_thread(tenant)
    monkeypatch.setattr(values, "MAX_KEYS_PER_THREAD", 1)
    value_set(thread=thread, key="first", value=1)
    messages = []
    for key, value in [
        ("k" * (MAX_KEY_LENGTH + 1), 1),
        ("big", "x" * MAX_VALUE_BYTES),
        ("second", 1),
    ]:
        with pytest.raises(LimitExceeded) as caught:
            value_set(thread=thread, key=key, value=value)
        messages.append(caught.value.message)

    assert "MAX_KEY_LENGTH is 255" in messages[0]
    assert f"MAX_VALUE_BYTES is {MAX_VALUE_BYTES}" in messages[1]
    assert "MAX_KEYS_PER_THREAD is 1" in messages[2]
