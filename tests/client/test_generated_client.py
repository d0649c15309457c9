"""A client generated from the OpenAPI schema (openapi-python-client) runs the quickstart
against a live server: the schema is complete when a generator that trusts only it makes a
client that imports a bundle, creates a thread, submits a turn, waits for it and reads the
answer, every request and answer going through the generated functions and models.

The generation must also warn of nothing: a warning is an operation or a component left out
of the client, or a response it cannot parse."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import httpx
import pytest
from openapi_python_client.strings import PythonIdentifier

from tests.client.conftest import LiveApi
from tests.reliability.platform import chat_bundle

PACKAGE = "generated_platform_client"
GENERATOR = Path(sys.executable).with_name("openapi-python-client")
GENERATE_TIMEOUT_S = 120.0
# Offline and quick: no project metadata around the package, no formatter run after it.
# A file answers in its own media type, which the schema says as `*/*`, and an export in
# JSON lines (`application/x-ndjson`): the generated client takes both as bytes.
GENERATOR_CONFIG: dict[str, Any] = {
    "post_hooks": [],
    "content_type_overrides": {
        "*/*": "application/octet-stream",
        "application/x-ndjson": "application/octet-stream",
    },
}
# Warnings that leave nothing a client needs out: the operation is generated with its other
# body. Each is (the warning's headline, its detail).
HARMLESS_WARNINGS = {
    (
        "WARNING parsing POST /api/v1/bundles/ within bundles.",
        "Unsupported content type application/yaml",
    ),  # a bundle may be sent as YAML too; the client sends its JSON form
}
# What the generator prints around its warnings, saying nothing of the document.
CHATTER = ("Warning(s) encountered", "If you believe this was a mistake")
WAIT_TIMEOUT_S = 60


@dataclass
class Generated:
    """The generated package, the schema it came from and what the generator said."""

    package: ModuleType
    warnings: list[str]
    document: dict[str, Any]

    def operation(self, method: str, path: str) -> ModuleType:
        """The module of the operation at ``method`` ``path``, as the schema spells them:
        the generator names it by the operation's tag and id."""
        operation = self.document["paths"][path][method.lower()]
        tag = PythonIdentifier(operation["tags"][0], prefix="tag")
        name = PythonIdentifier(operation["operationId"], prefix="field")
        if not (self.package_path / "api" / tag / f"{name}.py").exists():
            said = [
                " ".join(self.warnings[index : index + 2])
                for index, warning in enumerate(self.warnings)
                if f"{method} {path} " in warning
            ]
            pytest.fail(f"the generator left out {method} {path}: {said}")
        return importlib.import_module(f"{self.package.__name__}.api.{tag}.{name}")

    @property
    def package_path(self) -> Path:
        return Path(self.package.__path__[0])

    def client(self, live_api: LiveApi) -> Any:
        """A generated client with the test tenant's key; a status the schema does not list
        for the operation raises."""
        return self.package.AuthenticatedClient(
            base_url=live_api.base_url,
            token=live_api.api_key,
            raise_on_unexpected_status=True,
            timeout=httpx.Timeout(WAIT_TIMEOUT_S + 30),
        )


def _warnings(output: str) -> list[str]:
    """What the generator said of the document: it prints each warning as paragraphs, a
    headline, a detail, then the part of the document concerned as JSON (left out here)."""
    said = "\n".join(line for line in output.splitlines() if not line.startswith(CHATTER))
    paragraphs = [p.strip() for p in said.split("\n\n") if p.strip()]
    prose = [p for p in paragraphs if not p.startswith(("{", "["))]
    harmful: list[str] = []
    for index, paragraph in enumerate(prose):
        pair = (paragraph, prose[index + 1] if index + 1 < len(prose) else "")
        previous = (prose[index - 1], paragraph) if index else ("", "")
        if pair not in HARMLESS_WARNINGS and previous not in HARMLESS_WARNINGS:
            harmful.append(paragraph)
    return harmful


def _generate(document: dict[str, Any], directory: Path) -> tuple[ModuleType, list[str]]:
    """Runs the generator on ``document`` into ``directory`` and imports what it made."""
    (directory / "schema.json").write_text(json.dumps(document))
    (directory / "config.json").write_text(json.dumps(GENERATOR_CONFIG))
    run = subprocess.run(
        [str(GENERATOR), "generate", "--path", str(directory / "schema.json"),
         "--config", str(directory / "config.json"), "--meta", "none",
         "--output-path", str(directory / PACKAGE)],
        capture_output=True, text=True, timeout=GENERATE_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    sys.path.insert(0, str(directory))
    try:
        return importlib.import_module(PACKAGE), _warnings(run.stderr)
    finally:
        sys.path.remove(str(directory))


@pytest.fixture
def generated(live_api: LiveApi, tmp_path: Path) -> Iterator[Generated]:
    answer = httpx.get(f"{live_api.base_url}/api/schema/", headers={"Accept": "application/json"})
    document = answer.raise_for_status().json()
    try:
        yield Generated(*_generate(document, tmp_path), document=document)
    finally:
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


def _body(operation: ModuleType, data: Mapping[str, Any]) -> Any:
    """The operation's request body model, built from ``data`` by the model's own parser."""
    declared = typing.get_type_hints(operation.sync_detailed)["body"]
    models = [t for t in typing.get_args(declared) or (declared,) if hasattr(t, "from_dict")]
    assert len(models) == 1, f"{operation.__name__} takes no single JSON body: {declared}"
    return models[0].from_dict(dict(data))


def _undocumented(model: Any, where: str) -> list[str]:
    """Fields the server sent that ``model``'s component does not declare, at any depth. A
    model that declares no field at all is a free-form map (metadata): its keys are data."""
    if not attrs.has(type(model)):
        if isinstance(model, list):
            return [p for i, item in enumerate(model) for p in _undocumented(item, f"{where}[{i}]")]
        return []
    declared = [f.name for f in attrs.fields(type(model)) if f.name != "additional_properties"]
    extra = getattr(model, "additional_properties", {})
    problems = [f"{where}.{key} ({type(model).__name__})" for key in extra] if declared else []
    for name in declared:
        problems += _undocumented(getattr(model, name), f"{where}.{name}")
    return problems


def _answer(response: Any, status: HTTPStatus) -> Any:
    """The parsed answer of a generated call, checked: the expected status, a model of a
    component that declares its fields, every field the server sent declared, and the
    model turning back into exactly the JSON that was sent."""
    assert response.status_code == status, (response.status_code, response.content[:500])
    parsed = response.parsed
    name = type(parsed).__name__
    assert parsed is not None, f"the generated client could not parse {response.content!r}"
    assert name != "ErrorOutput", response.content
    fields = [f.name for f in attrs.fields(type(parsed)) if f.name != "additional_properties"]
    assert fields, f"the schema declares no field of this answer ({name}): {response.content!r}"
    assert _undocumented(parsed, name) == [], "answered fields the schema does not declare"
    assert parsed.to_dict() == json.loads(response.content), "the model lost or changed data"
    return parsed


def test_generated_client_runs_the_quickstart(generated: Generated, live_api: LiveApi) -> None:
    client = generated.client(live_api)
    rules = [{"respond": {"text": "You said: {last_user_message}"}}]

    bundle_import = generated.operation("POST", "/api/v1/bundles/")
    bundle = chat_bundle(rules, prompt=[{"type": "text", "content": "You help."}])
    imported = bundle_import.sync_detailed(client=client, body=_body(bundle_import, bundle))
    _answer(imported, HTTPStatus.OK)

    thread_create = generated.operation("POST", "/api/v1/threads/")
    created = thread_create.sync_detailed(
        client=client, body=_body(thread_create, {"agent": "chat"})
    )
    thread = _answer(created, HTTPStatus.CREATED)
    assert thread.agent == "chat"

    turn_submit = generated.operation("POST", "/api/v1/threads/{thread_id}/turns")
    submitted = turn_submit.sync_detailed(
        thread_id=thread.id, client=client,
        body=_body(turn_submit, {"input": {"content": "hello there"}}),
    )  # fmt: skip
    turn = _answer(submitted, HTTPStatus.ACCEPTED)

    turn_wait = generated.operation("GET", "/api/v1/turns/{turn_id}/wait")
    waited = _answer(
        turn_wait.sync_detailed(turn_id=turn.id, client=client, timeout=WAIT_TIMEOUT_S),
        HTTPStatus.OK,
    )
    assert waited.done is True
    assert waited.turn.status == "completed"

    message_list = generated.operation("GET", "/api/v1/threads/{thread_id}/messages")
    page = _answer(message_list.sync_detailed(thread_id=thread.id, client=client), HTTPStatus.OK)
    assert [(m.role, m.content) for m in page.results] == [
        ("user", "hello there"),
        ("assistant", "You said: hello there"),
    ]
    assert page.next_ is None


def test_generation_warns_of_nothing(generated: Generated) -> None:
    assert generated.warnings == [], "\n\n".join(generated.warnings)
