"""The browser tests' gate: skipped without Chromium, failed instead when CI requires them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.console import conftest


def test_browser_tests_skip_with_a_reason_when_chromium_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(conftest, "CHROMIUM", Path("/nonexistent/chromium"))
    monkeypatch.delenv("BROWSER_TESTS", raising=False)

    with pytest.raises(pytest.skip.Exception, match="/nonexistent/chromium is missing"):
        conftest._browser_available()


def test_browser_tests_fail_when_required_and_chromium_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(conftest, "CHROMIUM", Path("/nonexistent/chromium"))
    monkeypatch.setenv("BROWSER_TESTS", "required")

    with pytest.raises(pytest.fail.Exception, match="BROWSER_TESTS=required"):
        conftest._browser_available()
