"""The client's KV store and env variables (thread and tenant) against a live server."""

from __future__ import annotations

import pytest
from standard_agents_client import AsyncClient, Client, Conflict, NotFound


def test_kv_values_are_set_read_renamed_listed_and_deleted(client: Client, chat: str) -> None:
    thread_id = client.threads.create(chat)["id"]
    for key in ("a", "b", "dir/c"):
        client.kv.set(thread_id, key, {"key": key, "n": [1, 2]})

    renamed = client.kv.set(thread_id, "dir/d", 42, previous_key="dir/c")
    first = client.kv.list(thread_id, limit=2)
    keys = [item["key"] for item in client.kv.iter(thread_id, limit=2)]
    searched = [item["key"] for item in client.kv.list(thread_id, search="DIR")]

    assert client.kv.get(thread_id, "a")["value"] == {"key": "a", "n": [1, 2]}
    assert (renamed["key"], renamed["value"]) == ("dir/d", 42)
    assert len(first.results) == 2
    assert first.next is not None
    assert keys == ["a", "b", "dir/d"]
    assert searched == ["dir/d"]
    with pytest.raises(Conflict):
        client.kv.set(thread_id, "a", 1, previous_key="b")
    with pytest.raises(ValueError, match="delete"):
        client.kv.set(thread_id, "a", None)

    client.kv.delete(thread_id, "a")
    with pytest.raises(NotFound):
        client.kv.get(thread_id, "a")


def test_env_variables_show_names_and_types_never_values(client: Client, chat: str) -> None:
    thread_id = client.threads.create(chat, env={"REGION": {"value": "eu", "type": "text"}})["id"]

    set_secret = client.env.set(thread_id, "TOKEN", "s3cr3t")
    set_text = client.env.set(thread_id, "MODE", "fast", type="text")
    listed = [(e["name"], e["type"]) for e in client.env.iter(thread_id, limit=1)]
    client.env.delete(thread_id, "MODE")

    assert (set_secret["name"], set_secret["type"]) == ("TOKEN", "secret")
    assert "value" not in set_text
    assert listed == [("MODE", "text"), ("REGION", "text"), ("TOKEN", "secret")]
    assert [e["name"] for e in client.env.list(thread_id)] == ["REGION", "TOKEN"]
    with pytest.raises(NotFound):
        client.env.delete(thread_id, "MODE")


def test_tenant_env_variables_are_set_listed_and_deleted(client: Client) -> None:
    client.tenant_env.set("ZONE", "north", type="text")
    client.tenant_env.set("API_TOKEN", "x")

    listed = [(e["name"], e["type"]) for e in client.tenant_env.iter()]
    client.tenant_env.delete("ZONE")

    assert listed == [("API_TOKEN", "secret"), ("ZONE", "text")]
    assert [e["name"] for e in client.tenant_env.list()] == ["API_TOKEN"]


@pytest.mark.asyncio
async def test_the_async_client_sets_and_reads_kv_values(aclient: AsyncClient, chat: str) -> None:
    thread_id = (await aclient.threads.create(chat))["id"]

    await aclient.kv.set(thread_id, "k", ["v"])
    await aclient.env.set(thread_id, "NAME", "value", type="text")

    assert (await aclient.kv.get(thread_id, "k"))["value"] == ["v"]
    assert [item["key"] async for item in aclient.kv.iter(thread_id)] == ["k"]
    assert [e["name"] for e in await aclient.env.list(thread_id)] == ["NAME"]
    await aclient.kv.delete(thread_id, "k")
    with pytest.raises(NotFound):
        await aclient.kv.get(thread_id, "k")
