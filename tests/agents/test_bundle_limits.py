"""Bundles are parsed within limits (common.parsing): a YAML alias, nesting past MAX_DEPTH
and more than MAX_BUNDLE_NODES values are each refused while parsing, a 400 naming the
limit within a second, through the API, the console and the command; a web process
refusing hostile bundles keeps answering everyone else; documents within the limits pass."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from io import BytesIO
from typing import Any

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from rest_framework.test import APIClient

from agents.bundles import (
    MAX_BUNDLE_BYTES,
    MAX_BUNDLE_NODES,
    bundle_dump,
    bundle_export,
    bundle_parse,
)
from agents.models import Prompt
from common.errors import ValidationFailed
from common.payloads import MAX_DEPTH
from config.launcher import background_server
from tenancy.models import Role, Tenant
from tests.console.conftest import client_of, team_make
from tests.factories import make_api_key, make_tenant
from tests.support import current_database_url, server_warm_up

pytestmark = pytest.mark.django_db

ANSWER_WITHIN_S = 1.0


def alias_bomb(levels: int = 9) -> bytes:
    """The "billion laughs": each list holds nine aliases of the list before it, so nine
    levels expand to 9**9 (387 million) strings from well under 2 KB."""
    lines = ["lol0: &lol0 [" + ", ".join(["lol"] * 9) + "]"]
    for level in range(1, levels):
        aliases = ", ".join([f"*lol{level - 1}"] * 9)
        lines.append(f"lol{level}: &lol{level} [{aliases}]")
    return ("\n".join(lines) + "\n").encode()


def _prompt(name: str, tools: int = 0) -> dict[str, Any]:
    return {"name": name, "tool_description": "Answers.", "prompt": "Hi.", "model": "fast",
            "tools": [{"name": f"tool_{index}"} for index in range(tools)]}  # fmt: skip


def _timed_post(client: APIClient, body: bytes, content_type: str) -> tuple[Any, float]:
    """The answer to ``body`` and how long it took, once a first request has loaded the
    views (so the time is the bundle's)."""
    assert client.get("/api/v1/me").status_code == 200
    started = time.monotonic()
    response = client.post("/api/v1/bundles", body, content_type=content_type)
    return response, time.monotonic() - started


def test_a_yaml_alias_bomb_is_a_400_within_a_second_naming_the_alias(
    tenant: Tenant, member: APIClient
) -> None:
    body = alias_bomb()

    response, elapsed = _timed_post(member, body, "application/yaml")

    assert len(body) < 2048
    assert elapsed < ANSWER_WITHIN_S
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "invalid",
        "message": "the bundle uses a YAML alias (*lol0 at line 2), which is not accepted: "
        "write the value out where it is used",
        "field": "lol1[0]",
    }


def test_a_json_bundle_of_many_repeated_entries_is_a_400_within_a_second(
    tenant: Tenant, member: APIClient
) -> None:
    entries = [_prompt(f"p{index}", tools=8) for index in range(20_000)]
    body = json.dumps({"version": 1, "prompts": entries}).encode()
    assert 4 * 2**20 < len(body) <= MAX_BUNDLE_BYTES

    response, elapsed = _timed_post(member, body, "application/json")

    assert elapsed < ANSWER_WITHIN_S
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"] == (
        f"the bundle holds more than {MAX_BUNDLE_NODES} values (the limit MAX_BUNDLE_NODES)"
    )
    assert "field" not in error  # counted while JSON was read, before a path was known
    assert not Prompt.objects.for_tenant(tenant).exists()


def test_a_json_list_of_small_values_near_the_byte_limit_is_a_400_within_a_second(
    tenant: Tenant, member: APIClient
) -> None:
    body = ("[" + ",".join(["[0,0,0,0,0,0,0,0,0]"] * 250_000) + "]").encode()
    assert 4 * 2**20 < len(body) <= MAX_BUNDLE_BYTES

    response, elapsed = _timed_post(member, body, "application/json")

    assert elapsed < ANSWER_WITHIN_S
    assert response.status_code == 400
    assert "MAX_BUNDLE_NODES" in response.json()["error"]["message"]


def test_a_bundle_using_an_anchor_and_a_merge_key_is_told_to_write_the_value_out(
    tenant: Tenant, member: APIClient
) -> None:
    body = b"""version: 1
prompt_defaults: &defaults {model: fast, prompt: Hi.}
prompts:
  - name: first
    tool_description: The first.
    <<: *defaults
"""

    response = member.post("/api/v1/bundles", body, content_type="application/yaml")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"].startswith("the bundle uses a YAML alias (*defaults at line 6)")
    assert error["field"] == "prompts[0].<<"


def test_an_anchor_never_referred_to_is_accepted(tenant: Tenant, member: APIClient) -> None:
    models = "models: [{name: fast, provider: openai, model_id: gpt-4o-mini}]\n"
    prompts = "prompts:\n  - &first {name: first, tool_description: F, prompt: Hi., model: fast}\n"

    body = f"version: 1\n{models}{prompts}".encode()

    response = member.post("/api/v1/bundles", body, content_type="application/yaml")

    assert response.status_code == 200, response.json()
    assert Prompt.objects.for_tenant(tenant).filter(name="first").exists()


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_a_document_of_exactly_max_bundle_nodes_values_parses_and_one_more_is_refused(
    fmt: str,
) -> None:
    def document(values: int) -> str:  # the list, then its scalars
        items = [0] * (values - 1)
        return json.dumps(items) if fmt == "json" else "".join("- 0\n" for _ in items)

    parsed = bundle_parse(document(MAX_BUNDLE_NODES))
    with pytest.raises(ValidationFailed, match="more than 50000 values") as refused:
        bundle_parse(document(MAX_BUNDLE_NODES + 1))

    assert parsed == [0] * (MAX_BUNDLE_NODES - 1)
    assert refused.value.field == f"[{MAX_BUNDLE_NODES - 1}]"


def _json_lists(depth: int) -> str:  # the innermost value at ``depth``
    return "[" * depth + "1" + "]" * depth


def _yaml_flow(depth: int) -> str:
    return "a: " + "{a: " * (depth - 1) + "1" + "}" * (depth - 1)


def _yaml_block(depth: int) -> str:
    return "".join(" " * level + "a:\n" for level in range(depth)) + " " * depth + "1\n"


@pytest.mark.parametrize(
    ("nested", "field"),
    [
        (_json_lists, "[0]" * (MAX_DEPTH + 1)),
        (_yaml_flow, ".".join(["a"] * (MAX_DEPTH + 1))),
        (_yaml_block, ".".join(["a"] * (MAX_DEPTH + 1))),
    ],
)
def test_nesting_of_max_depth_parses_and_one_level_more_is_refused_where_it_is(
    nested: Callable[[int], str], field: str
) -> None:
    bundle_parse(nested(MAX_DEPTH))
    with pytest.raises(ValidationFailed, match="the limit MAX_DEPTH") as refused:
        bundle_parse(nested(MAX_DEPTH + 1))

    assert refused.value.field == field


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"version: 1\nprompts: 2024-02-30\n", "day is out of range"),
        (b"version: " + b"1" * 5000 + b"\n", "4300 digits"),
        (b"[" * 100_000, "the limit MAX_DEPTH"),
    ],
    ids=["impossible-date", "huge-integer", "json-deeper-than-the-recursion-limit"],
)
def test_values_yaml_or_json_cannot_read_are_a_400(
    tenant: Tenant, member: APIClient, body: bytes, words: str
) -> None:
    response = member.post("/api/v1/bundles", body, content_type="application/yaml")

    assert response.status_code == 400
    assert words in response.json()["error"]["message"]


def test_an_export_sharing_a_value_is_dumped_without_anchors_and_imports_again(
    tenant: Tenant,
) -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    document = {**bundle_export(tenant=tenant), "shared": [schema, schema]}

    dumped = bundle_dump(document, "yaml")

    assert "&id" not in dumped
    assert "*id" not in dumped
    assert bundle_parse(dumped) == json.loads(json.dumps(document))


def test_the_import_command_refuses_an_alias_bomb(tenant: Tenant) -> None:
    with pytest.raises(CommandError, match=r"YAML alias \(\*lol0 at line 2\)"):
        call_command("import_bundle", "-", "--tenant", tenant.slug, stdin=BytesIO(alias_bomb()))


def test_the_console_import_refuses_an_alias_bomb_and_an_oversized_file_at_its_field() -> None:
    team = team_make()
    client = client_of(team.member)
    url = reverse("console:agents-import")

    started = time.monotonic()
    bomb = client.post(url, {"document": alias_bomb().decode()})
    elapsed = time.monotonic() - started
    upload = SimpleUploadedFile("big.yaml", b"#" * (MAX_BUNDLE_BYTES + 1))
    oversized = client.post(url, {"upload": upload})

    assert elapsed < ANSWER_WITHIN_S
    assert "the bundle uses a YAML alias (*lol0 at line 2)" in bomb.content.decode()
    assert oversized.context["form"].errors["upload"] == [
        f"the file is {MAX_BUNDLE_BYTES + 1} bytes; a bundle is at most {MAX_BUNDLE_BYTES} "
        "bytes (the limit MAX_BUNDLE_BYTES)"
    ]


# On a live server ----------------------------------------------------------------------------


def _request(port: int, method: str, path: str, key: str, body: bytes | None = None) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/yaml"}
        connection.request(method, path, body=body, headers=headers)
        return connection.getresponse().status
    finally:
        connection.close()


def _timed(call: Callable[[], int]) -> tuple[int, float]:
    started = time.monotonic()
    status = call()
    return status, time.monotonic() - started


@pytest.mark.django_db(transaction=True)
def test_a_web_process_refusing_alias_bombs_keeps_answering_other_requests(
    transactional_db: None,
) -> None:
    tenant = make_tenant("bombed")
    member, other = (make_api_key(tenant, role=Role.MEMBER).secret for _ in range(2))
    overrides = {"DATABASE_URL": current_database_url(), "WEB_PROCESSES": "1"}
    with background_server(overrides) as (port, _pid):
        server_warm_up(port, timeout=30)
        with ThreadPoolExecutor(max_workers=4) as pool:
            bomb = partial(_request, port, "POST", "/api/v1/bundles", member, alias_bomb())
            bombs = [pool.submit(_timed, bomb) for _ in range(3)]
            time.sleep(0.2)  # the bombs are being answered
            me_status, me_elapsed = _timed(partial(_request, port, "GET", "/api/v1/me", other))
            answered = [bomb.result(timeout=30) for bomb in bombs]

    assert (me_status, me_elapsed < ANSWER_WITHIN_S) == (200, True)
    assert [(status, elapsed < ANSWER_WITHIN_S) for status, elapsed in answered] == [
        (400, True)
    ] * 3


def test_yaml_a_person_writes_still_parses() -> None:
    text = "version: 1\nmodels:\n  - {name: fast, provider: openai, model_id: gpt-4o-mini}\n"

    assert bundle_parse(text) == yaml.safe_load(text)
