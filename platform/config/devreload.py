"""``make dev``'s reloader: ``python -m config.devreload --watch DIR ... -- MODULE ARG ...``
runs ``python -m MODULE ARG ...`` and runs it again whenever a ``.py`` file under a watched
directory changes (watchfiles).

A fresh interpreter spends most of its start-up importing the same third-party libraries
(the model providers' SDKs, the MCP client, OpenTelemetry, parts of Django: most of a web
process's import time). This process imports those once (:data:`PRELOAD`) and starts each
run as a fork of itself, so a run imports only the project's modules, what needs Django's
settings, and Django's set-up: a web run answers about a second after its fork. Nothing of
the project is imported here, nor Django's settings read, so every run sees the code as it
is on disk; a library upgrade needs ``make dev`` started again.

``--delay S`` starts the new run S seconds after the old one stopped: ``make dev`` gives it
to the worker, so that on two cores the web's restart, which the developer waits for, does
not share them with the worker's. A change within those seconds restarts the run once more.

A run that fails (a syntax error in the edited file) prints its traceback and exits; the
next change starts it again. SIGTERM or SIGINT stops the run (its process group: SIGKILL
after :data:`STOP_GRACE_S`), then this process.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import runpy
import signal
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from watchfiles import PythonFilter, watch

# Third-party modules that import without Django's settings; what fails to import is skipped.
PRELOAD = (
    "anthropic", "openai", "mcp", "mcp_types", "opentelemetry.sdk.trace",
    "opentelemetry.metrics", "pydantic", "httpx", "yaml", "redis", "psycopg", "celery",
    "kombu", "uvicorn", "django.db.models", "django.http", "django.template", "channels",
    "jsonschema", "a2a.server.request_handlers", "a2a.compat.v0_3.conversions", "ag_ui.core",
    "requests", "django.core.management", "rest_framework.fields", "django.core.handlers.asgi",
    "django.contrib.admin", "django.views.debug", "django.db.backends.postgresql.base",
    "django_stubs_ext", "jinja2", "httpcore2", "h11", "prometheus_client", "kombu.pidbox",
    "celery.beat", "a2a.server.routes", "a2a.client", "PIL.Image", "psycopg_pool", "croniter",
    "whitenoise.middleware", "corsheaders.middleware", "channels.routing",
)  # fmt: skip
STOP_GRACE_S = 3.0


def preload(modules: Sequence[str] = PRELOAD) -> list[str]:
    """Import ``modules``, skipping those that fail; the ones imported. Django's settings are
    out of reach meanwhile (no ``DJANGO_SETTINGS_MODULE``): a module that reads them as it
    imports fails here, instead of importing the project's settings into every run."""
    settings_module = os.environ.pop("DJANGO_SETTINGS_MODULE", None)  # noqa: TID251 - restored below
    imported = []
    try:
        for module in modules:
            try:
                importlib.import_module(module)
            except Exception:  # noqa: S112 - a library that needs set-up is left to the run
                continue
            imported.append(module)
    finally:
        if settings_module is not None:
            os.environ["DJANGO_SETTINGS_MODULE"] = settings_module  # noqa: TID251
    return imported


def forget(directories: Sequence[Path]) -> list[str]:
    """Take the modules loaded from under ``directories`` out of ``sys.modules`` (this one's
    package, ``config``, and what its ``__init__`` imports), so that a run imports them from
    disk; their names. Each module's directory is resolved once: a run starts with thousands
    of modules loaded, from a few hundred directories."""
    roots = tuple(os.path.join(os.path.realpath(directory), "") for directory in directories)
    resolved: dict[str, str] = {}
    forgotten = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name == "__main__" or not isinstance(path, str):
            continue
        folder = os.path.dirname(path)
        if folder not in resolved:
            resolved[folder] = os.path.join(os.path.realpath(folder), "")
        real = os.path.realpath(path) if os.path.islink(path) else resolved[folder]
        if real.startswith(roots):
            del sys.modules[name]
            forgotten.append(name)
    return forgotten


def start(module: str, arguments: Sequence[str], *, watched: Sequence[Path]) -> int:
    """Fork a run of ``python -m module arguments`` in a process group of its own, with the
    project's modules (those under ``watched``) to import afresh; its pid."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.setpgid(0, 0)
        forget(watched)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sys.argv = [module, *arguments]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # whatever stops the run is printed, plainly
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def stop(pid: int, grace_s: float = STOP_GRACE_S) -> None:
    """Stop the run ``pid`` and its process group: SIGTERM, then SIGKILL after ``grace_s``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    try:
        while time.monotonic() < deadline:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    except ChildProcessError:
        pass  # already reaped
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)  # what the run left in its group


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m config.devreload", description=__doc__)
    parser.add_argument("--watch", action="append", type=Path, required=True, metavar="DIR")
    parser.add_argument("--delay", type=float, default=0.0, metavar="S",
                        help="start the run again S seconds after it stopped")  # fmt: skip
    parser.add_argument("module")
    parser.add_argument("arguments", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    preload()
    pid = start(options.module, options.arguments, watched=options.watch)
    try:
        for changes in watch(*options.watch, watch_filter=PythonFilter(), debounce=400, step=50):
            names = sorted({Path(path).name for _, path in changes})
            print(f"devreload: {', '.join(names)} changed; restarting {options.module}",
                  file=sys.stderr, flush=True)  # fmt: skip
            stop(pid)
            time.sleep(options.delay)
            pid = start(options.module, options.arguments, watched=options.watch)
    except KeyboardInterrupt:
        pass
    finally:
        stop(pid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
