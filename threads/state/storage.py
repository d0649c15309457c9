"""``ThreadState``'s storage: the thread's key-value store and its files."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from threads.state.base import StateBase

if TYPE_CHECKING:
    from threads.models import ThreadFile


class StorageMixin(StateBase):
    # KV ------------------------------------------------------------------------

    def get_value(self, key: str) -> Any:
        from threads.services.values import value_get

        return value_get(thread=self._thread, key=key)

    def set_value(self, key: str, value: Any) -> None:
        from threads.services.values import value_set

        value_set(thread=self._thread, key=key, value=value, outbox=self.outbox)

    # Files -----------------------------------------------------------------------

    def write_file(
        self,
        path: str,
        data: bytes | str,
        mime_type: str,
        *,
        metadata: Mapping[str, Any] | None = None,
        width: int | None = None,
        height: int | None = None,
    ) -> ThreadFile:
        from threads.services import files

        content = data.encode() if isinstance(data, str) else data
        record = files.file_write(
            thread=self._thread, path=path, data=content, mime_type=mime_type,
            metadata=metadata, width=width, height=height,
        )  # fmt: skip
        return record

    def read_file(self, path: str) -> bytes | None:
        from threads.services import files

        return files.file_read(thread=self._thread, path=path)

    def read_file_stream(self, path: str, *, signal: threading.Event | None = None) -> Any:
        from threads.services import files

        return files.file_read_stream(thread=self._thread, path=path, abort=signal)

    def stat_file(self, path: str) -> ThreadFile | None:
        from threads.services import files

        return files.file_stat(thread=self._thread, path=path)

    def readdir_file(self, path: str) -> list[ThreadFile]:
        from threads.services import files

        return files.file_readdir(thread=self._thread, path=path)

    def mkdir_file(self, path: str) -> ThreadFile:
        from threads.services import files

        record = files.file_mkdir(thread=self._thread, path=path)
        return record

    def rmdir_file(self, path: str) -> None:
        from threads.services import files

        files.file_rmdir(thread=self._thread, path=path)

    def unlink_file(self, path: str) -> bool:
        from threads.services import files

        return files.file_unlink(thread=self._thread, path=path)

    def get_file_stats(self) -> Any:
        from threads.services import files

        return files.file_stats(thread=self._thread)

    def grep_files(self, pattern: str, *, path: str = "/") -> Any:
        from threads.services import files

        return files.file_grep(thread=self._thread, pattern=pattern, path=path)

    def find_files(self, pattern: str) -> list[str]:
        from threads.services import files

        found: list[str] = files.file_find(thread=self._thread, pattern=pattern)
        return found

    def get_file_thumbnail(self, path: str) -> bytes | None:
        from threads.services import files

        return files.file_thumbnail(thread=self._thread, path=path)
