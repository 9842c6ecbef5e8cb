"""First visit of the app's corpus pages (Positions, Compare, Cases) with their default inputs:
cold (a new server process and an empty ``VIZLM_CACHE``) and warm (another browser session of
the same server afterwards). Target: the cold first visit renders in < 10 s on 2 cores.

    python benchmarks/cold.py [--pages positions compare cases] [--repeat 3] [--without-shipped] [--json]

Each page is driven by Streamlit's ``AppTest`` (the script as the server runs it, no browser) in a
child process of its own; the pages are interleaved across repeats and the medians reported.
``--without-shipped`` hides the statistics shipped with the bundled checkpoints
(``data/stats/``, ``scripts/ship_stats.py``): what a cold visit costs without them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = ("positions", "compare", "cases")
TARGET_COLD_S = 10.0


def child(page: str) -> dict:
    """Time the page's first visit in this (new) process, then a second session's."""
    from streamlit.testing.v1 import AppTest

    def visit() -> float:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=900)
        at.query_params["text"] = "a b"  # a short Explorer run first: switch_page needs one
        at.run()
        at.switch_page(f"pages/{page}.py")
        t = time.perf_counter()
        at.run()
        took = time.perf_counter() - t
        if at.exception:
            raise SystemExit(f"{page}: {[e.value for e in at.exception]}")
        shown = len(at.get("arrow_vega_lite_chart")) + len(at.get("vega_lite_chart")) + len(at.metric)
        if not shown:
            raise SystemExit(f"{page}: the page shows no chart or metric")
        return took

    return {"cold_s": visit(), "warm_s": visit()}


def hide_shipped(folder: Path) -> dict:
    """An environment whose data folder links every corpus and file of ``data/`` but not ``stats/``."""
    from vizlm.core import paths

    for entry in paths.data_dir().iterdir():
        if entry.name != paths.SHIPPED_STATS:
            (folder / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    return {"VIZLM_DATA": str(folder)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", nargs="+", choices=PAGES, default=list(PAGES))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--without-shipped", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", choices=PAGES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    runs: dict[str, list[dict]] = {p: [] for p in args.pages}
    for _ in range(args.repeat):
        for page in args.pages:  # interleaved: A B C A B C ...
            with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as ckpts:
                env = {**os.environ, "VIZLM_CACHE": cache, **(hide_shipped(Path(ckpts)) if args.without_shipped else {})}
                out = subprocess.run([sys.executable, __file__, "--child", page], env=env, capture_output=True,
                                     text=True, check=False)
                if out.returncode:
                    print(out.stderr[-2000:], file=sys.stderr)
                    return 1
                runs[page].append(json.loads(out.stdout.strip().splitlines()[-1]))
    result = {page: {k: statistics.median(r[k] for r in rs) for k in ("cold_s", "warm_s")} | {"runs": rs}
              for page, rs in runs.items()}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        shipped = "without the shipped statistics" if args.without_shipped else "with the shipped statistics"
        print(f"first visit of each corpus page, default inputs, {shipped}; median of {args.repeat}")
        for page, r in result.items():
            verdict = "pass" if r["cold_s"] < TARGET_COLD_S else "FAIL"
            print(f"  {page:10s} cold {r['cold_s']:6.1f} s  warm {r['warm_s']:5.1f} s   "
                  f"(target cold < {TARGET_COLD_S:.0f} s: {verdict})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
