"""The interop pages' snippets (docs/interop.md, mcp-client.md, mcp-server.md, agui.md,
a2a.md, a2a-client.md), run as a reader would: each code block is marked
``<!-- tested: <name> -->`` in its page, and is run unchanged but for its placeholders (the
platform's address, an API key, the tenant's slug, and the example MCP server's or A2A agent's
address and token) against a real uvicorn server and a real Celery worker, with the ``mcp``
SDK's server on loopback as the tenant's MCP server and the platform's own A2A agent as its
remote A2A agent. Shell snippets run with bash and curl, Python ones with this environment's
interpreter. A block that cannot run here (a Claude or IDE configuration, a CopilotKit runtime
in TypeScript) is checked for what can be: it parses, it names a route the server serves, and
that route answers with the credentials the block shows."""

from __future__ import annotations

import ast
import asyncio
import json
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agents.bundles import bundle_import
from config import env
from tenancy.models import Role, Tenant
from tests.connectors.mcp_peer import TOKEN, Peer, mcp_peer
from tests.factories import make_api_key, make_tenant
from tests.live import Live, live_platform, working_for

DOCS = Path(env.REPO_DIR) / "docs"
MARKED = re.compile(
    r"^<!-- tested: ([a-z0-9-]+) -->\n```([a-z]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL
)
FENCE = re.compile(r"^```", re.MULTILINE)
# What this module checks, page by page, with each block's language (how it is run, or
# checked): every code block of these pages is one of them.
CHECKED: dict[str, dict[str, str]] = {
    "interop.md": {"register-mcp-server": "sh", "mcp-prompt": "json", "claude-code": "",
                   "mcp-json": "json", "copilotkit": "ts", "a2a-client": "python"},
    "mcp-client.md": {"register-mcp-server": "sh", "tools-answer": "json", "mcp-prompt": "json"},
    "mcp-server.md": {"bearer-header": "", "claude-code": "", "claude-desktop": "json",
                      "mcp-json": "json", "python-client": "python"},
    "agui.md": {"request": "", "copilotkit": "ts", "python-stream": "python"},
    "a2a.md": {"error-body": "json", "python-client": "python", "curl-send-message": "bash"},
    "a2a-client.md": {"register-a2a-agent": "sh", "a2a-prompt": "json", "answer-trailer": ""},
}  # fmt: skip
SNIPPET_TIMEOUT_S = 180.0
HTTP_TIMEOUT_S = 120.0
# The pages' example addresses, replaced by the live platform's.
AGENTS_HOST = "https://agents.example.com"
PLATFORM_HOST = "https://platform.example.com"

# The scripted models' answers (docs/providers.md). ``m``, behind agents ``chat`` and
# ``support``: the time asks for the current_time tool, anything else is echoed. ``fast``,
# the model the pages' MCP prompt names: it asks the MCP server's forecast for the city in
# the user's message, then says it.
RULES: list[dict[str, Any]] = [
    {"when": {"last_tool": "current_time"}, "respond": {"text": "It is {last_tool_result}."}},
    {"when": {"last_role": "user", "last_user_contains": "time"},
     "respond": {"tool_calls": [{"name": "current_time", "arguments": {"timezone": "UTC"}}]}},
    {"respond": {"text": "You said: {last_user_message}"}},
]  # fmt: skip
FAST_RULES: list[dict[str, Any]] = [
    {"when": {"last_tool": "weather__forecast"},
     "respond": {"text": "Forecast: {last_tool_result}"}},
    {"when": {"last_role": "user"},
     "respond": {"tool_calls": [{"name": "weather__forecast",
                                 "arguments": {"city": "{last_user_message}"}}]}},
    {"respond": {"text": "I see no question."}},
]  # fmt: skip
# ``smart``, the model the A2A client page's prompt names: it sends the user's message to the
# remote A2A agent ``translator``, then relays the answer.
SMART_RULES: list[dict[str, Any]] = [
    {"when": {"last_tool": "translator__send_message"},
     "respond": {"text": "Relayed: {last_tool_result}"}},
    {"when": {"last_role": "user"},
     "respond": {"tool_calls": [{"name": "translator__send_message",
                                 "arguments": {"message": "{last_user_message}"}}]}},
]  # fmt: skip


def bundle() -> dict[str, Any]:
    """Agents ``chat`` and ``support`` (the pages' names) on prompt ``p``, and the models
    ``fast`` and ``smart`` the pages' MCP and A2A prompts name."""
    return {
        "version": 1,
        "models": [
            {"name": "m", "provider": "scripted", "model_id": "scripted",
             "config": {"rules": RULES, "streaming": {"chunk_size": 4, "chunk_delay_ms": 1}}},
            {"name": "fast", "provider": "scripted", "model_id": "scripted",
             "config": {"rules": FAST_RULES}},
            {"name": "smart", "provider": "scripted", "model_id": "scripted",
             "config": {"rules": SMART_RULES}},
        ],
        "prompts": [{"name": "p", "tool_description": "Chats with you", "prompt": "You help.",
                     "model": "m", "include_chat": True, "tools": ["current_time"]}],
        "agents": [{"name": "chat", "description": "Chats with you about anything.",
                    "side_a": {"prompt": "p"}},
                   {"name": "support", "side_a": {"prompt": "p"}}],
    }  # fmt: skip


@dataclass(frozen=True)
class Snippet:
    page: str
    name: str
    language: str
    text: str


def page_snippets(page: str) -> dict[str, Snippet]:
    text = (DOCS / page).read_text()
    found: dict[str, Snippet] = {}
    for name, language, body in MARKED.findall(text):
        assert name not in found, f"{page}: two blocks are marked {name!r}"
        found[name] = Snippet(page, name, language, body)
    return found


def snippet(page: str, name: str) -> str:
    return page_snippets(page)[name].text


def filled(text: str, replacements: Mapping[str, str]) -> str:
    """``text`` with each placeholder replaced; a placeholder the text no longer holds
    fails, so a snippet is never run against an example address."""
    for placeholder, value in replacements.items():
        assert placeholder in text, f"the snippet no longer holds {placeholder!r}:\n{text}"
        text = text.replace(placeholder, value)
    return text


def run(command: list[str], *, cwd: Path, environment: Mapping[str, str] | None = None) -> str:
    done = subprocess.run(
        command, cwd=cwd, env=env.child_environment(environment or {}),
        capture_output=True, text=True, timeout=SNIPPET_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{command[0]} exited {done.returncode}:\n{done.stderr}"
    return done.stdout


def run_shell(script: str, tmp_path: Path, environment: Mapping[str, str] | None = None) -> str:
    assert shutil.which("curl"), "the shell snippets use curl"
    return run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, environment=environment)


def run_python(source: str, tmp_path: Path) -> str:
    script = tmp_path / "snippet.py"
    script.write_text(source)
    return run([sys.executable, str(script)], cwd=tmp_path)


def json_values(text: str) -> list[Any]:
    """The JSON documents printed one after another (curl adds no new line)."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while at < len(text):
        if text[at].isspace():
            at += 1
            continue
        value, at = decoder.raw_decode(text, at)
        values.append(value)
    return values


@dataclass
class Site:
    """The live platform, the MCP server, and a tenant with an admin and a member key."""

    live: Live
    peer: Peer
    tenant: Tenant
    admin_key: str
    member_key: str

    @property
    def base_url(self) -> str:
        return self.live.base_url

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        """The REST API with the admin key: the answer's JSON, which must be a success."""
        answer = httpx.request(
            method, f"{self.base_url}{path}", timeout=HTTP_TIMEOUT_S,
            headers={"Authorization": f"Bearer {self.admin_key}"}, **kwargs,
        )  # fmt: skip
        assert answer.is_success, f"{method} {path}: {answer.status_code} {answer.text}"
        return answer.json()


@pytest.fixture(scope="module")
def _live(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_platform(tmp_path_factory.mktemp("interop-docs"), {}) as live:
        yield live


@pytest.fixture(scope="module")
def _peer() -> Iterator[Peer]:
    with mcp_peer() as peer:
        yield peer


@pytest.fixture
def site(_live: Live, _peer: Peer, transactional_db: None) -> Iterator[Site]:
    tenant = make_tenant(f"docs-{uuid.uuid4().hex[:8]}")
    bundle_import(tenant=tenant, document=bundle())
    admin = make_api_key(tenant, role=Role.ADMIN, name="docs admin").secret
    member = make_api_key(tenant, role=Role.MEMBER, name="docs member").secret
    with working_for(_live, tenant):
        yield Site(_live, _peer, tenant, admin, member)


def mcp_tool_names(url: str, headers: Mapping[str, str]) -> list[str]:
    """``tools/list`` through the ``mcp`` SDK's client, sending ``headers``."""

    async def listed() -> list[str]:
        http = httpx2.AsyncClient(headers=dict(headers), timeout=httpx2.Timeout(30, read=120))
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            return [tool.name for tool in (await client.list_tools()).tools]

    return asyncio.run(listed())


def agui_run(site: Site, path: str, headers: Mapping[str, str]) -> list[dict[str, Any]]:
    """A RunAgentInput as ``HttpAgent`` sends one, POSTed to ``path`` with ``headers``:
    the stream's events."""
    body = {
        "threadId": f"docs-{uuid.uuid4().hex[:8]}", "runId": str(uuid.uuid4()),
        "messages": [{"id": "m1", "role": "user", "content": "hello"}],
        "tools": [], "context": [], "state": {}, "forwardedProps": {},
    }  # fmt: skip
    with httpx.stream(
        "POST", f"{site.base_url}{path}", json=body, headers=dict(headers), timeout=HTTP_TIMEOUT_S
    ) as answer:
        assert answer.status_code == 200, answer.read()
        assert answer.headers["content-type"].startswith("text/event-stream")
        return [
            json.loads(line.removeprefix("data:"))
            for line in answer.iter_lines()
            if line.startswith("data:")
        ]


# The pages and their marks -----------------------------------------------------------


def test_every_code_block_of_the_interop_pages_is_marked_and_checked() -> None:
    for page, checked in CHECKED.items():
        text = (DOCS / page).read_text()
        blocks = len(FENCE.findall(text)) // 2
        marked = {name: found.language for name, found in page_snippets(page).items()}

        assert len(marked) == blocks, f"{page}: a code block has no <!-- tested: … --> mark"
        assert marked == checked, page


def test_the_hubs_a2a_lines_are_the_a2a_pages_which_run() -> None:
    fragment = snippet("interop.md", "a2a-client")
    whole = snippet("a2a.md", "python-client")
    whole_lines = [line.strip() for line in whole.splitlines()]
    base = re.search(r'^BASE = "(\S+?)/a2a/', whole, flags=re.MULTILINE)
    assert base is not None
    fragment = filled(fragment, {AGENTS_HOST: base.group(1)})

    at = 0
    for line in filter(None, (line.strip() for line in fragment.splitlines())):
        assert line in whole_lines[at:], f"not in the A2A page's snippet, in order: {line}"
        at = whole_lines.index(line, at) + 1


# MCP client: registering a server, naming its tools -----------------------------------


def prompt_calls_the_mcp_tool(site: Site, page: str) -> None:
    """The page's prompt, saved as written, behind an agent whose turn calls the server."""
    prompt = json.loads(snippet(page, "mcp-prompt"))
    site.api("POST", "/api/v1/prompts", json=prompt)
    site.api(
        "POST", "/api/v1/agents", json={"name": "forecaster", "side_a": {"prompt": "assistant"}}
    )
    thread = site.api("POST", "/api/v1/threads", json={"agent": "forecaster"})
    calls = site.peer.ran("forecast")

    answer = site.api(
        "POST", f"/api/v1/threads/{thread['id']}/turns/wait?timeout=90",
        json={"input": {"content": "Oslo"}},
    )  # fmt: skip

    assert (answer["done"], answer["turn"]["status"]) == (True, "completed"), answer
    tool = [message for message in answer["messages"] if message["role"] == "tool"]
    assert [(message["name"], message["content"]) for message in tool] == [
        ("weather__forecast", "Sunny in Oslo, 21 C")
    ]
    assert answer["messages"][-1]["content"] == "Forecast: Sunny in Oslo, 21 C"
    assert site.peer.ran("forecast") == calls + 1


def test_the_hubs_mcp_server_registration_and_prompt_work_as_written(
    site: Site, tmp_path: Path
) -> None:
    script = filled(
        snippet("interop.md", "register-mcp-server"),
        {AGENTS_HOST: site.base_url, "sap_…": site.admin_key,
         "https://mcp.example.com/mcp": site.peer.url, "the-servers-token": TOKEN},
    )  # fmt: skip

    printed = run_shell(script, tmp_path)

    registered, tools = json_values(printed)
    assert (registered["name"], registered["auth"]) == (
        "weather", {"type": "bearer", "secret_set": True}
    )  # fmt: skip
    assert TOKEN not in printed
    assert tools["error"] is None
    assert {"weather__forecast", "weather__wire_money"} <= {t["name"] for t in tools["tools"]}
    prompt_calls_the_mcp_tool(site, "interop.md")


def test_the_mcp_client_pages_registration_tools_answer_and_prompt_work_as_written(
    site: Site, tmp_path: Path
) -> None:
    script = filled(
        snippet("mcp-client.md", "register-mcp-server"),
        {PLATFORM_HOST: site.base_url,
         "https://mcp.example.com/mcp": site.peer.url, "the-servers-token": TOKEN},
    )  # fmt: skip

    (registered,) = json_values(run_shell(script, tmp_path, {"ADMIN_KEY": site.admin_key}))
    tools = site.api("GET", "/api/v1/mcp-servers/weather/tools")

    assert registered["name"] == "weather"
    assert registered["auth"] == {"type": "bearer", "secret_set": True}
    shown = json.loads(snippet("mcp-client.md", "tools-answer"))
    assert set(tools) == set(shown)
    assert set(tools["health"]) == set(shown["health"])
    (forecast,) = (tool for tool in tools["tools"] if tool["name"] == "weather__forecast")
    (example,) = shown["tools"]
    assert set(forecast) == set(example)
    for field in ("name", "remote_name", "description"):
        assert forecast[field] == example[field]
    schema, example_schema = forecast["input_schema"], example["input_schema"]
    assert schema["required"] == example_schema["required"]
    assert set(schema["properties"]) == set(example_schema["properties"])
    assert tools["error"] is None
    assert tools["health"]["ok"] is True
    prompt_calls_the_mcp_tool(site, "mcp-client.md")


# MCP server: clients of /mcp/ ---------------------------------------------------------

# What /mcp/ lists to a member: the tenant's agents, then the two fixed tools.
LISTED_TOOLS = {"chat", "support", "read_thread_messages", "answer_action"}


@pytest.mark.parametrize("page", ["interop.md", "mcp-server.md"])
def test_the_claude_code_line_names_the_mcp_endpoint_which_answers_its_header(
    site: Site, page: str
) -> None:
    line = snippet(page, "claude-code")
    parsed = re.fullmatch(
        r'claude mcp add --transport http (\w+) (\S+) \\\n\s+--header "([^"]+)"\n', line
    )
    assert parsed is not None, line
    url = filled(parsed.group(2), {AGENTS_HOST: site.base_url})
    name, _, value = filled(parsed.group(3), {"sap_…": site.member_key}).partition(": ")

    assert url == f"{site.base_url}/mcp/"
    assert set(mcp_tool_names(url, {name: value})) == LISTED_TOOLS


@pytest.mark.parametrize("page", ["interop.md", "mcp-server.md"])
def test_the_mcp_json_names_the_mcp_endpoint_which_answers_its_headers(
    site: Site, page: str
) -> None:
    config = json.loads(snippet(page, "mcp-json"))
    (server,) = config["mcpServers"].values()
    url = filled(server["url"], {AGENTS_HOST: site.base_url})
    headers = {
        name: filled(value, {"sap_…": site.member_key}) for name, value in server["headers"].items()
    }

    assert url == f"{site.base_url}/mcp/"
    assert set(mcp_tool_names(url, headers)) == LISTED_TOOLS


def test_the_claude_desktop_config_runs_mcp_remote_on_the_mcp_endpoint_with_its_header(
    site: Site,
) -> None:
    config = json.loads(snippet("mcp-server.md", "claude-desktop"))
    (server,) = config["mcpServers"].values()
    command: str = server["command"]
    package, url, option, header = server["args"]
    # mcp-remote reads ${NAME} in its arguments from the environment Claude gives it.
    given = {
        name: filled(value, {"sap_…": site.member_key}) for name, value in server["env"].items()
    }
    sent = re.sub(r"\$\{(\w+)\}", lambda match: given[match.group(1)], header)
    name, _, value = sent.partition(":")

    assert (command, package, option) == ("npx", "mcp-remote", "--header")
    assert filled(url, {AGENTS_HOST: site.base_url}) == f"{site.base_url}/mcp/"
    assert set(mcp_tool_names(f"{site.base_url}/mcp/", {name: value.strip()})) == LISTED_TOOLS


def test_the_bearer_header_has_the_shape_of_an_issued_key(site: Site) -> None:
    shape = snippet("mcp-server.md", "bearer-header").strip()
    pattern = re.escape(shape).replace(re.escape("<prefix>"), "(?P<prefix>[a-z0-9]+)")
    pattern = pattern.replace(re.escape("<secret>"), r"\S+")
    issued = make_api_key(site.tenant, role=Role.MEMBER, name="shape")

    matched = re.fullmatch(pattern, f"Authorization: Bearer {issued.secret}")

    assert matched is not None, shape
    assert matched.group("prefix") == issued.api_key.prefix


def test_the_mcp_servers_python_client_runs_as_written(site: Site, tmp_path: Path) -> None:
    source = filled(
        snippet("mcp-server.md", "python-client"),
        {AGENTS_HOST: site.base_url, "sap_…": site.member_key},
    )

    printed = run_python(source, tmp_path).splitlines()

    assert set(ast.literal_eval(printed[0])) == LISTED_TOOLS
    first, thread_id = printed[1].rsplit(" ", 1)
    assert first == "You said: hello"
    uuid.UUID(thread_id)
    assert printed[-1] == "You said: and then?"
    progress = [line.split(" ", 1) for line in printed[2:-1]]
    assert [float(n) for n, _ in progress] == list(range(1, len(progress) + 1))
    assert progress[0][1] == "turn.started", printed


# AG-UI ----------------------------------------------------------------------------------


def test_the_agui_request_head_is_what_the_route_answers_as_a_stream(site: Site) -> None:
    head = snippet("agui.md", "request").splitlines()
    method, path = head[0].split()
    headers = dict(re.split(r":\s*", line.split("  ")[0], maxsplit=1) for line in head[1:])
    headers["Authorization"] = filled(headers["Authorization"], {"<API key>": site.member_key})

    events = agui_run(site, path.replace("{agent}", "support"), headers)

    assert method == "POST"
    assert (events[0]["type"], events[-1]["type"]) == ("RUN_STARTED", "RUN_FINISHED")


@pytest.mark.parametrize("page", ["interop.md", "agui.md"])
def test_the_copilotkit_runtime_names_the_agui_route_which_answers_its_header(
    site: Site, page: str
) -> None:
    source = snippet(page, "copilotkit")
    agent = re.search(r'(\w+): new HttpAgent\(\{\s*url: "([^"]+)",\s*headers: \{ (.+?) \}', source)
    assert agent is not None, source
    name, url, header = agent.groups()
    assert header == "Authorization: `Bearer ${process.env.PLATFORM_API_KEY}`"
    address = re.fullmatch(r"(https://[^/]+)(/.*)", url)
    assert address is not None, url
    host, path = address.groups()

    events = agui_run(site, path, {"Authorization": f"Bearer {site.member_key}"})

    assert host in (AGENTS_HOST, PLATFORM_HOST)
    assert path == f"/api/v1/agui/{name}"
    assert events[-1]["type"] == "RUN_FINISHED"
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == (
        "You said: hello"
    )


def test_the_agui_python_stream_runs_as_written(site: Site, tmp_path: Path) -> None:
    source = filled(
        snippet("agui.md", "python-stream"),
        {PLATFORM_HOST: site.base_url, "sap_…": site.member_key},
    )

    printed = run_python(source, tmp_path).splitlines()

    kinds = [line.split(" ", 1)[0] for line in printed]
    assert (kinds[0], kinds[-1]) == ("RUN_STARTED", "RUN_FINISHED")
    assert {"TOOL_CALL_START", "TOOL_CALL_RESULT"} <= set(kinds)
    text = "".join(
        line.split(" ", 1)[1] for line in printed if line.startswith("TEXT_MESSAGE_CONTENT ")
    )
    assert re.fullmatch(r"It is .+\.", text), text


# A2A ------------------------------------------------------------------------------------


def test_the_a2a_python_client_runs_as_written(site: Site, tmp_path: Path) -> None:
    source = filled(
        snippet("a2a.md", "python-client"),
        {"http://127.0.0.1:8000": site.base_url, "/a2a/acme/": f"/a2a/{site.tenant.slug}/",
         "sap_…": site.member_key},
    )  # fmt: skip

    printed = run_python(source, tmp_path)

    assert "TASK_STATE_COMPLETED" in printed, printed
    assert "You said: Hello" in printed, printed


def test_the_a2a_curl_send_message_runs_as_written(site: Site, tmp_path: Path) -> None:
    script = filled(
        snippet("a2a.md", "curl-send-message"),
        {"/a2a/acme/": f"/a2a/{site.tenant.slug}/"},
    )

    printed = run_shell(script, tmp_path, {"PORT": str(site.live.port), "API_KEY": site.member_key})

    (answer,) = json_values(printed)
    task = answer["result"]["task"]
    assert (answer["jsonrpc"], answer["id"]) == ("2.0", 1)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert {"id", "contextId", "artifacts", "history"} <= set(task)
    assert task["artifacts"][0]["parts"][0]["text"] == "You said: Hello"


def test_the_a2a_error_body_is_the_answer_to_a_call_without_a_key(site: Site) -> None:
    shown = json.loads(snippet("a2a.md", "error-body"))

    answer = httpx.post(
        f"{site.base_url}/a2a/{site.tenant.slug}/support/",
        json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}},
        headers={"A2A-Version": "1.0"}, timeout=HTTP_TIMEOUT_S,
    )  # fmt: skip

    assert answer.status_code == 401
    assert answer.json() == shown


# A2A client: this platform's own agent ``chat`` as the tenant's remote A2A agent -----------


def test_the_a2a_client_pages_registration_prompt_and_answer_work_as_written(
    site: Site, tmp_path: Path
) -> None:
    agent_url = f"{site.base_url}/a2a/{site.tenant.slug}/chat/"
    script = filled(
        snippet("a2a-client.md", "register-a2a-agent"),
        {PLATFORM_HOST: site.base_url, "https://agents.example.com/translator/": agent_url,
         "the-agents-token": site.member_key},
    )  # fmt: skip

    (registered,) = json_values(run_shell(script, tmp_path, {"ADMIN_KEY": site.admin_key}))
    card = site.api("GET", "/api/v1/a2a-agents/translator/card")
    site.api("POST", "/api/v1/prompts", json=json.loads(snippet("a2a-client.md", "a2a-prompt")))
    site.api("POST", "/api/v1/agents", json={"name": "delegating",
                                             "side_a": {"prompt": "assistant"}})  # fmt: skip
    thread = site.api("POST", "/api/v1/threads", json={"agent": "delegating"})
    answer = site.api(
        "POST", f"/api/v1/threads/{thread['id']}/turns/wait?timeout=90",
        json={"input": {"content": "good night"}},
    )  # fmt: skip

    assert (registered["name"], registered["tool"]) == ("translator", "translator__send_message")
    assert registered["auth"] == {"type": "bearer", "secret_set": True}
    assert site.member_key not in json.dumps(registered)
    assert (card["error"], card["card"]["name"]) == (None, "chat")
    assert (answer["done"], answer["turn"]["status"]) == (True, "completed"), answer
    (tool,) = [message for message in answer["messages"] if message["role"] == "tool"]
    assert tool["name"] == "translator__send_message"
    said, trailer = str(tool["content"]).split("\n")
    assert said == "You said: good night"
    example = snippet("a2a-client.md", "answer-trailer").splitlines()[1]
    shape = re.escape(example).replace("…", "[^;\\]]+")
    assert re.fullmatch(shape.replace("5f0c", "").replace("9b1e", ""), trailer), trailer
    assert answer["messages"][-1]["content"] == f"Relayed: {tool['content']}"
