"""Failed console and admin logins are throttled per (account, client address) and per
address (tenancy.logins), so guessing never locks a person out of their own address; a
superuser sees and removes the lockouts."""

from __future__ import annotations

from typing import Any

import pytest
from axes.models import AccessAttempt
from channels.db import database_sync_to_async
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import AsyncClient, Client
from django.urls import reverse

from tenancy.models import Role, Tenant
from tests.factories import UserFactory, make_member

PASSWORD = "pw-for-tests"
ATTACKER = "203.0.113.66"
VICTIM_HOME = "198.51.100.7"
ELSEWHERE = "192.0.2.44"
CONSOLE_LOGIN = reverse("console:login")
ADMIN_LOGIN = reverse("admin:login")
ATTEMPTS = reverse("admin:axes_accessattempt_changelist")


def _login(address: str, username: str, password: str, url: str = CONSOLE_LOGIN) -> Any:
    return Client(REMOTE_ADDR=address).post(url, {"username": username, "password": password})


def test_twenty_wrong_passwords_are_refused_after_the_limit_with_the_wait(
    tenant: Tenant,
) -> None:
    victim = make_member(tenant)

    answers = [_login(ATTACKER, victim.username, f"guess-{n}") for n in range(20)]

    assert [answer.status_code for answer in answers] == [200] * 4 + [429] * 16
    page = answers[-1].content.decode()
    assert "Too many failed logins for this account from your address." in page
    assert "try again in 15 minutes" in page
    assert all(880 <= int(answer["Retry-After"]) <= 900 for answer in answers[4:])
    # Refused attempts are not counted, so the wait the page names holds.
    (attempt,) = AccessAttempt.objects.filter(username=victim.username)
    assert attempt.failures_since_start == 5
    assert _login(ATTACKER, victim.username, PASSWORD).status_code == 429


def test_the_targeted_user_and_other_tenants_log_in_meanwhile(
    tenant: Tenant, other_tenant: Tenant
) -> None:
    victim = make_member(tenant)
    neighbour = make_member(other_tenant)
    for n in range(20):
        _login(ATTACKER, victim.username, f"guess-{n}")

    assert _login(VICTIM_HOME, victim.username, PASSWORD).status_code == 302
    assert _login(ELSEWHERE, neighbour.username, PASSWORD).status_code == 302
    # The attacker's address is locked for that account only (5 failures, below 50).
    assert _login(ATTACKER, neighbour.username, PASSWORD).status_code == 302


def test_one_address_trying_many_accounts_is_locked_for_every_account(
    tenant: Tenant, other_tenant: Tenant
) -> None:
    neighbour = make_member(other_tenant)
    for n in range(50):
        assert _login(ATTACKER, f"someone-{n}", "guess").status_code == (429 if n == 49 else 200)

    refused = _login(ATTACKER, neighbour.username, PASSWORD)

    assert refused.status_code == 429
    assert "Too many failed logins from your address." in refused.content.decode()
    assert 880 <= int(refused["Retry-After"]) <= 900
    assert _login(ELSEWHERE, neighbour.username, PASSWORD).status_code == 302


def test_a_successful_login_clears_only_its_own_account_and_address(tenant: Tenant) -> None:
    alice, bob = make_member(tenant), make_member(tenant)
    for user in (alice, bob):
        for n in range(4):
            _login(ATTACKER, user.username, f"guess-{n}")

    assert _login(ATTACKER, alice.username, PASSWORD).status_code == 302

    assert [_login(ATTACKER, alice.username, "guess").status_code for _ in range(4)] == [200] * 4
    assert _login(ATTACKER, bob.username, "guess").status_code == 429


def test_the_admin_login_is_throttled_too(tenant: Tenant) -> None:
    staff = make_member(tenant, is_staff=True)

    codes = [_login(ATTACKER, staff.username, "guess", ADMIN_LOGIN).status_code for _ in range(6)]

    assert codes == [200] * 4 + [429] * 2
    assert _login(VICTIM_HOME, staff.username, PASSWORD, ADMIN_LOGIN).status_code == 302


def _superuser_client() -> Client:
    client = Client()
    client.force_login(UserFactory.create(is_staff=True, is_superuser=True))
    return client


def test_a_superuser_sees_the_lockouts_and_unlocks_them_in_the_admin(tenant: Tenant) -> None:
    victim = make_member(tenant)
    for n in range(5):
        _login(ATTACKER, victim.username, f"guess-{n}")
    admin = _superuser_client()
    listed = admin.get(ATTEMPTS)
    assert listed.status_code == 200
    assert victim.username in listed.content.decode()
    assert ATTACKER in listed.content.decode()

    (attempt,) = AccessAttempt.objects.all()
    removed = admin.post(
        ATTEMPTS, {"action": "delete_selected", "_selected_action": [attempt.pk], "post": "yes"}
    )

    assert removed.status_code == 302
    assert not AccessAttempt.objects.exists()
    assert _login(ATTACKER, victim.username, PASSWORD).status_code == 302


def test_tenant_staff_never_see_login_attempts_even_with_permissions(
    tenant: Tenant, other_tenant: Tenant
) -> None:
    for n in range(5):
        _login(ATTACKER, make_member(other_tenant).username, f"guess-{n}")
    staff: User = make_member(tenant, role=Role.ADMIN, is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(content_type__app_label="axes"))
    client = Client()
    client.force_login(staff)

    assert client.get(ATTEMPTS).status_code == 403
    assert ATTEMPTS not in client.get(reverse("admin:index")).content.decode()


def test_axes_reset_unlocks_every_login(tenant: Tenant) -> None:
    victim = make_member(tenant)
    for n in range(5):
        _login(ATTACKER, victim.username, f"guess-{n}")
    assert _login(ATTACKER, victim.username, PASSWORD).status_code == 429

    call_command("axes_reset")

    assert _login(ATTACKER, victim.username, PASSWORD).status_code == 302


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_the_lockout_page_is_served_under_asgi_too(tenant: Tenant) -> None:
    victim = await database_sync_to_async(make_member)(tenant)
    client = AsyncClient()  # from 127.0.0.1
    codes = []
    for n in range(6):
        answer = await client.post(
            CONSOLE_LOGIN, {"username": victim.username, "password": f"guess-{n}"}
        )
        codes.append(answer.status_code)

    assert codes == [200] * 4 + [429] * 2
    assert "try again in 15 minutes" in answer.content.decode()
    assert 880 <= int(answer["Retry-After"]) <= 900
