"""The definition form as a browser posts it: read from the page (every input, checkbox,
select and text area of ``#definition-form``, with what it shows), then changed."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

from django.test import Client


class _FormReader(HTMLParser):
    """The values the definition form would post: ``{name: [value, ...]}``."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.values: dict[str, list[str]] = {}
        self._inside = False
        self._select: str | None = None
        self._select_first: str | None = None
        self._select_chosen = False
        self._textarea: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {key: value or "" for key, value in attrs}
        if tag == "form" and found.get("id") == "definition-form":
            self._inside = True
        if not self._inside or "disabled" in found:
            return
        name = found.get("name", "")
        if tag == "input" and name:
            kind = found.get("type", "text")
            if kind in ("checkbox", "radio"):
                if "checked" in found:
                    self.values.setdefault(name, []).append(found.get("value") or "on")
            elif kind not in ("submit", "button", "file"):
                self.values.setdefault(name, []).append(found.get("value", ""))
        elif tag == "select" and name:
            self._select, self._select_first, self._select_chosen = name, None, False
        elif tag == "option" and self._select is not None:
            value = found.get("value", "")
            if self._select_first is None:
                self._select_first = value
            if "selected" in found and not self._select_chosen:
                self.values.setdefault(self._select, []).append(value)
                self._select_chosen = True
        elif tag == "textarea" and name:
            self._textarea, self._text = name, []

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self._inside:
            self._inside = False
        elif tag == "select" and self._select is not None:
            if not self._select_chosen and self._select_first is not None:
                self.values.setdefault(self._select, []).append(self._select_first)
            self._select = None
        elif tag == "textarea" and self._textarea is not None:
            # A browser drops the one newline that follows <textarea>.
            self.values.setdefault(self._textarea, []).append(
                "".join(self._text).removeprefix("\n")
            )
            self._textarea = None


def form_values(html: str) -> dict[str, Any]:
    """What the page's definition form posts as it stands (a list where a name repeats)."""
    reader = _FormReader()
    reader.feed(html)
    return {name: values[0] if len(values) == 1 else values
            for name, values in reader.values.items()}  # fmt: skip


def posted_form(client: Client, url: str, **changes: Any) -> dict[str, Any]:
    """The form of the definition page at ``url`` as a browser would post it after
    ``changes`` (a value of None: the input left unchecked or empty)."""
    answer = client.get(url)
    assert answer.status_code == 200, answer.status_code
    values = form_values(answer.content.decode())
    for name, value in changes.items():
        if value is None:
            values.pop(name, None)
        else:
            values[name] = value
    return values
