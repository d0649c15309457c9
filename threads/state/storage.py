"""``ThreadState``'s storage: the thread's key-value store and its files."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from threads.services import files
from threads.services.values import value_get, value_set
from threads.state.base import StateBase

if TYPE_CHECKING:
    from threads.models import ThreadFile


class StorageMixin(StateBase):
    # KV ------------------------------------------------------------------------

    def get_value(self, key: str) -> Any:
        return value_get(thread=self._thread, key=key)

    def set_value(self, key: str, value: Any) -> None:
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
        content = data.encode() if isinstance(data, str) else data
        record = files.file_write(
            thread=self._thread, path=path, data=content, mime_type=mime_type,
            metadata=metadata, width=width, height=height, outbox=self.outbox,
        )  # fmt: skip
        return record

    def read_file(self, path: str) -> bytes | None:
        return files.file_read(thread=self._thread, path=path)

    def read_file_stream(self, path: str, *, signal: threading.Event | None = None) -> Any:
        return files.file_read_stream(thread=self._thread, path=path, abort=signal)

    def stat_file(self, path: str) -> ThreadFile | None:
        return files.file_stat(thread=self._thread, path=path)

    def readdir_file(self, path: str) -> list[ThreadFile]:
        return files.file_readdir(thread=self._thread, path=path)

    def mkdir_file(self, path: str) -> ThreadFile:
        record = files.file_mkdir(thread=self._thread, path=path, outbox=self.outbox)
        return record

    def rmdir_file(self, path: str) -> None:
        files.file_rmdir(thread=self._thread, path=path, outbox=self.outbox)

    def unlink_file(self, path: str) -> bool:
        return files.file_unlink(thread=self._thread, path=path, outbox=self.outbox)

    def get_file_stats(self) -> Any:
        return files.file_stats(thread=self._thread)

    def grep_files(self, pattern: str, *, path: str = "/") -> Any:
        return files.file_grep(thread=self._thread, pattern=pattern, path=path)

    def find_files(self, pattern: str) -> list[str]:
        found: list[str] = files.file_find(thread=self._thread, pattern=pattern)
        return found

    def get_file_thumbnail(self, path: str) -> bytes | None:
        return files.file_thumbnail(thread=self._thread, path=path)
