"""The thread's Files, KV and Env pages in a real browser (Debian's Chromium through
Playwright) against a live server: uploading a PNG and seeing its thumbnail load, setting a
KV value and a secret through the forms, and the accessibility basics of each page."""

from __future__ import annotations

import io
from typing import Any

import pytest
from PIL import Image

from tests.console.conftest import CHAT, Team, log_in
from tests.console.test_browser import _assert_accessible
from tests.live import Live
from threads.runtime.lifecycle import thread_open
from threads.services.env import thread_env_get
from threads.services.files import file_mkdir, file_write
from threads.services.values import value_get, value_set

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "browser-secret-never-shown"
# The thumbnail image once it has loaded (null until then), as the browser decoded it.
THUMBNAIL_LOADED = """(alt) => {
  const image = document.querySelector(`img[alt="${alt}"]`);
  return image && image.complete && image.naturalWidth > 0
    ? {width: image.naturalWidth, height: image.naturalHeight} : null;
}"""


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (300, 150), (0, 90, 200)).save(out, format="PNG")
    return out.getvalue()


def _favicon(url: str) -> bool:
    return url.endswith("/favicon.ico")


def _watch_errors(page: Any) -> list[str]:
    """What goes wrong on the page from now on: script errors, console errors and failed
    requests (a thumbnail that does not load among them), but for the browser's own
    favicon guess."""
    problems: list[str] = []

    def on_console(message: Any) -> None:
        if message.type == "error" and not _favicon(message.location.get("url", "")):
            problems.append(f"console: {message.text}")

    def on_response(answer: Any) -> None:
        if answer.status >= 400 and not _favicon(answer.url):
            problems.append(f"{answer.status} {answer.url}")

    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("console", on_console)
    page.on("response", on_response)
    return problems


def test_upload_a_png_and_see_its_thumbnail_load(page: Any, served: Live, team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    file_mkdir(thread=thread, path="/pictures")
    log_in(page, served, team.member)
    problems = _watch_errors(page)

    page.goto(f"/console/threads/{thread.pk}/")
    page.get_by_role("link", name="Files").click()
    page.get_by_role("link", name="pictures/").click()
    page.get_by_label("File", exact=True).set_input_files(
        {"name": "blue.png", "mimeType": "image/png", "buffer": _png()}
    )
    page.get_by_role("button", name="Upload").click()
    page.get_by_text("Uploaded /pictures/blue.png.").wait_for()
    loaded = page.wait_for_function(THUMBNAIL_LOADED, arg="Thumbnail of blue.png").json_value()

    assert loaded == {"width": 128, "height": 64}
    row = page.locator('tr[data-path="/pictures/blue.png"]')
    assert "image/png" in row.inner_text()
    assert "300\u00d7150" in row.inner_text()
    link = row.get_by_role("link", name="blue.png")
    assert link.get_attribute("download") is not None
    download = page.request.get(link.get_attribute("href"))
    assert download.status == 200
    assert download.headers["content-disposition"] == 'attachment; filename="blue.png"'
    assert download.body() == _png()
    assert page.locator("nav.crumbs a[aria-current=page]").inner_text() == "pictures"
    assert problems == []


def test_set_a_kv_value_and_a_secret_through_the_forms(page: Any, served: Live, team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    log_in(page, served, team.member)

    page.goto(f"/console/threads/{thread.pk}/kv/")
    page.get_by_label("Key", exact=True).fill("plan")
    page.get_by_label("Value (JSON)").fill('{"steps": [1, 2]')
    page.get_by_role("button", name="Set", exact=True).click()
    refusal = page.locator("#value-error").inner_text()
    page.get_by_label("Value (JSON)").fill('{"steps": [1, 2]}')
    page.get_by_role("button", name="Set", exact=True).click()
    page.locator('tr[data-key="plan"] pre.json').wait_for()
    page.get_by_role("link", name="Env").click()
    page.get_by_label("Name", exact=True).fill("API_TOKEN")
    page.get_by_label("Type").select_option("secret")
    page.get_by_label("Value", exact=True).fill(SECRET)
    page.get_by_role("button", name="Set", exact=True).click()
    page.locator('tr[data-name="API_TOKEN"]').wait_for()

    assert refusal.startswith("value is not JSON")
    assert value_get(thread=thread, key="plan") == {"steps": [1, 2]}
    stored = thread_env_get(thread=thread, name="API_TOKEN")
    assert stored is not None
    assert (stored.value, stored.type) == (SECRET, "secret")
    assert SECRET not in page.content()
    assert page.get_by_label("Value", exact=True).input_value() == ""


def test_storage_pages_have_titles_landmarks_and_labelled_controls(
    page: Any, served: Live, team: Team
) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    file_write(thread=thread, path="/a.txt", data=b"a", mime_type="text/plain")
    value_set(thread=thread, key="k", value=[1])
    log_in(page, served, team.member)

    for panel, title in (("files", "Files /"), ("kv", "KV"), ("env", "Env")):
        page.goto(f"/console/threads/{thread.pk}/{panel}/")
        _assert_accessible(page)
        assert page.title().startswith(title)
        assert page.locator("main section h2").count() >= 1
