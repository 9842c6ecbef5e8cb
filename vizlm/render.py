"""Vega-Lite -> PNG / SVG in a separate process, so a failure of the renderer cannot take the
caller (the app's server, shared by every user) down with it.

vl-convert is native code: on some inputs it aborts the whole process (a Rust panic that
cannot unwind, exit 134: seen with a control character in a label). :func:`render` hands the
spec to ``python -m vizlm.render`` on stdin and reads the image from stdout, with a time
limit; a crash, a timeout or an error becomes a :class:`RenderError` with a message for the
user, and only that one download fails. Strings in the spec are cleaned first
(:func:`clean_spec`): characters that XML cannot hold never reach the renderer.
"""

from __future__ import annotations

import json
import subprocess
import sys

from vizlm.text import clean_text

RENDER_TIMEOUT_S = 120  # a 400-word heat map takes a few seconds; anything longer is stuck
FORMATS = ("png", "svg")


class RenderError(ValueError):
    """The chart could not be rendered; the message says why, for the user."""


def clean_spec(obj: object) -> object:
    """The spec with every string's unrenderable characters replaced (:func:`vizlm.text.clean_text`)."""
    if isinstance(obj, str):
        return clean_text(obj)
    if isinstance(obj, dict):
        return {clean_spec(k): clean_spec(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [clean_spec(v) for v in obj]
    return obj


def render(spec: dict, fmt: str, scale: float = 1.0, vl_version: str | None = None, timeout: float = RENDER_TIMEOUT_S) -> bytes:
    """``spec`` (a Vega-Lite dict) as PNG or SVG bytes, rendered in a child process."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown image format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    payload = json.dumps({"spec": clean_spec(spec), "fmt": fmt, "scale": scale, "vl_version": vl_version},
                         ensure_ascii=True, allow_nan=False).encode("ascii")
    try:
        proc = subprocess.run([sys.executable, "-m", "vizlm.render"], input=payload, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RenderError(f"drawing the {fmt.upper()} took longer than {timeout:.0f} s and was stopped; "
                          "try a shorter text or the HTML download") from None
    if proc.returncode != 0 or not proc.stdout:
        detail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        raise RenderError(f"the {fmt.upper()} could not be drawn ({detail[0][:200]})")
    return proc.stdout


def _main() -> int:
    """Child process: the JSON request on stdin, the image on stdout."""
    import vl_convert as vlc

    req = json.loads(sys.stdin.buffer.read())
    if req["fmt"] == "png":
        data = bytes(vlc.vegalite_to_png(req["spec"], vl_version=req["vl_version"], scale=req["scale"]))
    else:
        data = vlc.vegalite_to_svg(req["spec"], vl_version=req["vl_version"]).encode("utf-8")
    sys.stdout.buffer.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
