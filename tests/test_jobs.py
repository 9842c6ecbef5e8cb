"""The app's background computations (vizlm.app.jobs): one per key for every session, running on
when nobody waits, an error reported and forgotten."""

from __future__ import annotations

import threading
from pathlib import Path

from vizlm.app.jobs import Cancelled, Jobs


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


SLOW_APP = '''
import time

import streamlit as st

from vizlm.app import jobs


def slow(progress=None):  # two minutes, reporting its progress as the corpus computations do
    for i in range(1200):
        time.sleep(0.1)
        progress(i / 1200)


st.write(jobs.result("slow", slow, text="slow job"))
'''


def test_the_server_stops_within_seconds_while_a_job_runs(tmp_path):
    """`streamlit run` with a background job running (a session opened over the app's websocket asks for it):
    SIGTERM stops the server within a few seconds. A thread pool's workers were joined at exit: it waited for
    the job (over 80 s for attribution by distance)."""
    import asyncio
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    from streamlit.proto.BackMsg_pb2 import BackMsg
    from tornado.websocket import websocket_connect

    root = Path(__file__).resolve().parent.parent
    (tmp_path / "slow_app.py").write_text(SLOW_APP, encoding="utf-8")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "streamlit", "run", "slow_app.py", "--server.headless", "true", "--server.port",
           str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]
    with open(tmp_path / "server.log", "wb") as log:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                    if r.read().strip() == b"ok":
                        break
            except OSError:
                pass
            assert proc.poll() is None and time.time() < deadline, (tmp_path / "server.log").read_text()
            time.sleep(0.3)

        async def ask() -> bool:  # a session runs the script: the job starts; wait for its progress bar
            ws = await websocket_connect(f"ws://127.0.0.1:{port}/_stcore/stream")
            rerun = BackMsg()
            rerun.rerun_script.query_string = ""
            await ws.write_message(rerun.SerializeToString(), binary=True)
            for _ in range(40):
                message = await asyncio.wait_for(ws.read_message(), 30)
                if message is not None and b"slow job" in message:
                    return True
            return False

        assert asyncio.run(ask()), "the job did not start"
        start = time.time()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        assert time.time() - start < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_cancelled_job_stops_at_its_next_progress_report():
    jobs, reports = Jobs(), []

    def compute(progress=None):
        for i in range(1000):
            progress(i / 1000)
            reports.append(i)
            threading.Event().wait(0.01)
        return "done"

    job = jobs.submit("k", compute)
    while not reports:
        threading.Event().wait(0.01)
    jobs.stop(timeout=5)
    assert job.finished.is_set() and isinstance(job.error, Cancelled) and len(reports) < 1000


def test_the_cancel_button_goes_once_the_result_is_there():
    """A cancellable computation shows a Cancel button while it runs; the page that then shows the result
    shows no Cancel button any more."""
    from streamlit.testing.v1 import AppTest

    def page():
        import time

        import streamlit as st

        from vizlm.app import jobs

        def slow(cancel=None):
            time.sleep(jobs.QUICK_S + 0.5)
            return 42

        st.write(f"result {jobs.result(('cancel-button-test', time.time()), slow, text='computing', cancellable=True)}")

    at = AppTest.from_function(page, default_timeout=60).run()
    assert not at.exception and at.markdown[0].value == "result 42"
    assert [b.label for b in at.button] == []
