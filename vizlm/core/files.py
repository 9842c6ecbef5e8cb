"""Writing files without losing any: the one place every command writes through.

Nothing a user has is replaced unasked: an existing non-empty file whose content would change
is replaced only with ``force`` (the commands' ``--force``), and a folder that holds a
checkpoint is trained into only with ``--resume`` or ``--force`` (:func:`checkpoint_files`).
Writing the same bytes again is not a change (``vizlm prepare`` regenerating ``data/`` byte
for byte needs no ``--force``).

Every write goes to a temporary name in the target's folder and is renamed over the target
when complete (``os.replace``, atomic on one file system), so a crash or a kill leaves either
the old file or the new one, never a mix; the temporary file is removed when the write fails.

A folder is replaced whole (:func:`new_folder`, :func:`replace_folder`): its new content is
written under a temporary name beside it, then swapped in (the old one renamed away, the new one
renamed in, the old one deleted), so nothing of the old folder is left beside the new content
(a checkpoint's ``train_log.jsonl`` and ``resume/``, a corpus's token-id files) and a crash or a
kill leaves the old folder or the new one. SIGTERM while the new folder is written removes it, as
an error or Ctrl-C does (:func:`terminating_cleanly`).

One process at a time trains into a folder (:func:`training_into`): a second one, started while
the first is still training (another terminal, ``vizlm reproduce`` twice), is refused at once
instead of both writing the same checkpoint. Other writers of a whole folder take a lock the same
way (:func:`exclusive`: ``vizlm prepare`` of one corpus twice at once).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import filelock

from vizlm.core.errors import VizlmError

CHECKPOINT_FILES = ("model.safetensors", "config.json", "train_log.jsonl", "resume")  # what makes a folder a checkpoint
TRAINING_LOCK = ".training.lock"  # held (an OS file lock, freed when its process ends) while a process trains into a folder
# what a checkpoint's folder may hold besides CHECKPOINT_FILES: the training's per-step log and lock
CHECKPOINT_FOLDER_FILES = (*CHECKPOINT_FILES, "steps.jsonl", TRAINING_LOCK)


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
def exclusive(lock: Path | str, busy: str) -> Iterator[Path]:
    """Hold the operating system's file lock ``lock`` (``filelock``) while the block runs; raise
    :class:`BusyError` with the message ``busy`` at once if another process holds it. A process killed
    while holding it frees it: nothing stale to remove. The lock file itself stays (removing it while a
    peer may have opened it would let two processes hold two locks)."""
    lock = Path(lock)
    held = filelock.FileLock(lock, timeout=0)
    try:
        held.acquire()
    except filelock.Timeout:
        raise BusyError(busy) from None
    try:
        yield lock
    finally:
        held.release()


@contextlib.contextmanager
def training_into(folder: Path | str, hold: bool = True) -> Iterator[Path]:
    """Hold ``folder``'s training lock (:data:`TRAINING_LOCK`) while the block trains into it; raise
    :class:`BusyError` at once if another process holds it (:func:`exclusive`). A folder
    this made (and the parents it made) is removed again when the block leaves nothing else in it
    (a training refused before its first write). ``hold`` False (a data-parallel run's other
    ranks, which write nothing): no lock."""
    folder = Path(folder)
    if not hold:
        yield folder
        return
    made = [p for p in (folder, *folder.parents) if not p.exists()]  # the folders this makes, innermost first
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with exclusive(folder / TRAINING_LOCK,
                       f"{folder} is being trained into by another process right now (it holds {folder / TRAINING_LOCK}); "
                       "wait for that training to end, or train into another folder"):
            yield folder
    finally:
        if made and folder.is_dir() and [p.name for p in folder.iterdir()] == [TRAINING_LOCK]:
            # (a lock file is never removed otherwise: a peer may have opened it; here the folder is this call's own)
            (folder / TRAINING_LOCK).unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # one that is not empty (another process wrote there) stays
                for path in made:
                    path.rmdir()


class Terminated(SystemExit):
    """SIGTERM arrived while :func:`terminating_cleanly` was in force (exit status 143, as the signal's)."""


@contextlib.contextmanager
def terminating_cleanly() -> Iterator[None]:
    """While the block runs, SIGTERM (``kill``, a job scheduler's stop) raises :class:`Terminated` in it
    instead of ending the process on the spot, so that its ``finally`` / ``except`` clean-ups run (a
    half-written folder removed). Only in the main thread (where Python delivers signals); the previous
    handler is put back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise Terminated(128 + signal.SIGTERM)

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def replace_folder(new: Path | str, final: Path | str) -> Path:
    """Put the complete folder ``new`` (beside ``final``, on the same file system) in ``final``'s place, all
    of it: the old folder is renamed to a temporary name, ``new`` renamed in, the old one deleted. Nothing of
    the old folder stays beside the new content; between the two renames a crash leaves the old folder
    under its temporary name (``.NAME.*.old``), never a mix. If the second rename fails, the old folder is
    put back. ``final`` a symbolic link: the folder it names is replaced."""
    new, final = Path(new), Path(final)
    if final.is_symlink():
        final = final.resolve()
    if not final.exists():
        os.rename(new, final)
        return final
    if not final.is_dir():
        raise OverwriteError(f"{final} is a file, not a folder; give a folder")
    old = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".old", dir=final.parent))
    os.rename(final, old / final.name)
    try:
        os.rename(new, final)
    except BaseException:
        os.rename(old / final.name, final)
        shutil.rmtree(old, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return final


@contextlib.contextmanager
def new_folder(final: Path | str, partial: Path | str | None = None) -> Iterator[Path]:
    """A folder to write ``final``'s new content into: ``partial`` (default: a fresh temporary name beside
    ``final``, ``.NAME.*.partial``), swapped in whole when the block completes (:func:`replace_folder`),
    removed when it fails, is interrupted or gets SIGTERM (:func:`terminating_cleanly`). ``partial`` given:
    the caller owns that name (e.g. under a lock, :func:`exclusive`), and a leftover of it is removed first."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    if partial is None:
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".partial", dir=final.parent))
    else:
        tmp = Path(partial)
        if tmp.exists() or tmp.is_symlink():
            remove_partial(tmp)
        tmp.mkdir()
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes it private; the folder gets the usual permissions
    with terminating_cleanly():
        try:
            yield tmp
            replace_folder(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def remove_partial(path: Path | str) -> None:
    """Remove a partial folder (:func:`new_folder`) a stopped run left behind."""
    path = Path(path)
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def other_entries(folder: Path | str, allowed: tuple[str, ...] = CHECKPOINT_FOLDER_FILES) -> list[str]:
    """The names in ``folder`` that are not among ``allowed`` (nor hidden temporary files): what replacing the
    folder whole would delete beyond what it is (a checkpoint's files, by default)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir()
                  if p.name not in allowed and not (p.name.startswith(".") and p.name.endswith((".tmp", ".partial"))))


def checkpoint_files(folder: Path | str) -> list[str]:
    """The names of :data:`CHECKPOINT_FILES` present in ``folder`` (none: not a checkpoint)."""
    folder = Path(folder)
    return [name for name in CHECKPOINT_FILES if (folder / name).exists()] if folder.is_dir() else []


def same_content(path: Path, data: bytes) -> bool:
    """Whether the file ``path`` holds exactly ``data`` (its size first, then at most ``len(data) + 1`` bytes)."""
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
    if data is not None and same_content(path, data):
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
    if path.exists() and same_content(path, data):
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


__all__ = ["CHECKPOINT_FILES", "CHECKPOINT_FOLDER_FILES", "TRAINING_LOCK", "BusyError", "OverwriteError", "Terminated",
           "check_replace", "checkpoint_files", "exclusive", "new_folder", "other_entries", "remove_partial",
           "replace_folder", "same_content", "terminating_cleanly", "training_into", "training_now", "write_bytes", "write_text"]
