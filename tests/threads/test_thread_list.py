"""threads.services.threads.thread_list's search (the console's thread search)."""

from __future__ import annotations

import pytest

from tenancy.models import Tenant
from tests.factories import make_thread
from threads.services.threads import thread_list

pytestmark = pytest.mark.django_db


def _found(tenant: Tenant, search: str) -> set[str]:
    return {row.agent_name for row in thread_list(tenant=tenant, search=search)}


def test_search_matches_an_id_part_of_an_agent_or_user_id_or_a_whole_tag(tenant: Tenant) -> None:
    writer = make_thread(tenant, agent_name="writer", user_id="alice@example.com", tags=["blue"])
    make_thread(tenant, agent_name="reviewer", user_id="bob", tags=["bluest"])

    assert _found(tenant, str(writer.pk)) == {"writer"}
    assert _found(tenant, "WRIT") == {"writer"}
    assert _found(tenant, "alice@") == {"writer"}
    assert _found(tenant, "blue") == {"writer"}
    assert _found(tenant, "er") == {"writer", "reviewer"}
    assert _found(tenant, "nothing") == set()
    assert _found(tenant, "  ") == {"writer", "reviewer"}


def test_search_never_finds_another_tenants_thread(tenant: Tenant, other_tenant: Tenant) -> None:
    theirs = make_thread(other_tenant, agent_name="writer")

    assert _found(tenant, str(theirs.pk)) == set()
    assert _found(tenant, "writer") == set()
