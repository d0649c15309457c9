"""Required variables: what an agent's graph demands when a thread of it is created
(spec DIGEST §11: "all required variables in the agent graph must be provided when a thread
is created")."""

from __future__ import annotations

from collections.abc import Mapping

from agents.graph import agent_graph
from common.errors import ValidationFailed
from tenancy.models import Tenant
from threads.services.env import EnvInput, tenant_env_names


def required_variables_check(
    *, tenant: Tenant, agent_name: str, env: Mapping[str, EnvInput]
) -> None:
    """Refuse a new top-level thread of ``agent_name`` whose required variables would not
    resolve.

    Every variable declared ``required`` in the agent's graph (see :mod:`agents.graph`)
    must be in ``env`` with a value that is not blank, or have a value at a level below the
    thread: an ``env`` of the graph's agents, prompts or ``tools[]`` entries, or the tenant
    env (never the platform's, which prompts cannot read). A subagent's scoped variables
    are not demanded: they come with its spawn (for a top-level thread, its creation is the
    spawn). An unknown agent has nothing to demand (thread creation reports it). Child
    threads are not checked here: they inherit
    their parent's env.

    Raises ValidationFailed naming each missing variable and where it is declared, with
    ``field`` ``env.<first missing name>`` and ``details.missing``.
    """
    graph = agent_graph(tenant=tenant, agent_name=agent_name)
    wanted: dict[str, list[str]] = {}
    for variable in graph.variables:
        if variable.required and not (variable.scoped and variable.beyond):
            places = wanted.setdefault(variable.name, [])
            if variable.declared_in not in places:
                places.append(variable.declared_in)
    unresolved = [
        name for name in wanted if not _given(env.get(name)) and name not in graph.defaults
    ]
    if unresolved:
        # Presence is all that counts at the tenant level: names only, nothing decrypted.
        stored = {entry.name for entry in tenant_env_names(tenant=tenant)}
        missing = [name for name in unresolved if name not in stored]
        if missing:
            raise _missing(missing, wanted)


def _given(item: EnvInput | None) -> bool:
    return item is not None and item.value.strip() != ""


def _missing(names: list[str], wanted: Mapping[str, list[str]]) -> ValidationFailed:
    listed = ", ".join(f"{name} ({', '.join(wanted[name])})" for name in names)
    noun, pronoun = ("variable", "it") if len(names) == 1 else ("variables", "them")
    return ValidationFailed(
        f"missing required {noun}: {listed}; provide {pronoun} in env",
        field=f"env.{names[0]}",
        details={
            "missing": [{"name": name, "declared_in": wanted[name]} for name in names],
        },
    )
