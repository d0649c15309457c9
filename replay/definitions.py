"""The definitions in force for threads: what an export's ``definition`` records hold.

A thread names its agent (``agent_name``, changed by a handoff; ``origin_agent_name``, the
agent it was created with); definitions are not versioned per thread, so what is in force
is the tenant's current definition of each name the threads reach. The walk follows the
runtime's resolution (:mod:`agents.graph`): an agent's side prompts; a prompt's model (and
its fallbacks, and the compaction summarizer), its ``include`` parts and each ``tools[]``
name, resolved as registry tool, code tool, prompt, then agent. A name that resolves to
nothing is reported ``missing`` rather than left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from agents.documents import AgentDoc, IncludePart, ModelDoc, PromptDoc, tool_ref_name
from agents.models import Agent, CodeTool, Definition, Model, Prompt
from agents.registry import RegistryView, current_registry
from agents.services import document_json, row_document
from common.time import to_us
from tenancy.models import Tenant

# Kinds of ``definition`` records, in the order a walk may meet them.
AGENT, PROMPT, MODEL, CODE_TOOL, TOOL = "agent", "prompt", "model", "code_tool", "tool"
_MODELS: dict[str, type[Definition]] = {
    AGENT: Agent, PROMPT: Prompt, MODEL: Model, CODE_TOOL: CodeTool,
}  # fmt: skip


@dataclass(frozen=True)
class DefinitionRecord:
    """One definition in force: ``document`` as the definitions API shows it (never an API
    key), ``updated_at`` (µs) its last change; a registry tool's ``document`` is its name,
    description and parameters; ``missing``: named but defined nowhere (``document`` None)."""

    type: str
    name: str
    document: dict[str, Any] | None
    updated_at: int | None
    missing: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": "definition", "type": self.type, "name": self.name,
            "document": self.document, "updated_at": self.updated_at, "missing": self.missing,
        }  # fmt: skip


class _Walk:
    def __init__(self, tenant: Tenant, registry: RegistryView) -> None:
        self.tenant = tenant
        self.registry = registry
        self.seen: set[tuple[str, str]] = set()
        self.found: list[DefinitionRecord] = []
        self._names: dict[str, frozenset[str]] = {}

    def names(self, kind: str) -> frozenset[str]:
        if kind not in self._names:
            rows = _MODELS[kind].objects.for_tenant(self.tenant).values_list("name", flat=True)
            self._names[kind] = frozenset(rows)
        return self._names[kind]

    def visit(self, kind: str, name: str) -> Any:
        """The document of ``kind`` ``name`` the first time it is met (recorded), else None."""
        if (kind, name) in self.seen:
            return None
        self.seen.add((kind, name))
        row = _MODELS[kind].objects.for_tenant(self.tenant).filter(name=name).first()
        if row is None:
            self.found.append(DefinitionRecord(kind, name, None, None, missing=True))
            return None
        document = row_document(row)
        self.found.append(
            DefinitionRecord(kind, name, document_json(document), to_us(row.updated_at))
        )
        return document

    def agent(self, name: str) -> None:
        doc = self.visit(AGENT, name)
        if isinstance(doc, AgentDoc):
            for side in (doc.side_a, doc.side_b):
                if side is not None:
                    self.prompt(side.prompt)

    def prompt(self, name: str) -> None:
        doc = self.visit(PROMPT, name)
        if not isinstance(doc, PromptDoc):
            return
        self.model(doc.model)
        if doc.compaction.summarizer_model:
            self.model(doc.compaction.summarizer_model)
        for part in doc.prompt:
            if isinstance(part, IncludePart):
                self.prompt(part.prompt)
        for ref in doc.tools:
            self.tool(tool_ref_name(ref))

    def model(self, name: str) -> None:
        doc = self.visit(MODEL, name)
        if isinstance(doc, ModelDoc):
            for fallback in doc.fallbacks:
                self.model(fallback)

    def tool(self, name: str) -> None:
        entry = self.registry.tool(name)
        if entry is not None:
            if (TOOL, name) not in self.seen:
                self.seen.add((TOOL, name))
                document = {"name": entry.name, "description": entry.description,
                            "parameters": entry.args_schema}  # fmt: skip
                self.found.append(DefinitionRecord(TOOL, name, document, None))
        elif name in self.names(CODE_TOOL):
            self.visit(CODE_TOOL, name)
        elif name in self.names(PROMPT):
            self.prompt(name)
        elif name in self.names(AGENT):
            self.agent(name)
        elif (TOOL, name) not in self.seen:
            # A built-in tool (subagent_create, …) or a registry tool this process lacks.
            self.seen.add((TOOL, name))
            self.found.append(DefinitionRecord(TOOL, name, None, None, missing=True))


def definitions_in_force(
    *, tenant: Tenant, agent_names: Iterable[str], registry: RegistryView | None = None
) -> Iterator[DefinitionRecord]:
    """Every definition reachable from ``agent_names`` (each once, in walk order)."""
    walk = _Walk(tenant, registry or current_registry().visible_to(tenant.slug))
    for name in agent_names:
        walk.agent(name)
    yield from walk.found
