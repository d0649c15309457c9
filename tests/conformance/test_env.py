"""Spec §11 (variables and environment) as DIGEST §11 and ARCHITECTURE settle it:
``env(name)`` looks up thread > tool-config > agent > prompt > tenant > platform;
``envType`` is ``text`` only when the winning source marks it text; ``setEnv`` keeps an
existing type when none is given and makes new names secret; a missing name throws
``Environment variable not found: NAME``."""

from __future__ import annotations

from typing import Any

import pytest

from agents.bundles import bundle_import
from common.errors import NotFound
from tenancy.models import Tenant
from tests.agents.samples import rich_bundle
from tests.threads.conftest import make_thread
from threads.models import Thread
from threads.services.env import (
    EnvResolver,
    tenant_env_delete,
    tenant_env_set,
    thread_env_delete,
    thread_env_get,
    thread_env_set,
)
from threads.state import ThreadState

pytestmark = pytest.mark.django_db

LEVELS = ["thread", "tool_config", "agent", "prompt", "tenant", "platform"]


@pytest.fixture
def thread(tenant: Tenant, settings: Any) -> Thread:
    settings.AGENT_PLATFORM_ENV_SECRETS = {"NAME": "from-platform"}
    return make_thread(tenant)


def _resolver(thread: Thread, levels: set[str]) -> EnvResolver:
    """A resolver where each level in ``levels`` defines NAME as ``from-<level>``."""
    if "thread" in levels:
        thread_env_set(thread=thread, name="NAME", value="from-thread", type="text")
    else:
        thread_env_delete(thread=thread, name="NAME")
    if "tenant" in levels:
        tenant_env_set(tenant=thread.tenant, name="NAME", value="from-tenant", type="text")
    else:
        tenant_env_delete(tenant=thread.tenant, name="NAME")

    def level(name: str) -> dict[str, str]:
        return {"NAME": f"from-{name}"} if name in levels else {}

    return EnvResolver(
        thread=thread,
        tool_env=level("tool_config"),
        agent_env=level("agent"),
        prompt_env=level("prompt"),
        platform=lambda name: "from-platform" if "platform" in levels else None,
    )


@pytest.mark.parametrize("winner", LEVELS)
def test_each_level_wins_over_every_level_after_it(thread: Thread, winner: str) -> None:
    """§11 / ARCHITECTURE: thread > tool-config > agent > prompt > tenant > platform."""
    below = set(LEVELS[LEVELS.index(winner) :])

    assert _resolver(thread, below).value("NAME") == f"from-{winner}"


def test_the_platform_level_is_the_registry_codes_only(thread: Thread) -> None:
    """The platform level reads settings.AGENT_PLATFORM_ENV_SECRETS, and only the state the
    operator's registry code gets (``state.env``) has it: a resolver for what a tenant
    wrote (model keys, prompt text, tool flags) has no platform level."""
    registry_state = ThreadState(thread)

    assert registry_state.env("NAME") == "from-platform"
    assert registry_state.env_type("NAME") == "secret"
    assert EnvResolver(thread=thread).resolve("NAME") is None


@pytest.mark.parametrize(
    ("levels", "expected"),
    [
        ({"thread"}, "text"),
        ({"tenant"}, "text"),
        ({"tool_config", "tenant"}, "secret"),
        ({"agent", "tenant"}, "secret"),
        ({"prompt", "tenant"}, "secret"),
        ({"platform"}, "secret"),
    ],
)
def test_env_type_is_text_only_when_the_winning_source_marks_it_text(
    thread: Thread, levels: set[str], expected: str
) -> None:
    """§11 envType: text only when the winning source is a row marked text; agent, prompt,
    tool-config and platform values are always secret, even over a text row below them."""
    assert _resolver(thread, levels).type("NAME") == expected


def test_a_secret_thread_row_over_a_text_tenant_row_is_secret(thread: Thread) -> None:
    """§11 envType follows the winner, not any lower level."""
    tenant_env_set(tenant=thread.tenant, name="TOKEN", value="t", type="text")
    thread_env_set(thread=thread, name="TOKEN", value="s", type="secret")

    resolver = EnvResolver(thread=thread)
    assert (resolver.value("TOKEN"), resolver.type("TOKEN")) == ("s", "secret")


def test_set_env_without_type_keeps_text_and_new_names_are_secret(thread: Thread) -> None:
    """§11 setEnv: omitting type keeps the existing type; new keys are secret."""
    resolver = EnvResolver(thread=thread)
    thread_env_set(thread=thread, name="SHOWN", value="v1", type="text")

    thread_env_set(thread=thread, name="SHOWN", value="v2")
    thread_env_set(thread=thread, name="FRESH", value="x")

    assert (resolver.value("SHOWN"), resolver.type("SHOWN")) == ("v2", "text")
    assert resolver.type("FRESH") == "secret"


def test_set_env_with_a_blank_value_defines_the_name(thread: Thread) -> None:
    """§11 setEnv(name, ''): a visible blank entry, which env() returns rather than throwing."""
    thread_env_set(thread=thread, name="BLANK", value="")

    assert EnvResolver(thread=thread).value("BLANK") == ""


def test_a_missing_variable_raises_environment_variable_not_found(thread: Thread) -> None:
    """§11: absent everywhere -> throws ``Environment variable not found: NAME``."""
    resolver = EnvResolver(thread=thread, agent_env={"OTHER": "x"})

    with pytest.raises(NotFound) as caught:
        resolver.value("MISSING_VAR")

    assert caught.value.message == "Environment variable not found: MISSING_VAR"
    assert resolver.resolve("MISSING_VAR") is None
    assert resolver.type("MISSING_VAR") == "secret"


def test_another_threads_env_is_not_visible(thread: Thread) -> None:
    """Thread env is per thread: a sibling's variable does not resolve here."""
    sibling = make_thread(thread.tenant)
    thread_env_set(thread=sibling, name="SIBLING_ONLY", value="x")

    with pytest.raises(NotFound):
        EnvResolver(thread=thread).value("SIBLING_ONLY")


def test_another_tenants_tenant_env_is_not_visible(thread: Thread, other_tenant: Tenant) -> None:
    """The tenant level is the thread's own tenant only."""
    tenant_env_set(tenant=other_tenant, name="ORG_ONLY", value="x")

    with pytest.raises(NotFound):
        EnvResolver(thread=thread).value("ORG_ONLY")


def test_set_env_reaches_live_descendants_but_not_scoped_or_terminated_ones(
    tenant: Tenant,
) -> None:
    """DIGEST §11: setEnv propagates to all non-terminated descendants, minus their scoped
    names."""
    bundle = rich_bundle()
    bundle["prompts"][3]["variables"] = [{"name": "REGION", "scoped": True}]  # prompt "pro"
    bundle_import(tenant=tenant, document=bundle)
    parent = make_thread(tenant, agent_name="helper")
    child = make_thread(tenant, agent_name="helper", parent=parent)
    grandchild = make_thread(tenant, agent_name="helper", parent=child)
    scoped_child = make_thread(tenant, agent_name="debate", parent=parent)
    done = make_thread(tenant, agent_name="helper", parent=parent, terminated_at=1)

    ThreadState(parent).set_env("REGION", "eu", type="text")

    def region(thread: Thread) -> str | None:
        found = thread_env_get(thread=thread, name="REGION")
        return None if found is None else found.value

    assert [region(t) for t in (parent, child, grandchild)] == ["eu", "eu", "eu"]
    assert region(scoped_child) is None
    assert region(done) is None
