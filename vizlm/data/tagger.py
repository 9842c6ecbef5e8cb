"""A small part-of-speech tagger for typed text, trained on the Brown training split.

Corpus sentences come with gold Brown tags; text typed into the app does not, yet
the grammar rules of :mod:`vizlm.inspect.case_rules` need tags. This is a bigram hidden Markov
model tagger in the style of TnT (Brants 2000, "TnT -- a statistical
part-of-speech tagger", ANLP), small enough to read in one sitting:

- **tags** are Brown tags simplified by :func:`simplify_tag`: the title, headline
  and cited-word suffixes (``-tl``, ``-hl``, ``-nc``) and the foreign-word prefix
  (``fw-``) are dropped; possessive ``$``, negation ``*`` and contractions
  (``pps+bez`` for "he's") are kept, because the rules use them.
- **known words** (seen in training) emit ``P(w | t) = c(w, t) / c(t)`` and may
  only take the tags they were seen with.
- **unknown words** use the tag distribution of their longest known suffix (up to
  ``MAX_SUFFIX`` characters), learned from rare training words (seen at most
  ``RARE`` times) and smoothed by successive abstraction (TnT, eq. 7); by Bayes,
  ``P(w | t) ∝ P(t | suffix) / P(t)``. Tokens of digits and punctuation only are
  ``cd``.
- **transitions** ``P(t | t')`` interpolate bigram and unigram relative
  frequencies with weights from deleted interpolation (TnT, Fig. 1).
- **Viterbi** search over the candidate tags of each word finds the best sequence.

The model is nothing but integer counts, written at ``vizlm prepare`` time to
``vizlm/assets/tagger.json`` with sorted keys, so the file is byte-for-byte
reproducible; probabilities are computed when it is loaded. On the Brown
validation split it tags about 95% of the tokens correctly (simplified tags).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from functools import lru_cache
from pathlib import Path

from vizlm.core import paths

FORMAT = "vizlm-tagger"
FORMAT_VERSION = 1
MAX_SUFFIX = 5  # longest suffix used to guess the tag of an unknown word
RARE = 5  # words seen at most this often train the suffix model (they behave like unknown words)
START, END = "<s>", "</s>"  # pseudo-tags around every sentence
_DROPPED_SUFFIXES = ("-tl", "-hl", "-nc")
_LATIN = re.compile(r"[a-z]")
_NUMERIC = re.compile(r"[\d\W_]*\d[\d\W_]*")  # digits and punctuation only, at least one digit


def simplify_tag(tag: str) -> str:
    """Brown tag -> the tag set of the tagger and the rules.

    >>> [simplify_tag(t) for t in ("nn-tl-hl", "np$", "md*", "fw-nns", "pps+bez", "vbn-tl")]
    ['nn', 'np$', 'md*', 'nns', 'pps+bez', 'vbn']
    """
    parts = []
    for part in tag.lower().split("+"):
        if part.startswith("fw-") and len(part) > 3:
            part = part[3:]
        stripped = True
        while stripped:
            stripped = False
            for suffix in _DROPPED_SUFFIXES:
                if part.endswith(suffix) and len(part) > len(suffix):
                    part, stripped = part[: -len(suffix)], True
        parts.append(part)
    return "+".join(parts)


# --------------------------------------------------------------------------- training
def _nested(counter: dict[str, Counter]) -> dict[str, dict[str, int]]:
    return {k: dict(sorted(v.items())) for k, v in sorted(counter.items())}


def train_counts(sentences: list[list[str]], tags: list[list[str]]) -> dict:
    """Count everything the tagger needs; a JSON-ready dict of integers only."""
    lexicon: dict[str, Counter] = defaultdict(Counter)
    bigrams: dict[str, Counter] = defaultdict(Counter)
    for words, raw in zip(sentences, tags):
        if len(words) != len(raw):
            raise ValueError(f"sentence has {len(words)} words but {len(raw)} tags")
        seq = [simplify_tag(t) for t in raw]
        for w, t in zip(words, seq):
            lexicon[w][t] += 1
        for prev, t in zip([START] + seq, seq + [END]):
            bigrams[prev][t] += 1
    suffixes: dict[str, Counter] = defaultdict(Counter)
    for w, tag_counts in lexicon.items():
        if sum(tag_counts.values()) > RARE or _NUMERIC.fullmatch(w):
            continue
        for k in range(0, min(MAX_SUFFIX, len(w) - 1) + 1):  # k = 0: the empty suffix (all rare words)
            suffixes[w[len(w) - k :]].update(tag_counts)
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "source": "brown/train",
        "max_suffix": MAX_SUFFIX,
        "rare": RARE,
        "lexicon": _nested(lexicon),
        "suffixes": _nested(suffixes),
        "bigrams": _nested(bigrams),
    }


def write_tagger(brown_dir: Path, path: Path) -> Path:
    """Train on ``brown_dir/train.{txt,tags}`` and write the counts to ``path`` (JSON)."""
    brown_dir, path = Path(brown_dir), Path(path)
    sentences = [line.split() for line in (brown_dir / "train.txt").read_text(encoding="utf-8").splitlines()]
    tags = [line.split() for line in (brown_dir / "train.tags").read_text(encoding="utf-8").splitlines()]
    doc = train_counts(sentences, tags)
    path.write_text(json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "\n", encoding="utf-8")
    return path


# --------------------------------------------------------------------------- tagging
class Tagger:
    """Bigram HMM over simplified Brown tags, built from :func:`train_counts` output."""

    def __init__(self, doc: dict):
        if doc.get("format") != FORMAT or doc.get("format_version", 0) > FORMAT_VERSION:
            raise ValueError("not a vizlm tagger file (or one newer than this vizlm)")
        self.lexicon: dict[str, dict[str, int]] = doc["lexicon"]
        self.suffixes: dict[str, dict[str, int]] = doc["suffixes"]
        self.max_suffix = int(doc["max_suffix"])
        bigrams: dict[str, dict[str, int]] = doc["bigrams"]
        unigram: Counter = Counter()
        for prev, row in bigrams.items():
            for t, n in row.items():
                unigram[t] += n
        self.tag_count = {t: n for t, n in unigram.items() if t != END}
        self.tags = sorted(self.tag_count)
        total = sum(unigram.values())
        self.prior = {t: n / total for t, n in unigram.items()}
        # Deleted interpolation (TnT, Fig. 1): each bigram votes for the estimate that
        # predicts it best when it is itself left out of the counts.
        votes = [0, 0]
        prev_total = {p: sum(row.values()) for p, row in bigrams.items()}
        for prev, row in bigrams.items():
            for t, n in row.items():
                bi = (n - 1) / (prev_total[prev] - 1) if prev_total[prev] > 1 else 0.0
                uni = (unigram[t] - 1) / (total - 1)
                votes[1 if bi > uni else 0] += n
        self.lambdas = (votes[0] / sum(votes), votes[1] / sum(votes))
        self._bigrams = bigrams
        self._prev_total = prev_total
        # theta of successive abstraction = standard deviation of the tag probabilities (TnT, eq. 8)
        mean = 1 / len(self.tags)
        self.theta = math.sqrt(sum((self.prior.get(t, 0.0) - mean) ** 2 for t in self.tags) / (len(self.tags) - 1))
        self._trans_cache: dict[tuple[str, str], float] = {}
        self._suffix_cache: dict[str, dict[str, float]] = {}

    def log_transition(self, prev: str, tag: str) -> float:
        key = (prev, tag)
        if key not in self._trans_cache:
            row = self._bigrams.get(prev, {})
            bi = row.get(tag, 0) / self._prev_total[prev] if prev in self._prev_total else 0.0
            p = self.lambdas[1] * bi + self.lambdas[0] * self.prior.get(tag, 0.0)
            self._trans_cache[key] = math.log(p) if p > 0 else -1e9
        return self._trans_cache[key]

    def _suffix_probs(self, word: str) -> dict[str, float]:
        """``P(t | suffix)`` by successive abstraction from the empty suffix up (TnT, eq. 7)."""
        if word in self._suffix_cache:
            return self._suffix_cache[word]
        probs = {t: self.prior.get(t, 0.0) for t in self.tags}
        for k in range(0, min(self.max_suffix, len(word) - 1) + 1):
            row = self.suffixes.get(word[len(word) - k :])
            if row is None:
                break
            n = sum(row.values())
            probs = {t: (row.get(t, 0) / n + self.theta * probs[t]) / (1 + self.theta) for t in self.tags}
        self._suffix_cache[word] = probs
        return probs

    def emissions(self, word: str) -> dict[str, float]:
        """Candidate tags of ``word`` with ``log P(word | tag)`` (up to a constant for unknown words)."""
        known = self.lexicon.get(word)
        if known:
            return {t: math.log(n / self.tag_count[t]) for t, n in known.items() if t in self.tag_count}
        if _NUMERIC.fullmatch(word):
            return {"cd": 0.0}
        probs = self._suffix_probs(word)
        best = sorted(probs, key=lambda t: (-probs[t], t))[:5]
        return {t: math.log(probs[t] / self.prior[t]) for t in best if probs[t] > 0}

    def tag(self, words: list[str]) -> list[str]:
        """Most likely simplified tag sequence for normalised ``words`` (Viterbi)."""
        if not words:
            return []
        # best[t] = (log prob of the best path ending in t, back-pointer list)
        best: dict[str, tuple[float, list[str]]] = {START: (0.0, [])}
        for w in words:
            nxt: dict[str, tuple[float, list[str]]] = {}
            for t, e in sorted(self.emissions(w).items()):
                score, path = max(
                    ((s + self.log_transition(p, t), pth) for p, (s, pth) in best.items()),
                    key=lambda x: x[0],
                )
                nxt[t] = (score + e, path + [t])
            best = nxt
        _, path = max(((s + self.log_transition(t, END), pth) for t, (s, pth) in best.items()), key=lambda x: x[0])
        return path


@lru_cache(maxsize=4)
def load_tagger(path: str | None = None) -> Tagger | None:
    """The tagger from ``path`` (default: the one shipped in ``vizlm/assets``), or None if it is missing."""
    p = Path(path) if path else paths.asset(paths.TAGGER_FILE)
    if not p.is_file():
        return None
    return Tagger(json.loads(p.read_text(encoding="utf-8")))


def tag_tokens(norms: list[str], path: str | None = None) -> list[str] | None:
    """Simplified Brown tags for normalised tokens.

    None when the tagger file is missing, or when no token has a Latin letter (the
    tagger knows English only: Chinese text stays untagged).
    """
    tags = tag_sentences([norms], path)
    return None if tags is None else tags[0]


def tag_sentences(sentences: list[list[str]], path: str | None = None) -> list[list[str]] | None:
    """:func:`tag_tokens` for a passage: each sentence tagged alone (the tagger's paths start and end
    at sentence boundaries). None when no token of any sentence has a Latin letter, or without a tagger."""
    if not any(_LATIN.search(w) for s in sentences for w in s):
        return None
    tagger = load_tagger(str(path) if path else None)
    return None if tagger is None else [tagger.tag(list(s)) for s in sentences]


