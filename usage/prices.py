"""Prices in integer micro-units: what a call costs, or may cost at most, in millionths of
the currency (USD), and the version of the price table a cost was computed with.

Model prices are USD per million tokens (:class:`agents.providers.base.ModelPrices`), so one
token at price ``p`` costs exactly ``p`` micro-units: costs are exact up to the price's own
fractional micro-units, which round up (a cost is never under-counted).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from decimal import Decimal

from agents.providers.base import ModelPrices, ModelSpec, Usage

MICROS = 1_000_000


@dataclass(frozen=True)
class TokenPrices:
    """Micro-units per token for input, cached input and output; None: unknown."""

    input: Decimal | None
    cached: Decimal | None
    output: Decimal | None

    @property
    def known(self) -> bool:
        return self.input is not None and self.output is not None

    def cost(self, usage: Usage) -> int | None:
        """The cost of ``usage`` in micro-units (rounded up), None when unknown."""
        if self.input is None or self.output is None:
            return None
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        cached_price = self.input if self.cached is None else self.cached
        total = (
            (usage.prompt_tokens - cached) * self.input
            + cached * cached_price
            + usage.completion_tokens * self.output
        )
        return math.ceil(total)

    def worst(self, input_tokens: int, output_tokens: int) -> int | None:
        """The most ``input_tokens`` in and ``output_tokens`` out can cost (no cache
        discount), rounded up; None when unknown."""
        if self.input is None or self.output is None:
            return None
        return math.ceil(input_tokens * self.input + output_tokens * self.output)


def token_prices(prices: ModelPrices) -> TokenPrices:
    """USD per million tokens are micro-units per token."""
    return TokenPrices(
        input=prices.input_per_million,
        cached=prices.cached_per_million,
        output=prices.output_per_million,
    )


def chain_prices(spec: ModelSpec) -> TokenPrices:
    """The highest prices among a model and its fallbacks: what any attempt of its chain may
    cost per token (unknown when any model of the chain has no prices)."""
    chain = [token_prices(model.prices) for model in (spec, *spec.fallbacks)]
    if not all(prices.known for prices in chain):
        return TokenPrices(input=None, cached=None, output=None)
    return TokenPrices(
        input=max(prices.input for prices in chain if prices.input is not None),
        cached=None,
        output=max(prices.output for prices in chain if prices.output is not None),
    )


def price_version(prices: ModelPrices) -> str:
    """A short digest of the prices a cost was computed with (the ledger's price-table
    version): equal prices, equal version."""
    text = f"{prices.input_per_million}|{prices.cached_per_million}|{prices.output_per_million}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def micros_text(micros: int | None) -> str | None:
    """Micro-units as a decimal string of the currency ("0.001234"); None stays None."""
    if micros is None:
        return None
    return str((Decimal(micros) / MICROS).quantize(Decimal("0.000001")))
