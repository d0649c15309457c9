"""Tenant-scoped definitions: models, prompts, agents and code tools.

Each row stores one document of :mod:`agents.documents`: top-level scalars as
columns, nested spec structures as JSON, column names equal to document field
names. References between definitions are by name (as in the spec and in
bundles) and are checked as a whole graph by :mod:`agents.validation`.
"""

from __future__ import annotations

from typing import ClassVar

from django.db import models

from agents.documents import AgentDoc, CodeToolDoc, ModelDoc, PromptDoc, Strict
from common.ids import new_id
from common.time import now
from tenancy.models import TenantOwned


class Definition(TenantOwned):
    """Common to every definition: an id, a snake_case name unique per tenant, times."""

    KIND: ClassVar[str]
    DOCUMENT: ClassVar[type[Strict]]

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    name = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=now, editable=False)
    updated_at = models.DateTimeField(default=now)

    class Meta:
        abstract = True
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.KIND} {self.name}"


def _unique_name(model: str) -> list[models.BaseConstraint]:
    return [models.UniqueConstraint(fields=["tenant", "name"], name=f"{model}_unique_name")]


class ProviderKind(models.TextChoices):
    OPENAI = "openai", "OpenAI-compatible (Chat Completions)"
    ANTHROPIC = "anthropic", "Anthropic (Messages)"
    SCRIPTED = "scripted", "Scripted (deterministic, for tests and demos)"


class Model(Definition):
    """``defineModel``. The API key is stored encrypted, or named as an env variable."""

    KIND = "model"
    DOCUMENT = ModelDoc

    provider = models.CharField(max_length=16, choices=ProviderKind.choices)
    model_id = models.CharField(max_length=200)
    base_url = models.CharField(max_length=500, blank=True)
    api_key_env = models.CharField(max_length=128, blank=True)
    # A credential's name: the tenant's own (ProviderCredential) or platform:<provider>.
    credential = models.CharField(max_length=80, blank=True)
    # Sealed with the tenant's data key; context "agents.Model:<id>:api_key".
    api_key_encrypted = models.BinaryField(null=True, blank=True, editable=False)
    config = models.JSONField(default=dict, blank=True)
    fallbacks = models.JSONField(default=list, blank=True)
    input_price = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    output_price = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    cached_price = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    capabilities = models.JSONField(default=dict, blank=True)

    class Meta(Definition.Meta):
        constraints = _unique_name("model")

    @property
    def has_api_key(self) -> bool:
        return self.api_key_encrypted is not None


class CredentialProvider(models.TextChoices):
    OPENAI = "openai", "OpenAI (official endpoint)"
    ANTHROPIC = "anthropic", "Anthropic (official endpoint)"
    OPENAI_COMPATIBLE = "openai_compatible", "OpenAI-compatible endpoint (its base URL)"


class ProviderCredential(TenantOwned):
    """A tenant's own provider key, referenced by name from model definitions
    (:mod:`agents.credentials`). The key is write-only: sealed with the tenant's data key,
    context ``agents.ProviderCredential:<id>:api_key``, never shown again."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    name = models.CharField(max_length=64)
    provider = models.CharField(max_length=24, choices=CredentialProvider.choices)
    # Only for openai_compatible: the one endpoint the key goes to.
    base_url = models.CharField(max_length=500, blank=True)
    description = models.CharField(max_length=500, blank=True)
    api_key_encrypted = models.BinaryField(editable=False)
    created_at = models.DateTimeField(default=now, editable=False)
    updated_at = models.DateTimeField(default=now)
    rotated_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="credential_unique_name")
        ]

    def __str__(self) -> str:
        return f"credential {self.name}"


class ToolChoice(models.TextChoices):
    AUTO = "auto"
    NONE = "none"
    REQUIRED = "required"


class Prompt(Definition):
    """``definePrompt``."""

    KIND = "prompt"
    DOCUMENT = PromptDoc

    tool_description = models.TextField()
    prompt = models.JSONField(default=list)
    model = models.CharField(max_length=64)
    include_chat = models.BooleanField(default=False)
    include_past_tools = models.BooleanField(default=False)
    parallel_tool_calls = models.BooleanField(default=False)
    tool_choice = models.CharField(max_length=16, choices=ToolChoice.choices, default="auto")
    required_schema = models.JSONField(null=True, blank=True)
    variables = models.JSONField(default=list, blank=True)
    tools = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    reasoning = models.JSONField(null=True, blank=True)
    hooks = models.JSONField(default=list, blank=True)
    code_mode = models.BooleanField(default=False)
    compaction = models.JSONField(default=dict, blank=True)

    class Meta(Definition.Meta):
        constraints = _unique_name("prompt")


class AgentType(models.TextChoices):
    AI_HUMAN = "ai_human", "AI and human"
    DUAL_AI = "dual_ai", "Two AI sides"


class Agent(Definition):
    """``defineAgent`` (spec 0.1.0)."""

    KIND = "agent"
    DOCUMENT = AgentDoc

    type = models.CharField(max_length=16, choices=AgentType.choices, default="ai_human")
    side_a = models.JSONField()
    side_b = models.JSONField(null=True, blank=True)
    max_session_turns = models.PositiveIntegerField(null=True, blank=True)
    expose_as_tool = models.BooleanField(default=False)
    tool_description = models.TextField(blank=True)
    description = models.TextField(blank=True)
    env = models.JSONField(default=dict, blank=True)
    hooks = models.JSONField(default=list, blank=True)

    class Meta(Definition.Meta):
        constraints = _unique_name("agent")


class CodeLanguage(models.TextChoices):
    TYPESCRIPT = "typescript"
    JAVASCRIPT = "javascript"


class CodeTool(Definition):
    """A tenant-written JS/TS tool; it runs in the sandbox."""

    KIND = "code_tool"
    DOCUMENT = CodeToolDoc

    description = models.TextField()
    args_schema = models.JSONField(null=True, blank=True)
    language = models.CharField(max_length=16, choices=CodeLanguage.choices, default="typescript")
    source = models.TextField()

    class Meta(Definition.Meta):
        constraints = _unique_name("code_tool")


DEFINITION_MODELS: dict[str, type[Definition]] = {
    "models": Model,
    "prompts": Prompt,
    "agents": Agent,
    "code_tools": CodeTool,
}


class PermissionDecision(models.TextChoices):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


class PermissionRule(TenantOwned):
    """A tenant's permission rule for tool calls (:mod:`agents.permissions`): ``decision``
    for calls of ``tool`` by agent ``agent`` (blank: every tool, every agent), limited by
    the condition ``when`` on the call's arguments (null: every call)."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    agent = models.CharField(max_length=64, blank=True)
    tool = models.CharField(max_length=64, blank=True)
    decision = models.CharField(max_length=8, choices=PermissionDecision.choices)
    when = models.JSONField(null=True, blank=True)
    # For ``ask``: how long a person has to decide (None: ACTION_TTL_S), and what an
    # unanswered request resolves to (deny or allow).
    expires_in = models.PositiveIntegerField(null=True, blank=True)
    on_expiry = models.CharField(max_length=8, blank=True)
    description = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=now, editable=False)
    updated_at = models.DateTimeField(default=now)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.decision} {self.tool or '*'} for {self.agent or '*'}"
