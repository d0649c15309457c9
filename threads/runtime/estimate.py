"""A dry run of a turn's first model call: what it may cost at most and how each budget would
take it, without calling the model or reserving anything.

The context is the thread's stored conversation (as the acting prompt would see it), the
system prompt as written (before its variables are filled) and the new message; the bound is
the one the reservation uses (:func:`threads.runtime.engine.spend.input_bound`), so the
estimate is what the turn's first call would reserve, give or take hooks and variables.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings

from agents.providers.base import LLMMessage, ProviderRequest
from common.errors import DomainError
from threads.models import Thread
from threads.runtime.context import render_system_prompt
from threads.runtime.definitions import FlowDefinitions
from threads.runtime.engine.spend import input_bound
from threads.services.message_shapes import history_json
from threads.services.spending import spend_scope
from usage import budgets
from usage.prices import chain_prices, micros_text


def turn_estimate(*, thread: Thread, content: str, user: str | None) -> dict[str, Any]:
    """The worst case of the first model call a turn with ``content`` would make on
    ``thread``, and how each budget of its scope would take it (``fits``, the output it
    would allow). ``would`` says what the turn would do: ``run``, or the policy of the
    first budget with no room (``pause``, ``stop``, ``reject``)."""
    defs = FlowDefinitions(tenant=thread.tenant, model_env=lambda _name: None)
    agent = defs.agent(thread.agent_name)
    if agent is None:
        raise DomainError(f"the thread's agent {thread.agent_name!r} no longer exists")
    prompt = defs.prompt(agent.side_a.prompt)
    if prompt is None:
        raise DomainError(f"the agent's prompt {agent.side_a.prompt!r} no longer exists")
    spec = defs.model(prompt.model)
    system = render_system_prompt(
        prompt, load_prompt=defs.prompt, env=lambda _name: None,
        variables=thread.arguments if isinstance(thread.arguments, dict) else {},
    )  # fmt: skip
    messages = [LLMMessage.system(system)]
    if prompt.include_chat:
        for stored in history_json(thread=thread):
            text = stored.get("content") or ""
            calls = stored.get("tool_calls")
            messages.append(LLMMessage.user(f"{text}{json.dumps(calls) if calls else ''}"))
    if content:
        messages.append(LLMMessage.user(content))
    tools = defs.tools_for(prompt, env_flag=lambda _name: None)
    request = ProviderRequest(messages=messages, tools=[tool.spec for tool in tools.values()])
    input_tokens = input_bound(request)
    output_tokens = spec.capabilities.max_output_tokens or settings.USAGE_DEFAULT_MAX_OUTPUT_TOKENS
    prices = chain_prices(spec)
    scope = spend_scope(thread=thread, turn_id=None, user=user or thread.user_id)
    taken = budgets.dry_run(
        scope, prices=prices, input_tokens=input_tokens, output_tokens=output_tokens
    )
    short = [
        row for row in taken if row["allowed_output_tokens"] < settings.USAGE_MIN_OUTPUT_TOKENS
    ]
    return {
        "agent": agent.name,
        "prompt": prompt.name,
        "model": spec.name,
        "input_tokens_max": input_tokens,
        "output_tokens_max": output_tokens,
        "worst_cost": micros_text(prices.worst(input_tokens, output_tokens)),
        "currency": "USD",
        "cost_known": prices.known,
        "budgets": taken,
        "would": short[0]["policy"] if short else "run",
    }
