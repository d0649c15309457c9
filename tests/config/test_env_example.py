"""``.env.example`` says what the code does: every variable ``config.env`` reads is listed, and
a default its comment states (``default N`` or ``; N``, a number or true/false) is the value
``config.env`` gives with the variable unset."""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from config import env

EXAMPLE = Path(env.REPO_DIR) / ".env.example"
VARIABLE = re.compile(r"^#?\s*([A-Z][A-Z0-9_]+)=")
# "default 30", "default: 8", "default false", "…; 4000." — not "default 127.0.0.1". A comment
# over several variables states the first one's default first.
STATED = re.compile(r"(?:\bdefault:?|;) (\d+|true|false)(?![\d.]\d)")


def example_defaults() -> dict[str, str]:
    """Each variable of ``.env.example`` and the default its comment states ("" if none)."""
    found: dict[str, str] = {}
    comment: list[str] = []
    for line in EXAMPLE.read_text().splitlines():
        named = VARIABLE.match(line)
        if named is None:
            comment = [*comment, line] if line.startswith("#") else []
            continue
        stated = STATED.search(" ".join(comment))
        found.setdefault(named.group(1), stated.group(1) if stated else "")
        comment = []
    return found


class Reads(dict[str, str]):
    """An environment that records the names asked of it."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.asked.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.asked.add(str(key))
        return super().__contains__(key)


def readers() -> Iterator[tuple[str, Callable[[], Any]]]:
    """``config.env``'s public functions that take no argument."""
    for name, function in inspect.getmembers(env, inspect.isfunction):
        if name.startswith("_") or function.__module__ != env.__name__:
            continue
        parameters = inspect.signature(function).parameters.values()
        if all(p.default is not p.empty for p in parameters):
            yield name, function


def defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """Variable -> the value of the one function reading only it, with nothing set."""
    found: dict[str, Any] = {}
    for _name, function in readers():
        recorder = Reads()
        recorder["PLATFORM_VAR_DIR"] = str(tmp_path)
        monkeypatch.setattr(os, "environ", recorder)
        try:
            value = function()
        except Exception:  # noqa: S112 - a reader that needs more than nothing set
            continue
        finally:
            monkeypatch.undo()
        asked = recorder.asked - {"PLATFORM_VAR_DIR", "PLATFORM_MODE"}
        if len(asked) == 1 and isinstance(value, bool | int | float | str):
            found[asked.pop()] = value
    return found


def _same(stated: str, given: Any) -> bool:
    if isinstance(given, bool) or not isinstance(given, int | float):
        return stated == str(given).lower()
    return stated.isdigit() and float(stated) == float(given)


def test_every_variable_the_code_reads_is_in_the_example(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    listed = example_defaults()
    read: set[str] = set()
    for _name, function in readers():
        recorder = Reads()
        recorder["PLATFORM_VAR_DIR"] = str(tmp_path)
        monkeypatch.setattr(os, "environ", recorder)
        try:
            function()
        except Exception:  # noqa: S110 - only the names it asked matter here
            pass
        finally:
            monkeypatch.undo()
        read |= recorder.asked
    missing = sorted(name for name in read if name not in listed and not name.startswith("OTEL_"))

    assert missing == []


def test_each_stated_default_is_what_the_code_gives(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    stated = {name: value for name, value in example_defaults().items() if value}
    given = defaults(monkeypatch, tmp_path)
    compared = {name: value for name, value in stated.items() if name in given}
    wrong = {
        name: (value, given[name])
        for name, value in compared.items()
        if not _same(value, given[name])
    }

    assert len(compared) >= 15, sorted(compared)  # the check reaches most stated defaults
    assert wrong == {}, "stated default, the code's: " + str(wrong)
