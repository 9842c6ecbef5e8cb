"""Analysis sub-commands of the CLI (analyze, compare, positions, cases, export)."""

from __future__ import annotations


def add_analysis_commands(sub) -> None:
    """Register the analysis sub-commands (none yet)."""
    return None


def run(args) -> int:
    raise ValueError(f"unknown command {args.command!r}")
