"""The client's subagent and code calls against a live server and worker: the demo
coordinator hands a draft to its writer/reviewer pair on a child thread, which the
parent lists; variable requests; code run in the sandbox."""

from __future__ import annotations

import asyncio

import pytest
from standard_agents_client import AsyncClient, Client, NotFound, RateLimited

from agents.demo.bundle import demo_bundle

MISSING_ID = "01a2b3c4-0000-7000-8000-000000000000"


@pytest.fixture
def demo(client: Client) -> None:
    """The demo agents, on the scripted model."""
    client.bundles.import_(demo_bundle({}, model_ids={"openai": "x", "anthropic": "y"}))


def test_a_subagents_child_thread_is_listed_on_its_parent(client: Client, demo: None) -> None:
    parent = client.threads.create("coordinator")

    answer = client.turns.submit_and_wait(parent["id"], "Write a line about the sea", timeout=60)
    children = list(client.subagents.iter(parent["id"]))

    assert answer["turn"]["status"] == "completed"
    (child,) = children
    assert (child["name"], child["relationship"]) == ("writing_pair", "writing_pair")
    assert client.threads.get(child["reference"])["parent_id"] == parent["id"]
    assert client.subagents.list(parent["id"], limit=1).results == children
    with pytest.raises(NotFound):
        client.subagents.variable_request(parent["id"], MISSING_ID)


def test_code_runs_in_the_sandbox_and_answers_its_result(client: Client, chat: str) -> None:
    thread = client.threads.create(chat)

    ran = client.threads.run_code(
        thread["id"], "console.log('hi'); export default 6 * 7;", options={"language": "javascript"}
    )
    failed = client.threads.run_code(thread["id"], "throw new Error('nope')")

    assert (ran["status"], ran["result"]) == ("success", 42)
    assert ran["logs"][0]["args"] == ["hi"]
    assert failed["status"] == "error"
    assert failed["error"] is not None
    assert "nope" in failed["error"]["message"]


@pytest.mark.asyncio
async def test_the_async_client_lists_children_and_runs_code(
    aclient: AsyncClient, chat: str
) -> None:
    thread = await aclient.threads.create(chat)

    children = [child async for child in aclient.subagents.iter(thread["id"])]
    ran = await aclient.threads.run_code(thread["id"], "export default 'ok';")

    assert children == []
    assert ran["result"] == "ok"
    with pytest.raises(NotFound):
        await aclient.subagents.provide_variables(thread["id"], MISSING_ID, {"TOKEN": "x"})


@pytest.mark.asyncio
async def test_a_second_run_at_once_is_rate_limited_with_retry_after(
    aclient: AsyncClient, chat: str
) -> None:
    thread = await aclient.threads.create(chat)
    busy = "const end = Date.now() + 1500; while (Date.now() < end) {} export default 1;"

    answers = await asyncio.gather(
        aclient.threads.run_code(thread["id"], busy),
        aclient.threads.run_code(thread["id"], busy),
        return_exceptions=True,
    )

    (limited,) = [answer for answer in answers if isinstance(answer, RateLimited)]
    (ran,) = [answer for answer in answers if not isinstance(answer, BaseException)]
    assert limited.status == 429
    assert limited.code == "rate_limited"
    assert limited.retry_after is not None
    assert limited.retry_after >= 1
    assert ran["status"] == "success"
