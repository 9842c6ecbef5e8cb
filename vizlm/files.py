"""Writing files without losing any: the one place every command writes through.

Nothing a user has is replaced unasked: an existing non-empty file whose content would change
is replaced only with ``force`` (the commands' ``--force``), and a folder that holds a
checkpoint is trained into only with ``--resume`` or ``--force`` (:func:`checkpoint_files`).
Writing the same bytes again is not a change (``vizlm prepare`` regenerating ``data/`` byte
for byte needs no ``--force``).

Every write goes to a temporary name in the target's folder and is renamed over the target
when complete (``os.replace``, atomic on one file system), so a crash or a kill leaves either
the old file or the new one, never a mix; the temporary file is removed when the write fails.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from vizlm.errors import VizlmError

CHECKPOINT_FILES = ("model.safetensors", "config.json", "train_log.jsonl", "resume")  # what makes a folder a checkpoint


class OverwriteError(VizlmError, ValueError):
    """A write would replace or delete something the user has, and was not asked to."""


def checkpoint_files(folder: Path | str) -> list[str]:
    """The names of :data:`CHECKPOINT_FILES` present in ``folder`` (none: not a checkpoint)."""
    folder = Path(folder)
    return [name for name in CHECKPOINT_FILES if (folder / name).exists()] if folder.is_dir() else []


def _same_content(path: Path, data: bytes) -> bool:
    if path.stat().st_size != len(data):
        return False
    with open(path, "rb") as fh:
        return fh.read(len(data) + 1) == data


def check_replace(path: Path | str, data: bytes | None = None, force: bool = False, how: str = "pass --force") -> None:
    """Raise :class:`OverwriteError` when writing ``data`` to ``path`` would replace an existing
    non-empty file by other bytes (``data`` None: by anything) and ``force`` is not set."""
    path = Path(path)
    if path.is_dir():
        raise OverwriteError(f"{path}: is a folder; give a file name")
    if force or not path.exists() or path.stat().st_size == 0:
        return
    if data is not None and _same_content(path, data):
        return
    what = "a checkpoint's " + path.name if path.name in CHECKPOINT_FILES and path.parent.is_dir() else \
        f"a file of {path.stat().st_size:,} bytes"
    raise OverwriteError(f"{path} exists ({what}); {how} to replace it, or write elsewhere")


def write_bytes(path: Path | str, data: bytes, force: bool = False, how: str = "pass --force") -> Path:
    """Write ``data`` to ``path`` atomically (a temporary name in the same folder, renamed when
    complete), refusing to replace other content unless ``force`` (:func:`check_replace`)."""
    path = Path(path)
    check_replace(path, data, force, how)
    if path.exists() and not path.is_file():  # a device or a pipe (/dev/stdout): written to, never replaced
        with open(path, "wb") as fh:
            fh.write(data)
        return path
    if path.exists() and _same_content(path, data):
        return path  # nothing to change: the file (and its time stamp) stay as they are
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        exc.filename = str(path)  # the file the user named, not the temporary one
        raise
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text(path: Path | str, text: str, force: bool = False, how: str = "pass --force") -> Path:
    """:func:`write_bytes` of ``text`` as UTF-8."""
    return write_bytes(path, text.encode("utf-8"), force, how)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


__all__ = ["CHECKPOINT_FILES", "OverwriteError", "check_replace", "checkpoint_files", "write_bytes", "write_text"]
