"""Collocation statistics for the *phrase* rule, built at ``prepare`` time, read at run time.

Computed from the Brown training split only (``data/brown/train.txt``) and written as a
deterministic text file shipped in the package (``vizlm/assets/collocations.tsv``), so
``tests/test_data.py`` can regenerate it and compare it byte for byte (the POS tagger,
the other shipped asset, is :mod:`vizlm.data.tagger`).

- ``collocations.tsv``: word pairs that occur ``distance`` words apart
  (1..``MAX_DISTANCE``) more often than chance, used by the *phrase* rule of
  :mod:`vizlm.inspect.case_rules`. For a pair (x, y) at distance d, pointwise mutual
  information (Church & Hanks 1990, "Word association norms, mutual information,
  and lexicography") is::

      PMI_d(x, y) = log2( P_d(x, y) / (P(x) P(y)) )
      P_d(x, y) = c_d(x, y) / N_d      # N_d: word pairs d apart within sentences
      P(x) = c(x) / N                  # N: running words

  Pairs seen fewer than ``MIN_PAIR_COUNT`` times (PMI is unreliable for rare
  events) or with PMI below ``MIN_STORED_PMI`` are left out, as are pairs with a
  punctuation token; the rule applies stricter thresholds on top.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from vizlm.core import paths

MAX_DISTANCE = 4
MIN_PAIR_COUNT = 3
MIN_STORED_PMI = 2.0
_WORD = re.compile(r".*[^\W_].*")  # at least one letter or digit: no pure punctuation
_HEADER = "# first\tsecond\tdistance\tcount\tpmi_bits"


def _read_sentences(path: Path) -> list[list[str]]:
    return [line.split() for line in Path(path).read_text(encoding="utf-8").splitlines()]


def collocation_rows(sentences: list[list[str]]) -> list[tuple[str, str, int, int, str]]:
    """``(first, second, distance, count, pmi)`` rows, sorted; PMI formatted with 2 decimals."""
    unigram = Counter(w for s in sentences for w in s)
    total = sum(unigram.values())
    pairs: Counter = Counter()
    pair_total = Counter()
    for s in sentences:
        n = len(s)
        for d in range(1, MAX_DISTANCE + 1):
            pair_total[d] += max(0, n - d)
            pairs.update(zip(s, s[d:], [d] * max(0, n - d)))
    rows = []
    for (x, y, d), c in pairs.items():
        if c < MIN_PAIR_COUNT or not _WORD.fullmatch(x) or not _WORD.fullmatch(y):
            continue
        # integer arithmetic up to the one log keeps the value identical on every machine
        pmi = math.log2((c * total * total) / (pair_total[d] * unigram[x] * unigram[y]))
        if pmi >= MIN_STORED_PMI:
            rows.append((x, y, d, c, f"{pmi:.2f}"))
    rows.sort()
    return rows


def write_collocations(brown_dir: Path, path: Path) -> Path:
    """Compute :func:`collocation_rows` from ``brown_dir/train.txt`` into ``path`` (TSV)."""
    path = Path(path)
    rows = collocation_rows(_read_sentences(Path(brown_dir) / "train.txt"))
    body = "".join(f"{x}\t{y}\t{d}\t{c}\t{p}\n" for x, y, d, c, p in rows)
    path.write_text(_HEADER + "\n" + body, encoding="utf-8")
    return path


@dataclass(frozen=True)
class Collocation:
    first: str
    second: str
    distance: int
    count: int  # times ``second`` followed ``first`` at exactly ``distance`` in Brown train
    pmi: float  # bits


class Collocations:
    """Lookup table over ``collocations.tsv``: ``get(first, second, distance)``."""

    def __init__(self, rows: dict[tuple[str, str, int], tuple[int, float]]):
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, first: str, second: str, distance: int) -> Collocation | None:
        hit = self._rows.get((first, second, distance))
        return None if hit is None else Collocation(first, second, distance, *hit)

    @classmethod
    def read(cls, path: Path) -> "Collocations":
        rows = {}
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if line.startswith("#") or not line:
                continue
            x, y, d, c, p = line.split("\t")
            rows[(x, y, int(d))] = (int(c), float(p))
        return cls(rows)


@lru_cache(maxsize=4)
def load_collocations(path: str | None = None) -> Collocations | None:
    """Collocations from ``path`` (default: the table shipped in ``vizlm/assets``); None if missing."""
    p = Path(path) if path is not None else paths.asset(paths.COLLOCATIONS_FILE)
    return Collocations.read(p) if p.is_file() else None
