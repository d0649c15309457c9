"""Definition documents for tests: a rich, valid bundle touching every feature."""

from __future__ import annotations

import copy
from typing import Any

from agents.bundles import bundle_import
from tenancy.models import Tenant

SCRIPTED_RULES: dict[str, Any] = {
    "rules": [
        {"when": {"last_tool": "tally_words"}, "respond": {"text": "{last_tool_result} words."}},
        {"when": {"last_role": "user"}, "respond": {"text": "You said: {last_user_message}"}},
    ]
}

RICH_BUNDLE: dict[str, Any] = {
    "version": 1,
    "models": [
        {"name": "fast", "provider": "scripted", "model_id": "scripted", "config": SCRIPTED_RULES},
        {
            "name": "smart",
            "provider": "openai",
            "model_id": "gpt-4o-mini",
            "base_url": "http://127.0.0.1:9/v1",
            "api_key_env": "OPENAI_API_KEY",
            "fallbacks": ["fast"],
            "input_price": "0.15",
            "output_price": "0.6",
            "cached_price": "0.075",
            "capabilities": {"max_context_tokens": 128000, "vision": True},
        },
    ],
    "prompts": [
        {
            "name": "assistant",
            "tool_description": "A helpful assistant",
            "prompt": [
                {"type": "text", "content": "You help. "},
                {"type": "include", "prompt": "house_rules"},
                {"type": "env", "property": "COMPANY"},
                {"type": "variable", "value": "customer"},
            ],
            "model": "smart",
            "include_chat": True,
            "include_past_tools": True,
            "tool_choice": "auto",
            "variables": [{"name": "COMPANY", "type": "text", "required": True}],
            "tools": [
                "tally_words",
                {
                    "name": "summarize",
                    "include_errors": False,
                    "init_user_message_property": "text",
                },
                {"name": "debate", "blocking": False, "resumable": {"receives_messages": "side_a"}},
                {"name": "tally_words_strict", "env": {"MODE": "strict"}, "optional": "STRICT"},
            ],
            "env": {"COMPANY": "Acme"},
            "reasoning": {"effort": "low"},
        },
        {
            "name": "house_rules",
            "tool_description": "Shared rules",
            "prompt": "Be brief.",
            "model": "fast",
        },
        {
            "name": "summarize",
            "tool_description": "Summarize a text",
            "prompt": "Summarize the user's text.",
            "model": "fast",
            "required_schema": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
        },
        {
            "name": "pro",
            "tool_description": "Argues for",
            "prompt": "Argue for.",
            "model": "fast",
            "include_chat": True,
            "tools": ["concede"],
        },
        {
            "name": "con",
            "tool_description": "Argues against",
            "prompt": "Argue against.",
            "model": "fast",
            "include_chat": True,
        },
    ],
    "agents": [
        {
            "name": "helper",
            "type": "ai_human",
            "side_a": {"prompt": "assistant", "label": "Assistant", "max_steps": 10},
            "description": "The assistant",
        },
        {
            "name": "debate",
            "type": "dual_ai",
            "side_a": {
                "prompt": "pro",
                "stop_on_response": False,
                "session_stop": {"name": "concede", "message_property": "reason"},
            },
            "side_b": {"prompt": "con"},
            "max_session_turns": 3,
            "expose_as_tool": True,
            "tool_description": "Debate a topic",
        },
    ],
    "code_tools": [
        {
            "name": "tally_words",
            "description": "Count the words of a text",
            "args_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
            "source": "export default ({ text }) => String(text.split(/\\s+/).length)",
        },
        {
            "name": "tally_words_strict",
            "description": "Count words, strictly",
            "language": "javascript",
            "source": "export default () => '0'",
        },
        {
            "name": "concede",
            "description": "Concede the debate",
            "args_schema": {
                "type": "object",
                "properties": {"reason": {"type": "string"}},
                "required": ["reason"],
            },
            "source": "export default ({ reason }) => reason",
        },
    ],
}


def rich_bundle() -> dict[str, Any]:
    return copy.deepcopy(RICH_BUNDLE)


def seed_rich(tenant: Tenant) -> None:
    bundle_import(tenant=tenant, document=rich_bundle())
