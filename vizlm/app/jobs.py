"""Corpus computations in the background, shared by every browser session of the server.

A page asks for a result by key (:func:`result`). The first ask starts the computation in a
worker thread of the server process; a later ask, from any session, or after the page was left
and opened again, finds it running (and waits on it, from where it is) or done. The page waits
with a progress bar; leaving the page stops the waiting, never the computation. The most recent
:data:`KEEP` results stay in memory (the corpus functions also keep theirs on disk); a failed
job is reported to the sessions waiting on it, then forgotten, so that the next ask tries again.
A computation that takes ``cancel`` (a callable it asks between batches) can be cancelled from the
page: :func:`result` with ``cancellable`` shows a Cancel button while it waits.

Stopping the server (Ctrl-C, SIGTERM) never waits on a computation: the workers are daemon threads, and at
exit every running job is cancelled (its next progress report raises :class:`Cancelled`) and waited on for
:data:`STOP_WAIT_S` at most. A thread pool's workers were joined at exit: the server hung until the job ended.
"""

from __future__ import annotations

import atexit
import inspect
import itertools
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import streamlit as st

WORKERS = 2  # a short request (200 sentences) need not wait behind another session's whole split
KEEP = 32  # finished results kept in memory, the most recently asked
QUICK_S = 0.5  # a result that comes within this (from the disk cache) shows without a progress bar
POLL_S = 0.25
STOP_WAIT_S = 2.0  # at exit, how long the running jobs get to notice they are cancelled


class Cancelled(Exception):
    """A job stopped: the server is stopping, or the page's Cancel button stopped it (:func:`result` with
    ``cancellable``)."""


@dataclass
class Job:
    """One computation: its progress (0..1, as the corpus functions report it), then its result or error."""

    key: Hashable
    fraction: float = 0.0
    started: bool = False
    result: Any = None
    error: BaseException | None = None
    finished: threading.Event = field(default_factory=threading.Event)
    cancel: threading.Event = field(default_factory=threading.Event)  # set: stop at the next progress report

    def progress(self, fraction: float) -> None:
        if self.cancel.is_set():
            raise Cancelled(f"job {self.key!r}: the server is stopping")
        self.fraction = min(1.0, max(self.fraction, float(fraction)))


class Jobs:
    """The registry: one :class:`Job` per key, each in a daemon thread, ``workers`` of them computing at once."""

    def __init__(self, workers: int = WORKERS, keep: int = KEEP):
        self._slots = threading.BoundedSemaphore(workers)
        self._lock = threading.Lock()
        self._jobs: OrderedDict[Hashable, Job] = OrderedDict()
        self._keep = keep
        self._threads: dict[threading.Thread, Job] = {}
        self._stopping = False
        self._count = itertools.count()
        ref = weakref.ref(self)
        atexit.register(lambda: (jobs := ref()) is not None and jobs.stop())

    def submit(self, key: Hashable, fn: Callable, *args, **kwargs) -> Job:
        """The job of ``key``: the one running or done, else ``fn(*args, **kwargs)`` started (given
        ``progress=`` when it takes one)."""
        with self._lock:
            job = self._jobs.get(key)
            if job is not None:
                self._jobs.move_to_end(key)
                return job
            job = self._jobs[key] = Job(key)
            self._trim()
        if "progress" in inspect.signature(fn).parameters:
            kwargs = {**kwargs, "progress": job.progress}
        if "cancel" in inspect.signature(fn).parameters:  # it asks between batches whether to stop
            kwargs = {**kwargs, "cancel": job.cancel.is_set}
        thread = threading.Thread(target=self._run, args=(job, fn, args, kwargs), daemon=True,
                                  name=f"vizlm-job-{next(self._count)}")
        with self._lock:
            self._threads[thread] = job
            if self._stopping:
                job.cancel.set()
        thread.start()
        return job

    def _run(self, job: Job, fn: Callable, args: tuple, kwargs: dict) -> None:
        try:
            with self._slots:  # at most ``workers`` at once; the others wait their turn
                job.progress(0.0)  # cancelled while it waited: stop before starting
                job.started = True
                job.result = fn(*args, **kwargs)
                job.fraction = 1.0
        except Exception as exc:  # noqa: BLE001 - handed to the sessions waiting on it
            job.error = exc
            self.forget(job)
        finally:
            job.finished.set()
            with self._lock:
                self._threads.pop(threading.current_thread(), None)

    def stop(self, timeout: float = STOP_WAIT_S) -> None:
        """Cancel every job (each stops at its next progress report) and wait ``timeout`` seconds at most for
        them; what does not stop in time is left to die with the process (daemon threads)."""
        with self._lock:
            self._stopping = True
            threads = list(self._threads.items())
        for _, job in threads:
            job.cancel.set()
        end = time.monotonic() + timeout
        for thread, _ in threads:
            thread.join(max(0.0, end - time.monotonic()))

    def forget(self, job: Job) -> None:
        with self._lock:
            if self._jobs.get(job.key) is job:
                del self._jobs[job.key]

    def _trim(self) -> None:
        """Drop the least recently asked finished jobs past :data:`KEEP` (running ones stay)."""
        done = [k for k, j in self._jobs.items() if j.finished.is_set()]
        for k in done[: max(0, len(done) - self._keep)]:
            del self._jobs[k]

    def running(self) -> int:
        with self._lock:
            return sum(not j.finished.is_set() for j in self._jobs.values())


@st.cache_resource(show_spinner=False)
def registry() -> Jobs:
    """The server's one registry (shared by every session and page)."""
    return Jobs()


def result(key: Hashable, fn: Callable, *args, text: str, cancellable: bool = False, **kwargs):
    """``fn(*args, **kwargs)``'s result for ``key``, computed once in the background for every session
    (:class:`Jobs`); while it runs, a progress bar says ``text`` and how far it is, and with ``cancellable``
    a Cancel button stops it (``fn``'s ``cancel`` says so; :class:`Cancelled` is raised). Raises the
    computation's error."""
    job = registry().submit(key, fn, *args, **kwargs)
    if not job.finished.wait(QUICK_S):
        bar = st.progress(job.fraction, text=_label(job, text))
        button = st.empty()  # a slot, so that the button goes with the bar once the result is there
        if cancellable and button.button("Cancel", key=f"cancel-{abs(hash(key))}", icon=":material/cancel:"):
            job.cancel.set()  # the computation stops at its next batch
            registry().forget(job)
            bar.empty()
            button.empty()
            raise Cancelled(text)
        while not job.finished.wait(POLL_S):
            bar.progress(job.fraction, text=_label(job, text))
        bar.empty()
        button.empty()
    if job.error is not None:
        raise job.error
    return job.result


def _label(job: Job, text: str) -> str:
    if not job.started:
        return f"{text} · waiting for another computation to finish"
    return (f"{text} · {job.fraction:.0%} (computed once for everyone, then cached; it goes on if you open "
            "another page)")
