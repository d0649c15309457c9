"""Factories. Related rows always share one tenant; rows are made through services."""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

import factory
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore

from tenancy.models import ApiKey, Role, Tenant
from tenancy.services import IssuedApiKey, api_key_create, membership_set, tenant_create
from threads.models import Thread

_slugs = itertools.count(1)


def make_tenant(slug: str | None = None) -> Tenant:
    return tenant_create(slug=slug or f"tenant-{next(_slugs)}")


def make_api_key(
    tenant: Tenant,
    *,
    role: Role = Role.ADMIN,
    name: str = "test key",
    expires_at: dt.datetime | None = None,
) -> IssuedApiKey:
    return api_key_create(tenant=tenant, name=name, role=role, expires_at=expires_at)


class UserFactory(factory.django.DjangoModelFactory[User]):
    class Meta:
        model = User

    username = factory.declarations.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("pw-for-tests")


def make_member(tenant: Tenant, *, role: Role = Role.MEMBER, **fields: Any) -> User:
    user = UserFactory.create(**fields)
    membership_set(tenant=tenant, user=user, role=role)
    return user


def make_session(tenant: Tenant, *, role: Role = Role.MEMBER) -> str:
    """The key of a stored login session of a new member of ``tenant`` with ``role``."""
    user = make_member(tenant, role=role)
    session = SessionStore()
    session["_auth_user_id"] = str(user.pk)
    session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
    session["_auth_user_hash"] = user.get_session_auth_hash()
    session.save()
    assert session.session_key is not None
    return session.session_key


__all__ = [
    "ApiKey",
    "UserFactory",
    "make_api_key",
    "make_member",
    "make_session",
    "make_tenant",
    "make_thread",
]


def make_thread(tenant: Tenant, *, agent_name: str = "helper", **fields: Any) -> Thread:
    """A bare thread row (no definitions needed) for storage-level tests."""
    return Thread.objects.create(
        tenant=tenant, agent_name=agent_name, origin_agent_name=agent_name, **fields
    )
