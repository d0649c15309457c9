"""The bench workload as a LangGraph graph, for Aegra: a model that calls a tool, the tool,
the model's final answer (2 model calls, 1 tool, 4 messages per run).

Aegra loads it (``aegra.json``) inside the peer's virtualenv (Python 3.12, LangGraph,
langchain-core); nothing in ours imports it, and mypy cannot resolve its imports. The
model is deterministic and answers from the conversation alone, like our ``scripted``
provider with the same two rules (:data:`bench.peers.ours.BUNDLE`): a tool result is
answered in words, anything else with a ``count_words`` call on the last user message.
``slow`` waits 1 s per call, as the scripted ``delay_ms: 1000`` does.
"""

# mypy: disable-error-code="import-not-found"

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition


@tool
def count_words(text: str) -> str:
    """Count the words in a text."""
    return str(len(text.split()))


class ScriptedChatModel(BaseChatModel):
    """Answers a tool result with text, anything else with a ``count_words`` call."""

    delay_s: float = 0.0

    @property
    def _llm_type(self) -> str:
        return "bench-scripted"

    def _answer(self, messages: list[BaseMessage]) -> ChatResult:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            reply = AIMessage(content=f"That is {last.content} words.")
        else:
            call = {"name": "count_words", "args": {"text": str(last.content)},
                    "id": f"call_{uuid.uuid4().hex[:12]}", "type": "tool_call"}  # fmt: skip
            reply = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        """Required by BaseChatModel; the graph's node calls the async one."""
        time.sleep(self.delay_s)
        return self._answer(messages)

    async def _agenerate(
        self, messages: list[BaseMessage], *args: Any, **kwargs: Any
    ) -> ChatResult:
        await asyncio.sleep(self.delay_s)
        return self._answer(messages)


def build(delay_s: float) -> Any:
    """START -> agent -> (a tool call) tools -> agent -> (an answer) END."""
    model = ScriptedChatModel(delay_s=delay_s)

    async def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([count_words]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile()


instant = build(0.0)
slow = build(1.0)
