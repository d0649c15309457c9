"""Function tools, an effect and a thread endpoint of the demo agents (discovered at
start-up like any agent_tools module)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, Field

from agents.registry import ToolResult, effect, thread_endpoint, tool


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


MAX_REMINDER_MINUTES = 7 * 24 * 60  # a week


class SetReminderArgs(BaseModel):
    text: str = Field(description="What to remind the user of")
    minutes: int = Field(
        ge=1, le=MAX_REMINDER_MINUTES, description="In how many minutes (1 to 10080, a week)"
    )


@tool(
    description="Remind the user of something in a number of minutes: the reminder is posted "
    "to this conversation then.",
    args=SetReminderArgs,
)
def set_reminder(state: Any, args: SetReminderArgs) -> str:
    state.schedule_effect("remind", {"text": args.text}, delay_ms=args.minutes * 60_000)
    unit = "minute" if args.minutes == 1 else "minutes"
    return f"reminder set for {args.minutes} {unit} from now: {args.text}"


class AnnounceArgs(BaseModel):
    message: str = Field(description="The announcement")


@tool(
    description="Announce something to every app watching this conversation (a custom event "
    "named announcement; it adds no message).",
    args=AnnounceArgs,
)
def announce(state: Any, args: AnnounceArgs) -> str:
    state.emit("announcement", {"message": args.message})
    return f"announced: {args.message}"


@thread_endpoint("summary", methods=["GET"])
def summary(request: Any, state: Any, params: Mapping[str, str]) -> dict[str, Any]:
    """``GET /api/v1/threads/{id}/endpoints/summary``: how many visible messages the thread
    has, when the newest was written (µs since the epoch; None without one), and how many
    reminders are pending."""
    newest = state.get_messages(limit=1, order="desc")
    return {
        "messages": newest.total,
        "last_message_at": newest.messages[0]["created_at"] if newest.messages else None,
        "pending_reminders": len(state.get_scheduled_effects("remind")),
    }
