"""Derived resources built at ``prepare`` time (tagger, collocation statistics).

Each builder writes deterministic files under ``data/``; the analysis issue adds
the POS tagger and phrase statistics here.
"""

from __future__ import annotations

from pathlib import Path


def build_all(out: Path) -> None:
    """Build every derived resource into ``out`` (currently none)."""
    return None
