"""Load benchmark of the app: N concurrent browser sessions of the Explorer against one server.

    python benchmarks/load.py [--sessions 8] [--rounds 3] [--json]

Starts ``streamlit run app.py`` on a free port of 127.0.0.1 (loopback only), then N
Chromium contexts (separate cookies and caches: N different users) each open the
Explorer ``--rounds`` times, every time with a text of its own, and wait until the page
has settled. Bounded: at most 16 sessions, 10 rounds, ``--timeout`` seconds in all.

Reports, from one run:
- server CPU seconds per page view (utime + stime of the server process, /proc), the goal
  being < 0.3 s per Explorer view;
- the server's resident memory before, at its peak and after (sampled every 0.25 s);
- settle time p50 / p95 (browser-side; with N browsers on the same cores it measures them
  as much as the server, so it is for reference only);
- isolation: every session checks that the words it sees are those of its own text.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from e2e_server import ARGS, CHROMIUM, serve  # noqa: E402

GOAL_CPU_PER_VIEW_S = 0.3
BUSY = "[data-testid='stStatusWidget'], [data-testid='stSpinner'], [data-testid='stSkeleton']"
WORDS = ["river", "market", "senate", "garden", "doctor", "engine", "letter", "church", "harbor", "teacher",
         "island", "soldier", "village", "bridge", "pilot", "farmer"]


def _proc_stats(pid: int) -> tuple[float, int]:
    """(CPU seconds used so far, resident bytes) of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    return cpu, rss


class Sampler(threading.Thread):
    """Peak resident memory of the server, sampled in the background."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.25):
            try:
                self.peak = max(self.peak, _proc_stats(self.pid)[1])
            except OSError:
                return


def text_for(session: int, round_: int) -> str:
    word = WORDS[session % len(WORDS)]
    return f"The {word} was quiet in round {round_ + 1} , because the {word} had closed early ."


async def _settle(page, timeout: float) -> None:
    await page.wait_for_selector("[data-testid='stMain'] h1", timeout=timeout * 1000)
    quiet, deadline = 0, time.monotonic() + timeout
    while quiet < 3:
        if time.monotonic() > deadline:
            raise TimeoutError("the page kept running")
        quiet = 0 if await page.locator(BUSY).count() else quiet + 1
        await asyncio.sleep(0.25)


async def _session(browser, base: str, session: int, rounds: int, timeout: float, out: dict) -> None:
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    try:
        for r in range(rounds):
            text = text_for(session, r)
            t0 = time.monotonic()
            await page.goto(base + "/?" + urllib.parse.urlencode({"model": "amsrn", "compare": "lstm", "text": text}))
            await _settle(page, timeout)
            out["settle"].append(time.monotonic() - t0)
            out["views"] += 1
            words = " ".join(await page.locator("[data-testid='stButtonGroup'] button").all_inner_texts())
            mine = WORDS[session % len(WORDS)]
            others = [w for w in WORDS if w != mine and w in words]
            if mine not in words or others:
                out["leaks"].append({"session": session, "round": r, "expected": mine, "seen": others})
            if await page.locator("[data-testid='stException']").count():
                out["exceptions"] += 1
    finally:
        await context.close()


async def _drive(base: str, sessions: int, rounds: int, timeout: float, out: dict) -> None:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            await asyncio.wait_for(
                asyncio.gather(*(_session(browser, base, s, rounds, timeout, out) for s in range(sessions))), timeout)
        finally:
            await browser.close()


def run(sessions: int, rounds: int, timeout: float) -> dict:
    with serve(ROOT / ".load-server.log") as (base, server):
        # one warm-up view: model loading and first-time caches are not what a view costs
        warm = {"settle": [], "views": 0, "leaks": [], "exceptions": 0}
        asyncio.run(_drive(base, 1, 1, timeout, warm))
        cpu0, rss0 = _proc_stats(server.pid)
        sampler = Sampler(server.pid)
        sampler.start()
        out = {"settle": [], "views": 0, "leaks": [], "exceptions": 0}
        t0 = time.monotonic()
        asyncio.run(_drive(base, sessions, rounds, timeout, out))
        wall = time.monotonic() - t0
        sampler.stop.set()
        sampler.join()
        cpu1, rss1 = _proc_stats(server.pid)
    views = max(1, out["views"])
    settle = sorted(out["settle"])
    return {
        "sessions": sessions, "rounds": rounds, "views": out["views"], "wall_s": round(wall, 1),
        "server_cpu_s": round(cpu1 - cpu0, 2), "server_cpu_per_view_s": round((cpu1 - cpu0) / views, 3),
        "goal_cpu_per_view_s": GOAL_CPU_PER_VIEW_S, "cpu_goal_met": (cpu1 - cpu0) / views < GOAL_CPU_PER_VIEW_S,
        "rss_mb_before": round(rss0 / 2**20), "rss_mb_peak": round(max(sampler.peak, rss1) / 2**20), "rss_mb_after": round(rss1 / 2**20),
        "settle_p50_s": round(statistics.median(settle), 2) if settle else None,
        "settle_p95_s": round(settle[min(len(settle) - 1, int(0.95 * len(settle)))], 2) if settle else None,
        "exceptions": out["exceptions"], "leaks": out["leaks"],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=8, help="concurrent browser sessions (1-16)")
    p.add_argument("--rounds", type=int, default=3, help="Explorer views per session (1-10)")
    p.add_argument("--timeout", type=float, default=600, help="seconds for the whole run")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    if not Path(CHROMIUM).exists():
        print(f"Chromium not found at {CHROMIUM}: apt-get install chromium", file=sys.stderr)
        return 2
    result = run(min(16, max(1, args.sessions)), min(10, max(1, args.rounds)), args.timeout)
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>22}: {v}")
    return 0 if result["views"] and not result["leaks"] and not result["exceptions"] else 1


if __name__ == "__main__":
    sys.exit(main())
