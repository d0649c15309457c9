"""A thread's file system (spec Threads §8; DIGEST §14).

Contracts:

* Paths are normalised by :func:`normalize_path`: a leading ``/``, no trailing ``/``, no
  repeated ``/``. ``.`` and ``..`` segments, control characters (NUL included), backslashes,
  segments over :data:`MAX_SEGMENT_BYTES` and paths over :data:`MAX_PATH_BYTES` (UTF-8) are
  refused with :class:`ValidationFailed` naming ``path``, so no path escapes the thread root.
  The root ``/`` always exists and has no row.
* Rows (:class:`ThreadFile`) hold the tree; bytes live in Django's default storage
  (filesystem, or S3 through django-storages) under ``<tenant id>/<thread id>/<uuid>``: every
  stored name begins with the tenant id. A write streams its input into storage in chunks
  (never the whole file in memory) and replaces any previous bytes after commit.
* Writing creates missing parent directories; writing over a directory, or under a file, is a
  :class:`Conflict`. ``rmdir`` removes empty directories only.
* :func:`file_grep` is a plain, case-sensitive substring search, line by line, over files whose
  MIME type is text (:func:`is_text_mime_type`); files over :data:`MAX_GREP_FILE_BYTES` are
  skipped and at most ``limit`` matching lines are returned.
* :func:`file_find` globs: ``*`` any run within a segment, ``**`` any depth, ``?`` one
  character within a segment; a pattern without a leading ``/`` matches anywhere.
* Writes run under ``transaction.atomic``; each records its ``file.changed`` event in it.

Caps, each named in its :class:`LimitExceeded` message: :data:`MAX_FILE_BYTES`,
:data:`MAX_METADATA_BYTES`, :data:`MAX_GREP_LIMIT`, :data:`MAX_FIND_RESULTS`.

Modules: ``validation`` (caps, paths, inputs), ``storage`` (bytes in storage, row
helpers), ``writing`` (write, mkdir, rmdir, unlink, delete-all) and ``reading`` (stat,
read, readdir, stats, grep, find, thumbnails); this module re-exports their public names.
"""

from threads.services.files.reading import (
    FileChunk,
    FileStats,
    FindType,
    GrepMatch,
    GrepResult,
    file_find,
    file_grep,
    file_open,
    file_read,
    file_read_stream,
    file_readdir,
    file_stat,
    file_stats,
    file_thumbnail,
    glob_regex,
    thumbnail_mime_type,
)
from threads.services.files.storage import FileData
from threads.services.files.validation import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MIME_TYPE,
    MAX_FILE_BYTES,
    MAX_FIND_RESULTS,
    MAX_GREP_FILE_BYTES,
    MAX_GREP_LIMIT,
    MAX_GREP_LINE_CHARS,
    MAX_METADATA_BYTES,
    MAX_MIME_TYPE_CHARS,
    MAX_PATH_BYTES,
    MAX_PATTERN_CHARS,
    MAX_SEGMENT_BYTES,
    MAX_THUMBNAIL_SIDE,
    is_image_mime_type,
    is_text_mime_type,
    normalize_path,
)
from threads.services.files.writing import (
    file_delete_all,
    file_mkdir,
    file_rmdir,
    file_unlink,
    file_write,
)

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_MIME_TYPE",
    "MAX_FILE_BYTES",
    "MAX_FIND_RESULTS",
    "MAX_GREP_FILE_BYTES",
    "MAX_GREP_LIMIT",
    "MAX_GREP_LINE_CHARS",
    "MAX_METADATA_BYTES",
    "MAX_MIME_TYPE_CHARS",
    "MAX_PATH_BYTES",
    "MAX_PATTERN_CHARS",
    "MAX_SEGMENT_BYTES",
    "MAX_THUMBNAIL_SIDE",
    "FileChunk",
    "FileData",
    "FileStats",
    "FindType",
    "GrepMatch",
    "GrepResult",
    "file_delete_all",
    "file_find",
    "file_grep",
    "file_mkdir",
    "file_open",
    "file_read",
    "file_read_stream",
    "file_readdir",
    "file_rmdir",
    "file_stat",
    "file_stats",
    "file_thumbnail",
    "file_unlink",
    "file_write",
    "glob_regex",
    "is_image_mime_type",
    "is_text_mime_type",
    "normalize_path",
    "thumbnail_mime_type",
]
