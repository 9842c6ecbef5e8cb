"""Vega-Lite -> PNG / SVG in a separate process, so a failure of the renderer cannot take the
caller (the app's server, shared by every user) down with it.

vl-convert is native code: on some inputs it aborts the whole process (a Rust panic that
cannot unwind, exit 134: seen with a control character in a label). :func:`render` hands the
spec to ``python -m vizlm.present.render`` on stdin and reads the image from stdout, with a time
limit; a crash, a timeout or an error becomes a :class:`RenderError` with a message for the
user, and only that one download fails. Strings in the spec are cleaned first
(:func:`clean_spec`): characters that XML cannot hold never reach the renderer.

Fonts. vl-convert draws with the fonts it finds on the machine and, for a character the first
font lacks, any installed font that has it. A machine without a CJK font draws Chinese tokens
as empty boxes, so the project's set-up installs one (:data:`CJK_FONT_FILE`, Debian's
``fonts-wqy-microhei``; ``.ci/run``). The child registers its folder and renders with
:data:`EXPORT_FONT` (sans-serif, then that family), so Chinese text is drawn with it even
where vl-convert's own scan of the system fonts would miss it; without the file, exports are
drawn as before.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from vizlm.data.text import clean_text

RENDER_TIMEOUT_S = 120  # a 400-word heat map takes a few seconds; anything longer is stuck
FORMATS = ("png", "svg")
# The font with Chinese glyphs that exports carry (Debian: apt-get install fonts-wqy-microhei).
CJK_FONT_FAMILY = "WenQuanYi Micro Hei"
CJK_FONT_FILE = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")
# The charts' font (Vega-Lite config ``font``, a CSS list): Latin text as before, CJK from the font above.
EXPORT_FONT = f"sans-serif, '{CJK_FONT_FAMILY}'"


class RenderError(ValueError):
    """The chart could not be rendered; the message says why, for the user."""


def clean_spec(obj: object) -> object:
    """The spec with every string's unrenderable characters replaced (:func:`vizlm.data.text.clean_text`)."""
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
        proc = subprocess.run([sys.executable, "-m", "vizlm.present.render"], input=payload, capture_output=True, timeout=timeout)
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
    if CJK_FONT_FILE.is_file():
        vlc.register_font_directory(str(CJK_FONT_FILE.parent))
    config = {"font": EXPORT_FONT}
    if req["fmt"] == "png":
        data = bytes(vlc.vegalite_to_png(req["spec"], vl_version=req["vl_version"], scale=req["scale"], config=config))
    else:
        data = vlc.vegalite_to_svg(req["spec"], vl_version=req["vl_version"], config=config).encode("utf-8")
    sys.stdout.buffer.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
