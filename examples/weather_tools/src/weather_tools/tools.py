"""The extension's registry entries. The platform imports this module at start-up (the entry
point in pyproject.toml names it), so the decorators register into its registry."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from agents.registry import tool

SKIES = ("sunny", "cloudy", "rain", "snow")


class ForecastArgs(BaseModel):
    city: str = Field(min_length=1, description="The city, e.g. Oslo.")
    days: int = Field(ge=1, le=7, description="How many days ahead, 1 to 7.")


@tool(description="The weather forecast for a city, day by day.", args=ForecastArgs)
def forecast(state: Any, args: ForecastArgs) -> str:
    """A made-up but repeatable forecast: the same city and days give the same answer."""
    skies = [SKIES[(len(args.city) + day) % len(SKIES)] for day in range(args.days)]
    return f"{args.city}, next {args.days} days: {', '.join(skies)}"
