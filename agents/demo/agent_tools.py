"""Function tools and an effect of the demo agents (discovered at start-up like any
agent_tools module)."""

from __future__ import annotations

import datetime as dt
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, Field

from agents.registry import ToolResult, effect, tool


class CurrentTimeArgs(BaseModel):
    timezone: str = Field("UTC", description="An IANA time zone such as Europe/Paris")


@tool(description="The current date and time in a time zone.", args=CurrentTimeArgs)
def current_time(state: Any, args: CurrentTimeArgs) -> ToolResult:
    try:
        zone = ZoneInfo(args.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        return ToolResult.failure(f"unknown time zone {args.timezone!r}; try e.g. Europe/Paris")
    return ToolResult.success(dt.datetime.now(zone).strftime("%A %d %B %Y, %H:%M %Z"))


class CountWordsArgs(BaseModel):
    text: str = Field(description="The text whose words to count")


@tool(description="Count the words in a text.", args=CountWordsArgs)
def count_words(state: Any, args: CountWordsArgs) -> str:
    return str(len(args.text.split()))


class RemindArgs(BaseModel):
    text: str = Field(description="What to remind the user of")


@effect(description="Post a reminder to the thread (schedule it with a delay).", args=RemindArgs)
def remind(state: Any, args: RemindArgs) -> None:
    state.inject_message(role="assistant", content=f"Reminder: {args.text}")
