"""Definitions are visible in the admin but cannot be changed there."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from agents.models import Model
from tenancy.models import Tenant
from tests.agents.samples import seed_rich

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client: Client, tenant: Tenant) -> Client:
    seed_rich(tenant)
    client.force_login(User.objects.create_superuser("root", password="pw-for-tests"))
    return client


@pytest.mark.parametrize("model", ["model", "prompt", "agent", "codetool"])
def test_definitions_are_listed_and_viewable(admin_client: Client, model: str) -> None:
    listing = admin_client.get(f"/admin/agents/{model}/")

    assert listing.status_code == 200
    assert admin_client.get(f"/admin/agents/{model}/add/").status_code == 403


def test_a_model_page_never_shows_its_encrypted_key(admin_client: Client, tenant: Tenant) -> None:
    row = Model.objects.for_tenant(tenant).get(name="smart")

    page = admin_client.get(f"/admin/agents/model/{row.id}/change/")

    assert page.status_code == 200
    assert b"gpt-4o-mini" in page.content
    assert b"api_key_encrypted" not in page.content
    assert admin_client.post(f"/admin/agents/model/{row.id}/change/", {}).status_code == 403
