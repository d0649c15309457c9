"""One page of a collection.

Every collection of the API answers ``{"results": [...], "next": URL | null,
"previous": URL | null}``: ``next`` and ``previous`` are the neighbouring pages' URLs,
followed as they are (their ``cursor`` is opaque). ``list_*``-style calls
(``client.threads.list()``) answer a :class:`Page`; ``client.next_page(page)`` and
``client.previous_page(page)`` fetch its neighbours, and ``iter`` calls
(``client.threads.iter()``) walk every page for you.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from standard_agents_client.errors import UnexpectedAnswer

T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    """``results`` of one page, and the URLs of the pages around it (None at either end).
    Iterating a page iterates its results; ``raw`` is the whole answer (a directory
    listing's ``path`` is there)."""

    results: Sequence[T]
    next: str | None = None
    previous: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __iter__(self) -> Iterator[T]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    @property
    def has_next(self) -> bool:
        return self.next is not None

    @property
    def has_previous(self) -> bool:
        return self.previous is not None


def page_from_json(body: Any) -> Page[Any]:
    """A :class:`Page` from a list's JSON answer."""
    if not isinstance(body, dict) or not isinstance(body.get("results"), list):
        raise UnexpectedAnswer(f"expected a page {{results, next, previous}}, got {body!r:.200}")
    return Page(
        results=body["results"], next=body.get("next"), previous=body.get("previous"), raw=body
    )
