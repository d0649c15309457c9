"""``make dev``'s reloader (``python -m config.devreload``): a run starts again when a watched
``.py`` file changes, importing the project's modules afresh; a run that fails prints its
error and the next change starts it again; SIGTERM stops the run and the reloader."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from config import env
from config.devreload import forget, preload

RELOAD_WITHIN_S = 5.0


class Reloader:
    def __init__(self, directory: Path, *options: str) -> None:
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "config.devreload", "--watch", str(directory), *options,
             "--", "probe_run", "--flag"],
            cwd=env.REPO_DIR, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=env.child_environment({"PYTHONPATH": str(directory), "PYTHONUNBUFFERED": "1"}),
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout_s: float) -> float:
        started = time.monotonic()
        while not any(text in line for line in list(self.lines)):
            if time.monotonic() - started > timeout_s:
                raise AssertionError(f"no {text!r} within {timeout_s} s:\n" + "\n".join(self.lines))
            time.sleep(0.02)
        return time.monotonic() - started


@pytest.fixture
def reloader(tmp_path: Path) -> Iterator[Reloader]:
    _write(tmp_path, "one")
    running = Reloader(tmp_path)
    yield running
    if running.process.poll() is None:
        running.process.kill()
        running.process.wait()


def _write(directory: Path, word: str) -> None:
    (directory / "helper.py").write_text(f"WORD = {word!r}\n")
    (directory / "probe_run.py").write_text(
        "import os, sys, time\nfrom helper import WORD\n"
        "print('run', WORD, sys.argv[1:], os.getpid(), flush=True)\ntime.sleep(600)\n"
    )


def _pid_of(reloader: Reloader, word: str) -> int:
    line = next(line for line in reloader.lines if line.startswith(f"run {word} "))
    return int(line.split()[-1])


def test_an_edited_module_is_imported_afresh_by_the_next_run(
    reloader: Reloader, tmp_path: Path
) -> None:
    reloader.wait_for("run one ['--flag']", 60)
    first = _pid_of(reloader, "one")
    (tmp_path / "helper.py").write_text("WORD = 'two'\n")
    reloaded_s = reloader.wait_for("run two ['--flag']", 30)

    assert reloaded_s < RELOAD_WITHIN_S
    assert any("devreload: helper.py changed; restarting probe_run" in line
               for line in reloader.lines)  # fmt: skip
    with pytest.raises(ProcessLookupError):
        os.kill(first, 0)  # the first run is gone


def test_with_a_delay_the_run_stops_at_once_and_starts_again_that_much_later(
    tmp_path: Path,
) -> None:
    _write(tmp_path, "one")
    reloader = Reloader(tmp_path, "--delay", "1.5")
    try:
        reloader.wait_for("run one", 60)
        first = _pid_of(reloader, "one")
        (tmp_path / "helper.py").write_text("WORD = 'two'\n")
        reloader.wait_for("restarting probe_run", 30)
        time.sleep(0.5)
        with pytest.raises(ProcessLookupError):
            os.kill(first, 0)  # stopped before the delay
        assert not any(line.startswith("run two") for line in reloader.lines)
        assert reloader.wait_for("run two", 30) > 0.5
    finally:
        reloader.process.kill()
        reloader.process.wait()


def test_a_run_that_fails_says_why_and_the_next_change_starts_it_again(
    reloader: Reloader, tmp_path: Path
) -> None:
    reloader.wait_for("run one", 60)
    (tmp_path / "helper.py").write_text("WORD = (\n")
    reloader.wait_for("SyntaxError", 30)
    (tmp_path / "helper.py").write_text("WORD = 'three'\n")
    reloader.wait_for("run three", 30)

    assert reloader.process.poll() is None  # the reloader outlived the failed run


def test_sigterm_stops_the_run_and_the_reloader(reloader: Reloader) -> None:
    reloader.wait_for("run one", 60)
    run = _pid_of(reloader, "one")
    reloader.process.send_signal(signal.SIGTERM)

    assert reloader.process.wait(timeout=10) == 0
    with pytest.raises(ProcessLookupError):
        os.kill(run, 0)


def test_forget_drops_only_the_modules_under_the_watched_directories() -> None:
    import config.devreload as module

    saved = dict(sys.modules)
    try:
        forgotten = forget([env.REPO_DIR / "platform"])
        assert "config.devreload" in forgotten
        assert "config" in forgotten
        assert "pytest" in sys.modules
        assert "config.devreload" not in sys.modules
    finally:
        sys.modules.clear()
        sys.modules.update(saved)
    assert sys.modules["config.devreload"] is module


def test_forget_follows_symbolic_links_and_resolves_each_directory_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    watched, outside = tmp_path / "watched", tmp_path / "outside"
    (watched / "package").mkdir(parents=True)
    outside.mkdir()
    (tmp_path / "link").symlink_to(watched)
    modules = {f"probe_watched_{n}": tmp_path / "link" / "package" / f"m{n}.py" for n in range(50)}
    modules["probe_outside"] = outside / "m.py"
    for name, path in modules.items():
        module = types.ModuleType(name)
        module.__file__ = str(path)
        monkeypatch.setitem(sys.modules, name, module)
    resolved: list[str] = []
    realpath = os.path.realpath

    def counting(path: str) -> str:
        resolved.append(str(path))
        return realpath(path)

    monkeypatch.setattr(os.path, "realpath", counting)
    saved = dict(sys.modules)
    try:
        forgotten = forget([watched])
    finally:
        sys.modules.clear()
        sys.modules.update(saved)

    assert sorted(forgotten) == sorted(name for name in modules if name != "probe_outside")
    # One resolution per directory, not one per module and watched directory: with thousands
    # of modules loaded, that was seconds of every reload.
    assert resolved.count(str(tmp_path / "link" / "package")) == 1


def test_preload_skips_a_module_that_reads_the_settings_module_and_restores_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "probe_reads_settings.py").write_text(
        "import os\nNAME = os.environ['DJANGO_SETTINGS_MODULE']\n"
    )
    (tmp_path / "probe_plain.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "probe_settings")
    try:
        assert preload(["probe_reads_settings", "probe_plain"]) == ["probe_plain"]
    finally:
        sys.modules.pop("probe_plain", None)
    assert os.environ["DJANGO_SETTINGS_MODULE"] == "probe_settings"  # noqa: TID251 - restored


def test_the_preloaded_modules_leave_the_settings_and_the_project_to_each_run() -> None:
    probe = (
        "import sys\nfrom config import devreload\ndevreload.preload()\n"
        "from django.conf import settings\n"
        "print(settings.configured, 'config.settings' in sys.modules)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe], cwd=env.REPO_DIR, capture_output=True, text=True,
        timeout=120, env=env.child_environment({"DJANGO_SETTINGS_MODULE": "config.settings"}),
    )  # fmt: skip

    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["False", "False"]
