"""Writing files without losing any: the one place every command writes through.

Nothing a user has is replaced unasked: an existing non-empty file whose content would change
is replaced only with ``force`` (the commands' ``--force``), and a folder that holds a
checkpoint is trained into only with ``--resume`` or ``--force`` (:func:`checkpoint_files`).
Writing the same bytes again is not a change (``vizlm prepare`` regenerating ``data/`` byte
for byte needs no ``--force``).

Every write goes to a temporary name in the target's folder and is renamed over the target
when complete (``os.replace``, atomic on one file system), so a crash or a kill leaves either
the old file or the new one, never a mix; the temporary file is removed when the write fails.

One process at a time trains into a folder (:func:`training_into`): a second one, started while
the first is still training (another terminal, ``vizlm reproduce`` twice), is refused at once
instead of both writing the same checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import filelock

from vizlm.errors import VizlmError

CHECKPOINT_FILES = ("model.safetensors", "config.json", "train_log.jsonl", "resume")  # what makes a folder a checkpoint
TRAINING_LOCK = ".training.lock"  # held (an OS file lock, freed when its process ends) while a process trains into a folder


class OverwriteError(VizlmError, ValueError):
    """A write would replace or delete something the user has, and was not asked to."""


class BusyError(OverwriteError):
    """Another process is training into the folder right now (:func:`training_into`)."""


def training_now(folder: Path | str) -> bool:
    """Whether a process holds ``folder``'s training lock now (:func:`training_into`); creates nothing."""
    path = Path(folder) / TRAINING_LOCK
    if not path.is_file():
        return False
    lock = filelock.FileLock(path, timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        return True
    except OSError:  # a lock this user cannot open: not one this user's trainings hold
        return False
    lock.release()
    return False


@contextlib.contextmanager
def training_into(folder: Path | str, hold: bool = True) -> Iterator[Path]:
    """Hold ``folder``'s training lock (:data:`TRAINING_LOCK`) while the block trains into it; raise
    :class:`BusyError` at once if another process holds it. The lock is the operating system's
    (``filelock``): a process killed while training frees it, nothing stale to remove. A folder
    this made (and the parents it made) is removed again when the block leaves nothing else in it
    (a training refused before its first write). ``hold`` False (a data-parallel run's other
    ranks, which write nothing): no lock."""
    folder = Path(folder)
    if not hold:
        yield folder
        return
    made = [p for p in (folder, *folder.parents) if not p.exists()]  # the folders this makes, innermost first
    folder.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(folder / TRAINING_LOCK, timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise BusyError(f"{folder} is being trained into by another process right now (it holds {folder / TRAINING_LOCK}); "
                        "wait for that training to end, or train into another folder") from None
    try:
        yield folder
    finally:
        lock.release()
        if made and [p.name for p in folder.iterdir()] == [TRAINING_LOCK]:
            # (a lock file is never removed otherwise: a peer may have opened it; here the folder is this call's own)
            (folder / TRAINING_LOCK).unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # one that is not empty (another process wrote there) stays
                for path in made:
                    path.rmdir()


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


__all__ = ["CHECKPOINT_FILES", "TRAINING_LOCK", "BusyError", "OverwriteError", "check_replace", "checkpoint_files",
           "training_into", "training_now", "write_bytes", "write_text"]
