"""The app's background computations (vizlm.app.jobs): one per key for every session, running on
when nobody waits, an error reported and forgotten."""

from __future__ import annotations

import threading


from vizlm.app.jobs import Jobs


def test_one_computation_per_key_shared_by_every_asker():
    jobs, calls, gate = Jobs(), [], threading.Event()

    def compute(x, progress=None):
        calls.append(x)
        progress(0.5)
        gate.wait(10)
        return x * 2

    first = jobs.submit("k", compute, 21)
    second = jobs.submit("k", compute, 21)  # another session, or the page opened again
    assert second is first
    assert not first.finished.wait(0.2)  # nobody waits on it: it goes on
    assert first.fraction == 0.5 and first.started and jobs.running() == 1
    gate.set()
    assert first.finished.wait(10) and first.result == 42 and first.fraction == 1.0
    assert jobs.submit("k", compute, 21) is first and calls == [21]  # done: kept


def test_a_failed_job_is_reported_then_tried_again():
    jobs, calls = Jobs(), []

    def compute():
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("no such split")
        return "ok"

    job = jobs.submit("k", compute)
    assert job.finished.wait(10) and isinstance(job.error, ValueError)
    again = jobs.submit("k", compute)
    assert again is not job and again.finished.wait(10) and again.result == "ok"


def test_only_the_most_recent_results_are_kept():
    jobs, calls = Jobs(keep=2), []
    compute = lambda k: calls.append(k) or k  # noqa: E731
    for k in range(4):
        assert jobs.submit(k, compute, k).finished.wait(10)
    assert all(jobs.submit(k, compute, k).finished.wait(10) for k in (3, 2))  # kept: not computed again
    assert calls == [0, 1, 2, 3]
    assert jobs.submit(0, compute, 0).finished.wait(10) and calls == [0, 1, 2, 3, 0]  # dropped: computed again
