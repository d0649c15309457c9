"""The thread's Files, KV and Env pages without a browser: what they list, writes through
the services the API uses (the same validation, the same events), refusals shown at their
field, another tenant's thread a 404 and a read-only member's writes a 403 with nothing
written, and an env value never on any page."""

from __future__ import annotations

import io
import uuid
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from PIL import Image

from tests.console.conftest import CHAT, Team, agents_for, client_of, team_make
from tests.factories import make_tenant
from threads.models import Event, TenantEnv, Thread, ThreadEnv, ThreadFile, ThreadValue
from threads.runtime.lifecycle import thread_open
from threads.services.env import EnvValue, tenant_env_set, thread_env_get, thread_env_set
from threads.services.files import file_mkdir, file_read, file_stat, file_write
from threads.services.files import validation as file_validation
from threads.services.values import value_get, value_set

pytestmark = pytest.mark.django_db

SECRET = "s3cr3t-value-never-shown"
STORAGE_PAGES = ("console:thread-files", "console:thread-kv", "console:thread-env")
# Each write route with a body that would write something were it allowed.
WRITES: dict[str, dict[str, Any]] = {
    "console:thread-file-mkdir": {"path": "/", "name": "forged"},
    "console:thread-file-delete": {"path": "/keep.txt"},
    "console:thread-kv-set": {"key": "forged", "value": "1"},
    "console:thread-kv-delete": {"key": "keep"},
    "console:thread-env-set": {"name": "FORGED", "type": "text", "value": "x"},
    "console:thread-env-delete": {"name": "KEEP"},
}


@pytest.fixture
def team(db: None) -> Team:
    return team_make()


@pytest.fixture
def thread(team: Team) -> Thread:
    return thread_open(tenant=team.tenant, agent_name=CHAT)


def _png(width: int = 40, height: int = 20) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (0, 90, 200)).save(out, format="PNG")
    return out.getvalue()


def _url(name: str, thread: Thread) -> str:
    return reverse(name, args=[thread.pk])


def _storage_rows(thread: Thread) -> tuple[int, int, int]:
    return (
        ThreadFile.objects.filter(thread=thread).count(),
        ThreadValue.objects.filter(thread=thread).count(),
        ThreadEnv.objects.filter(thread=thread).count(),
    )


def _seed(thread: Thread) -> None:
    """A file, a key and a variable for the forged writes to (not) touch."""
    file_write(thread=thread, path="/keep.txt", data=b"keep", mime_type="text/plain")
    value_set(thread=thread, key="keep", value=1)
    thread_env_set(thread=thread, name="KEEP", value="v", type="text")


# Files -----------------------------------------------------------------------------------


def test_files_page_lists_directories_first_with_breadcrumbs_and_thumbnails(
    team: Team, thread: Thread
) -> None:
    file_write(thread=thread, path="/docs/a.txt", data=b"hello", mime_type="text/plain")
    file_write(thread=thread, path="/docs/pic.png", data=_png(), mime_type="image/png")
    file_mkdir(thread=thread, path="/docs/zz-sub")
    client = client_of(team.reader)

    root = client.get(_url("console:thread-files", thread)).content.decode()
    docs = client.get(_url("console:thread-files", thread), {"path": "/docs"}).content.decode()

    assert "?path=/docs" in root
    assert docs.index('data-path="/docs/zz-sub"') < docs.index('data-path="/docs/a.txt"')
    assert docs.index('data-path="/docs/a.txt"') < docs.index('data-path="/docs/pic.png"')
    assert 'aria-current="page">docs</a>' in docs  # the breadcrumb's last crumb
    assert "5\xa0bytes" in docs
    assert "<code>text/plain</code>" in docs
    thumbnail = reverse("console:thread-file-thumbnail", args=[thread.pk])
    assert f'<img class="thumb" src="{thumbnail}?path=/docs/pic.png&amp;size=128"' in docs
    assert 'alt="Thumbnail of pic.png"' in docs
    assert docs.count('class="thumb"') == 1
    assert "<title>Files /docs · thread" in docs


def test_files_page_of_a_missing_directory_says_so(team: Team, thread: Thread) -> None:
    answer = client_of(team.member).get(_url("console:thread-files", thread), {"path": "/nope"})

    assert answer.status_code == 404
    assert "no directory /nope" in answer.content.decode()
    assert 'id="upload"' not in answer.content.decode()


def test_download_streams_the_file_as_an_attachment(team: Team, thread: Thread) -> None:
    file_write(thread=thread, path="/r/report.txt", data=b"a" * 300_000, mime_type="text/plain")
    url = _url("console:thread-file-download", thread)

    answer = client_of(team.reader).get(url, {"path": "/r/report.txt"})
    missing = client_of(team.reader).get(url, {"path": "/r/none.txt"})

    assert answer.streaming
    assert answer.getvalue() == b"a" * 300_000
    assert answer["Content-Disposition"] == 'attachment; filename="report.txt"'
    assert answer["Content-Length"] == "300000"
    assert answer["Content-Type"] == "text/plain"
    assert missing.status_code == 404


def test_thumbnail_is_the_apis_and_404_for_what_is_not_an_image(team: Team, thread: Thread) -> None:
    file_write(thread=thread, path="/p.png", data=_png(400, 200), mime_type="image/png")
    file_write(thread=thread, path="/t.txt", data=b"text", mime_type="text/plain")
    url = _url("console:thread-file-thumbnail", thread)
    client = client_of(team.reader)

    thumb = client.get(url, {"path": "/p.png", "size": "100"})
    text = client.get(url, {"path": "/t.txt"})
    nothing = client.get(url, {"path": "/none.png"})

    assert thumb.status_code == 200
    assert thumb["Content-Type"] == "image/png"
    assert Image.open(io.BytesIO(thumb.content)).size == (100, 50)
    assert (text.status_code, nothing.status_code) == (404, 404)


def test_upload_writes_through_the_file_service(team: Team, thread: Thread) -> None:
    file_mkdir(thread=thread, path="/in")
    upload = SimpleUploadedFile("pic.png", _png(), content_type="image/png")

    client = client_of(team.member)

    answer = client.post(
        _url("console:thread-file-upload", thread), {"path": "/in", "file": upload}
    )
    page = client.get(answer["Location"]).content.decode()

    assert answer.status_code == 302
    assert answer["Location"] == _url("console:thread-files", thread) + "?path=%2Fin"
    row = file_stat(thread=thread, path="/in/pic.png")
    assert row is not None
    assert (row.mime_type, row.width, row.height) == ("image/png", 40, 20)
    assert file_read(thread=thread, path="/in/pic.png") == _png()
    assert Event.objects.filter(thread=thread, type="file.changed").count() == 2
    assert "Uploaded /in/pic.png." in page


def test_upload_over_the_cap_is_refused_at_the_file_field_naming_the_cap(
    team: Team, thread: Thread, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_validation, "MAX_FILE_BYTES", 10)
    upload = SimpleUploadedFile("big.bin", b"x" * 11, content_type="application/octet-stream")

    answer = client_of(team.member).post(
        _url("console:thread-file-upload", thread), {"path": "/", "file": upload}
    )

    html = answer.content.decode()
    assert answer.status_code == 413
    assert 'id="upload-error">file is larger than the cap MAX_FILE_BYTES (10 bytes' in html
    assert "(MAX_FILE_BYTES)" in html  # the form names the cap before anything is sent
    assert not ThreadFile.objects.filter(thread=thread).exists()


def test_mkdir_makes_a_directory_and_a_bad_name_is_shown_at_its_field(
    team: Team, thread: Thread
) -> None:
    client = client_of(team.member)
    url = _url("console:thread-file-mkdir", thread)

    made = client.post(url, {"path": "/", "name": "reports"})
    refused = client.post(url, {"path": "/", "name": ".."})

    assert made.status_code == 302
    row = file_stat(thread=thread, path="/reports")
    assert row is not None
    assert row.is_directory
    assert refused.status_code == 400
    assert 'id="mkdir-error">path may not contain &#x27;.&#x27; or &#x27;..&#x27; segments' in (
        refused.content.decode()
    )
    assert ThreadFile.objects.filter(thread=thread).count() == 1


def test_delete_removes_a_file_and_then_its_emptied_directory(team: Team, thread: Thread) -> None:
    file_write(thread=thread, path="/dir/a.txt", data=b"a", mime_type="text/plain")
    client = client_of(team.member)
    url = _url("console:thread-file-delete", thread)

    file_gone = client.post(url, {"path": "/dir/a.txt"})
    directory_gone = client.post(url, {"path": "/dir"})

    assert file_gone["Location"] == _url("console:thread-files", thread) + "?path=%2Fdir"
    assert directory_gone["Location"] == _url("console:thread-files", thread)
    assert not ThreadFile.objects.filter(thread=thread).exists()
    assert Event.objects.filter(thread=thread, type="file.changed").count() == 3


def test_deleting_a_full_directory_is_refused_with_the_services_message(
    team: Team, thread: Thread
) -> None:
    file_write(thread=thread, path="/full/a.txt", data=b"a", mime_type="text/plain")

    answer = client_of(team.member).post(
        _url("console:thread-file-delete", thread), {"path": "/full"}, follow=True
    )

    assert "directory /full is not empty (1 entries)" in answer.content.decode()
    assert file_stat(thread=thread, path="/full/a.txt") is not None


# KV --------------------------------------------------------------------------------------


def test_kv_page_shows_values_as_pretty_json_and_searches_keys(team: Team, thread: Thread) -> None:
    value_set(thread=thread, key="settings/theme", value={"dark": True, "size": [1, 2]})
    value_set(thread=thread, key="counter", value=7)
    client = client_of(team.reader)

    everything = client.get(_url("console:thread-kv", thread)).content.decode()
    found = client.get(_url("console:thread-kv", thread), {"q": "THEME"}).content.decode()

    assert '<pre class="json">{\n  &quot;dark&quot;: true,\n  &quot;size&quot;: [\n' in everything
    assert everything.index('data-key="counter"') < everything.index('data-key="settings/theme"')
    assert 'data-key="settings/theme"' in found
    assert 'data-key="counter"' not in found


def test_kv_set_writes_through_the_value_service_and_edit_fills_the_form(
    team: Team, thread: Thread
) -> None:
    client = client_of(team.member)

    answer = client.post(
        _url("console:thread-kv-set", thread), {"key": "a/b", "value": '{"n": [1, 2]}'}
    )
    edit = client.get(_url("console:thread-kv", thread), {"edit": "a/b"}).content.decode()

    assert answer["Location"] == _url("console:thread-kv", thread)
    assert value_get(thread=thread, key="a/b") == {"n": [1, 2]}
    assert Event.objects.filter(thread=thread, type="kv.changed").count() == 1
    assert 'name="key" value="a/b"' in edit
    assert "{\n  &quot;n&quot;: [\n    1,\n    2\n  ]\n}</textarea>" in edit


def test_kv_bad_json_and_a_refused_key_are_shown_at_their_field(team: Team, thread: Thread) -> None:
    client = client_of(team.member)
    url = _url("console:thread-kv-set", thread)

    bad_json = client.post(url, {"key": "k", "value": "{not json"})
    long_key = client.post(url, {"key": "k" * 256, "value": "1"})

    assert bad_json.status_code == 400
    assert 'id="value-error">value is not JSON: Expecting property name' in (
        bad_json.content.decode()
    )
    assert long_key.status_code == 413
    assert 'id="key-error">KV key is 256 characters; the cap MAX_KEY_LENGTH is 255' in (
        long_key.content.decode()
    )
    assert not ThreadValue.objects.filter(thread=thread).exists()


def test_kv_delete_and_a_null_value_remove_the_key(team: Team, thread: Thread) -> None:
    value_set(thread=thread, key="one", value=1)
    value_set(thread=thread, key="two", value=2)
    client = client_of(team.member)

    client.post(_url("console:thread-kv-delete", thread), {"key": "one"})
    client.post(_url("console:thread-kv-set", thread), {"key": "two", "value": "null"})
    missing = client.post(_url("console:thread-kv-delete", thread), {"key": "one"}, follow=True)

    assert not ThreadValue.objects.filter(thread=thread).exists()
    assert "no KV key &#x27;one&#x27; in this thread" in missing.content.decode()


# Env -------------------------------------------------------------------------------------


def test_env_page_lists_names_types_and_the_tenants_as_inherited(
    team: Team, thread: Thread
) -> None:
    thread_env_set(thread=thread, name="API_TOKEN", value=SECRET, type="secret")
    thread_env_set(thread=thread, name="REGION", value="eu-west", type="text")
    tenant_env_set(tenant=team.tenant, name="REGION", value="us-east", type="text")
    tenant_env_set(tenant=team.tenant, name="ORG_KEY", value=SECRET, type="secret")

    html = client_of(team.reader).get(_url("console:thread-env", thread)).content.decode()

    own, inherited = html.split('id="inherited-title"')
    assert 'data-name="API_TOKEN"' in own
    assert "env-secret" in own
    assert 'data-name="REGION"' in own
    assert 'data-name="ORG_KEY"' in inherited
    assert "<td>overridden by the thread's</td>" in inherited
    assert "<td>inherited</td>" in inherited
    assert SECRET not in html
    assert "eu-west" not in html
    assert "us-east" not in html


def test_env_set_writes_through_the_env_service(team: Team, thread: Thread) -> None:
    answer = client_of(team.member).post(
        _url("console:thread-env-set", thread),
        {"name": "API_TOKEN", "type": "secret", "value": SECRET},
    )

    assert answer["Location"] == _url("console:thread-env", thread)
    stored = thread_env_get(thread=thread, name="API_TOKEN")
    assert stored is not None
    assert (stored.value, stored.type) == (SECRET, "secret")


def test_env_blank_type_keeps_the_variables_type(team: Team, thread: Thread) -> None:
    thread_env_set(thread=thread, name="REGION", value="eu", type="text")

    client_of(team.member).post(
        _url("console:thread-env-set", thread), {"name": "REGION", "type": "", "value": "us"}
    )

    assert thread_env_get(thread=thread, name="REGION") == EnvValue(value="us", type="text")


def test_env_bad_name_is_shown_at_its_field_and_the_value_is_not_sent_back(
    team: Team, thread: Thread
) -> None:
    answer = client_of(team.member).post(
        _url("console:thread-env-set", thread), {"name": "9bad", "type": "text", "value": SECRET}
    )

    html = answer.content.decode()
    assert answer.status_code == 400
    assert 'id="name-error">an environment variable name is letters, digits and underscores' in (
        html
    )
    assert 'value="9bad"' in html
    assert SECRET not in html
    assert not ThreadEnv.objects.filter(thread=thread).exists()


def test_env_delete_removes_the_variable(team: Team, thread: Thread) -> None:
    thread_env_set(thread=thread, name="GONE", value="x", type="text")
    client = client_of(team.member)

    client.post(_url("console:thread-env-delete", thread), {"name": "GONE"})
    missing = client.post(_url("console:thread-env-delete", thread), {"name": "GONE"}, follow=True)

    assert not ThreadEnv.objects.filter(thread=thread).exists()
    assert "no environment variable GONE on this thread" in missing.content.decode()


def test_a_secret_value_is_on_no_page(team: Team, thread: Thread) -> None:
    thread_env_set(thread=thread, name="API_TOKEN", value=SECRET, type="secret")
    tenant_env_set(tenant=team.tenant, name="ORG_TOKEN", value=SECRET, type="text")
    client = client_of(team.admin)

    pages = [client.get(_url(name, thread)) for name in (*STORAGE_PAGES, "console:thread")]
    pages.append(client.post(_url("console:thread-env-set", thread), {"name": "", "value": SECRET}))

    assert [page.status_code for page in pages] == [200, 200, 200, 200, 400]
    for page in pages:
        assert SECRET not in page.content.decode()


# Scoping ---------------------------------------------------------------------------------


def test_storage_pages_are_tabs_of_the_thread(team: Team, thread: Thread) -> None:
    html = client_of(team.reader).get(_url("console:thread-kv", thread)).content.decode()

    for name, label in zip(STORAGE_PAGES, ("Files", "KV", "Env"), strict=True):
        assert f'<a href="{_url(name, thread)}"' in html, label
    assert f'<a href="{_url("console:thread-kv", thread)}" aria-current="page">KV</a>' in html


@pytest.mark.parametrize(
    "route",
    [
        *STORAGE_PAGES,
        "console:thread-file-download",
        "console:thread-file-thumbnail",
        "console:thread-file-upload",
        *WRITES,
    ],
)
def test_another_tenants_thread_is_404_with_no_side_effect(team: Team, route: str) -> None:
    theirs = thread_open(tenant=agents_for(make_tenant()), agent_name=CHAT)
    _seed(theirs)
    before = _storage_rows(theirs)
    client = client_of(team.admin)
    url = _url(route, theirs)
    body = {**WRITES.get(route, {}), "file": SimpleUploadedFile("x.txt", b"x")}

    answers = {
        client.get(url, {"path": "/keep.txt"}).status_code,
        client.post(url, body).status_code,
    }

    assert 404 in answers
    assert answers <= {404, 405}
    assert _storage_rows(theirs) == before


def test_read_only_member_sees_no_write_controls(team: Team, thread: Thread) -> None:
    _seed(thread)
    client = client_of(team.reader)

    pages = [client.get(_url(name, thread)).content.decode() for name in STORAGE_PAGES]

    for html in pages:
        assert '<form method="post"' not in html.split('<main id="main">')[1]
        assert 'class="delete"' not in html
    assert 'data-path="/keep.txt"' in pages[0]
    assert 'data-key="keep"' in pages[1]
    assert 'data-name="KEEP"' in pages[2]


@pytest.mark.parametrize("route", ["console:thread-file-upload", *WRITES])
def test_read_only_members_forged_post_is_403_with_nothing_written(
    team: Team, thread: Thread, route: str
) -> None:
    _seed(thread)
    before = _storage_rows(thread)
    body = {**WRITES.get(route, {}), "path": "/", "file": SimpleUploadedFile("x.txt", b"x")}

    answer = client_of(team.reader).post(_url(route, thread), body)

    assert answer.status_code == 403
    assert _storage_rows(thread) == before
    assert value_get(thread=thread, key="keep") == 1
    assert thread_env_get(thread=thread, name="FORGED") is None
    assert not TenantEnv.objects.filter(tenant=team.tenant).exists()


def test_a_write_on_a_missing_thread_is_404(team: Team) -> None:
    url = reverse("console:thread-kv-set", args=[uuid.uuid4()])

    answer = client_of(team.member).post(url, {"key": "k", "value": "1"})

    assert answer.status_code == 404
