"""An agent's A2A card: who it is, where and how to call it.

The card is served to callers holding one of the tenant's API keys only: its URL names the
tenant and the agent, and the card shows what the agent does (its description, its
prompt's tools), which is the tenant's business, not the public's. A2A allows a card behind
authentication, and the SDK fetches one with headers
(``A2ACardResolver.get_agent_card(http_kwargs={"headers": ...})``).
"""

from __future__ import annotations

from typing import Any

from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_1_0, TransportProtocol

from agents.documents import AgentDoc, tool_ref_name
from agents.selectors import prompt_load
from common.errors import NotFound
from tenancy.models import Tenant

SCHEME = "apiKey"
CARD_VERSION = "1.0.0"
TEXT = "text/plain"
JSON = "application/json"


def _side_tools(tenant: Tenant, agent: AgentDoc) -> tuple[str, list[str]]:
    """The side A prompt's description and tool names (none when it cannot be read)."""
    try:
        prompt = prompt_load(tenant=tenant, name=agent.side_a.prompt)
    except NotFound:
        return "", []
    return prompt.tool_description, [tool_ref_name(ref) for ref in prompt.tools]


def agent_card(*, tenant: Tenant, agent: AgentDoc, endpoint: str) -> AgentCard:
    """``agent``'s card, its JSON-RPC interface at the absolute URL ``endpoint``.

    One skill, the agent itself (a remote agent delegates a task to it, not to its tools):
    its description from the agent's ``description``, else its ``tool_description``, else
    its side A prompt's; its tags the prompt's tools."""
    prompt_description, tools = _side_tools(tenant, agent)
    description = (
        agent.description or agent.tool_description or prompt_description
        or f"The agent {agent.name}"
    )  # fmt: skip
    return AgentCard(
        name=agent.name,
        description=description,
        version=CARD_VERSION,
        supported_interfaces=[
            AgentInterface(
                url=endpoint,
                protocol_binding=TransportProtocol.JSONRPC.value,
                protocol_version=PROTOCOL_VERSION_1_0,
            )
        ],
        capabilities=AgentCapabilities(
            streaming=True, push_notifications=True, extended_agent_card=False
        ),
        security_schemes={
            SCHEME: SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="Bearer",
                    bearer_format="API key",
                    description="one of the tenant's API keys: Authorization: Bearer <key>",
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={SCHEME: StringList()})],
        default_input_modes=[TEXT, JSON],
        default_output_modes=[TEXT],
        skills=[
            AgentSkill(
                id=agent.name,
                name=agent.name,
                description=description,
                tags=[agent.type, *tools],
                input_modes=[TEXT, JSON],
                output_modes=[TEXT],
            )
        ],
    )


def agent_card_json(card: AgentCard) -> dict[str, Any]:
    """The card as served: the 1.0 fields, and the 0.3 ones older clients read (the SDK's
    own serialisation)."""
    return agent_card_to_dict(card)
