"""mkdocs hook (mkdocs.yml): README.md is the site's front page.

The README is written for the repository's root, so its links into ``docs/`` lose that prefix on the site;
everything else of it stays as written (one text, two places to read it).
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent


def front_page() -> str:
    """README.md with its links into docs/ made relative to docs/."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.sub(r"\]\(docs/", "](", text)


def on_files(files, config):
    files.append(File.generated(config, "index.md", content=front_page()))
    return files
