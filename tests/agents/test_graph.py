"""The graph of an agent (spec DIGEST §11): side prompts, includes, subprompts, registry tools
and target agents, walked once each; the variables they declare and which are scoped."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from agents import selectors
from agents.bundles import bundle_import
from agents.graph import GraphVariable, agent_graph, agent_graph_variables, scoped_variable_names
from agents.registry import Registry, VariableDefinition, tool, use_registry
from tenancy.models import Tenant
from tests.factories import make_thread
from threads.services.env import scoped_env_names

pytestmark = pytest.mark.django_db


def variable(name: str, **flags: Any) -> dict[str, Any]:
    return {"name": name, **flags}


def prompt(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name, "tool_description": f"The {name} prompt", "prompt": f"You are {name}.",
        "model": "m", "include_chat": True, **fields,
    }  # fmt: skip


def agent(name: str, side_a: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "side_a": {"prompt": side_a}, **fields}


def subagent(name: str, side_a: str, side_b: str) -> dict[str, Any]:
    return agent(
        name, side_a, type="dual_ai", side_b={"prompt": side_b}, max_session_turns=2,
        expose_as_tool=True, tool_description=f"The {name} agent",
    )  # fmt: skip


def define(tenant: Tenant, *, prompts: list[dict[str, Any]], agents: list[dict[str, Any]]) -> None:
    model = {"name": "m", "provider": "scripted", "model_id": "scripted",
             "config": {"rules": [{"respond": {"text": "x"}}]}}  # fmt: skip
    bundle_import(
        tenant=tenant,
        document={"version": 1, "models": [model], "prompts": prompts, "agents": agents},
    )


@pytest.fixture
def tools() -> Iterator[Registry]:
    """Registry tools declaring variables (registered before definitions name them)."""
    with use_registry() as scoped:

        @tool(
            description="Send a mail.",
            variables=[
                VariableDefinition(name="SMTP_PASSWORD", required=True),
                VariableDefinition(name="SENDER", type="text"),
            ],
        )
        def send_mail(state: Any) -> str:
            return "sent"

        @tool(description="No variables.")
        def plain(state: Any) -> str:
            return "ok"

        yield scoped


def names(variables: list[GraphVariable]) -> list[tuple[str, str]]:
    return [(v.name, v.declared_in) for v in variables]


def test_side_prompt_and_included_prompts_declare_their_variables(tenant: Tenant) -> None:
    define(
        tenant,
        prompts=[
            prompt(
                "writer",
                prompt=[
                    {"type": "text", "content": "Write. "},
                    {"type": "include", "prompt": "rules"},
                ],
                variables=[variable("API_KEY", required=True)],
            ),
            prompt(
                "rules",
                prompt=[{"type": "include", "prompt": "tone"}],
                variables=[variable("COMPANY", type="text", required=True)],
            ),
            prompt("tone", variables=[variable("VOICE", type="text")]),
            prompt("unrelated", variables=[variable("NEVER")]),
        ],
        agents=[agent("scribe", "writer")],
    )

    found = agent_graph_variables(tenant=tenant, agent_name="scribe")

    assert found == [
        GraphVariable("API_KEY", "secret", True, False, "prompt writer"),
        GraphVariable("COMPANY", "text", True, False, "prompt rules"),
        GraphVariable("VOICE", "text", False, False, "prompt tone"),
    ]


def test_subprompts_named_in_tools_are_walked(tenant: Tenant) -> None:
    define(
        tenant,
        prompts=[
            prompt("writer", tools=["summarize", {"name": "translate", "include_errors": False}]),
            prompt("summarize", variables=[variable("SUMMARY_STYLE")]),
            prompt("translate", tools=["glossary"], variables=[variable("LANG", required=True)]),
            prompt("glossary", variables=[variable("GLOSSARY_URL")]),
        ],
        agents=[agent("scribe", "writer")],
    )

    assert names(agent_graph_variables(tenant=tenant, agent_name="scribe")) == [
        ("SUMMARY_STYLE", "prompt summarize"),
        ("LANG", "prompt translate"),
        ("GLOSSARY_URL", "prompt glossary"),
    ]


def test_registry_tools_declare_their_variables_once(tools: Registry, tenant: Tenant) -> None:
    define(
        tenant,
        prompts=[
            prompt("writer", tools=["send_mail", "plain", "helper"]),
            prompt("helper", tools=[{"name": "send_mail", "env": {"SENDER": "bot@acme"}}]),
        ],
        agents=[agent("scribe", "writer")],
    )

    graph = agent_graph(tenant=tenant, agent_name="scribe")

    assert list(graph.variables) == [
        GraphVariable("SMTP_PASSWORD", "secret", True, False, "tool send_mail"),
        GraphVariable("SENDER", "text", False, False, "tool send_mail"),
    ]
    assert graph.defaults == {"SENDER"}


def test_an_explicit_registry_is_the_one_consulted(tools: Registry, tenant: Tenant) -> None:
    define(tenant, prompts=[prompt("writer", tools=["send_mail"])], agents=[agent("s", "writer")])

    with use_registry() as empty:
        found = agent_graph_variables(
            tenant=tenant, agent_name="s", registry=empty.visible_to(tenant.slug)
        )

    assert found == []


def test_subagent_and_handoff_targets_are_walked_keeping_their_flags(tenant: Tenant) -> None:
    define(
        tenant,
        prompts=[
            prompt("lead", tools=["research", "billing"], variables=[variable("LEAD_KEY")]),
            prompt("pro", variables=[variable("REGION", required=True, scoped=True)]),
            prompt("con", variables=[variable("SEARCH_KEY", required=True)]),
            prompt("clerk", variables=[variable("LEDGER", required=True)]),
        ],
        agents=[
            agent("boss", "lead"),
            subagent("research", "pro", "con"),
            agent("billing", "clerk", expose_as_tool=True, tool_description="Billing desk"),
        ],
    )

    found = agent_graph_variables(tenant=tenant, agent_name="boss")

    assert found == [
        GraphVariable("LEAD_KEY", "secret", False, False, "prompt lead"),
        GraphVariable("REGION", "secret", True, True, "prompt pro", beyond=True),
        GraphVariable("SEARCH_KEY", "secret", True, False, "prompt con", beyond=True),
        GraphVariable("LEDGER", "secret", True, False, "prompt clerk"),
    ]


def test_side_b_counts_for_dual_ai_only(tenant: Tenant) -> None:
    """The side B of an ai_human agent is the human: its prompt never runs."""
    define(
        tenant,
        prompts=[
            prompt("pro", variables=[variable("A_VAR")]),
            prompt("con", variables=[variable("B_VAR")]),
        ],
        agents=[
            subagent("debate", "pro", "con"),
            agent("chat", "pro", side_b={"prompt": "con"}),
        ],
    )

    def declared(name: str) -> list[str]:
        return [v.name for v in agent_graph_variables(tenant=tenant, agent_name=name)]

    assert declared("debate") == ["A_VAR", "B_VAR"]
    assert declared("chat") == ["A_VAR"]


def test_cycles_through_subprompts_and_agents_are_walked_once(tenant: Tenant) -> None:
    define(
        tenant,
        prompts=[
            prompt("ping", tools=["pong", "back"], variables=[variable("PING")]),
            prompt("pong", tools=["ping"], variables=[variable("PONG")]),
            prompt("there", tools=["front"], variables=[variable("THERE")]),
        ],
        agents=[
            agent("front", "ping", expose_as_tool=True, tool_description="Front"),
            agent("back", "there", expose_as_tool=True, tool_description="Back"),
        ],
    )

    assert names(agent_graph_variables(tenant=tenant, agent_name="front")) == [
        ("PING", "prompt ping"),
        ("PONG", "prompt pong"),
        ("THERE", "prompt there"),
    ]


def test_each_definition_is_loaded_once_per_walk(
    tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    define(
        tenant,
        prompts=[
            prompt(
                "top", prompt=[{"type": "include", "prompt": "shared"}], tools=["left", "right"]
            ),
            prompt("left", prompt=[{"type": "include", "prompt": "shared"}]),
            prompt("right", prompt=[{"type": "include", "prompt": "shared"}]),
            prompt("shared", variables=[variable("SHARED", required=True)]),
        ],
        agents=[agent("tree", "top")],
    )
    loads: Counter[str] = Counter()
    real_load = selectors.prompt_load

    def counting_load(*, tenant: Tenant, name: str, version: str | None = None) -> Any:
        loads[name] += 1
        return real_load(tenant=tenant, name=name, version=version)

    monkeypatch.setattr(selectors, "prompt_load", counting_load)

    found = agent_graph_variables(tenant=tenant, agent_name="tree")

    assert names(found) == [("SHARED", "prompt shared")]
    assert loads == {"top": 1, "shared": 1, "left": 1, "right": 1}


def test_agent_and_prompt_env_are_defaults(tenant: Tenant) -> None:
    define(
        tenant,
        prompts=[
            prompt("writer", tools=["helper"], env={"TONE": "dry"}),
            prompt("helper", env={"DEPTH": "2"}),
        ],
        agents=[agent("scribe", "writer", env={"COMPANY": "Acme"})],
    )

    graph = agent_graph(tenant=tenant, agent_name="scribe")

    assert graph.defaults == {"COMPANY", "TONE", "DEPTH"}


def test_an_unknown_agent_has_an_empty_graph(tenant: Tenant) -> None:
    assert agent_graph(tenant=tenant, agent_name="ghost").variables == ()
    assert scoped_variable_names(tenant=tenant, agent_name="ghost") == set()


def test_scoped_names_come_from_the_graph_on_the_agents_own_thread(tenant: Tenant) -> None:
    """Includes, subprompts and handoffs run on the thread; a subagent's scoped names come
    with its own spawn."""
    define(
        tenant,
        prompts=[
            prompt(
                "lead",
                prompt=[{"type": "include", "prompt": "rules"}],
                tools=["worker", "research"],
                variables=[variable("OPEN", scoped=False)],
            ),
            prompt("rules", variables=[variable("RULES_TOKEN", scoped=True)]),
            prompt("worker", variables=[variable("WORKER_TOKEN", scoped=True, required=True)]),
            prompt("pro", variables=[variable("REGION", scoped=True)]),
            prompt("con"),
        ],
        agents=[agent("boss", "lead"), subagent("research", "pro", "con")],
    )

    assert scoped_variable_names(tenant=tenant, agent_name="boss") == {
        "RULES_TOKEN", "WORKER_TOKEN",
    }  # fmt: skip


def test_a_threads_scoped_env_names_are_its_whole_graphs(tenant: Tenant) -> None:
    """threads.services.env.scoped_env_names reads the graph, not only the side prompts."""
    define(
        tenant,
        prompts=[
            prompt("lead", tools=["worker"]),
            prompt("worker", variables=[variable("WORKER_TOKEN", scoped=True)]),
        ],
        agents=[agent("boss", "lead")],
    )

    assert scoped_env_names(thread=make_thread(tenant, agent_name="boss")) == {"WORKER_TOKEN"}
