"""Why did the model look there? Rules that label attention highlights.

The AMSRN paper (Liu & Lee) reads its attention maps by hand and finds four
patterns when a word gets a large weight while another is predicted. This module
turns them into explicit, documented rules. :func:`label_cases` takes every
highlighted (target row, memory slot) pair of a :class:`~vizlm.analysis.SentenceAnalysis`
(``sa.highlights(threshold, top_k)``; the two ``<s>`` slots are skipped) and returns
one :class:`Case` per pair, **labelled or not**: ``labels`` may be empty, so the
share of highlights the rules explain is visible. Each label comes with an
evidence string saying which rule fired and on what.

Notation: the target is ``w = tokens[t]`` (row ``t`` predicts it), the attended
word is ``v = tokens[a]`` (slot ``a + 2``), ``d = t - a`` words apart. Because the
current word ``tokens[t-1]`` is the query and not in memory, ``d >= 2``. The row
that predicts ``</s>`` gets no labels. Tags are simplified Brown tags
(:func:`vizlm.tagger.simplify_tag`): the gold tags of a Brown sentence, else the
output of :func:`tag_tokens` (the bundled HMM tagger). Rules that need tags are
skipped when there are none (for instance when ``data/brown/tagger.json`` is
missing); the word-list rules still run.

**trigger** -- the same information appears again.
  (a) same word: ``v == w``, both content words (tag noun/verb/adjective/adverb,
      or not in ``STOPWORDS`` when untagged; numbers ``N`` excluded):
      "the *market* rose ... the *market*".
  (b) same stem: :func:`stem` strips inflections (``-s``, ``-es``, ``-ies``,
      ``-ed``, ``-ing``, possessive ``'s``; a doubled final consonant and a final
      ``e`` are dropped, stems of 3+ letters): "*tax* ... *taxes*".
  (c) same entity: a third-person pronoun target and an attended noun that
      agrees in number and gender -- ``they/them/their`` with a plural noun
      (``nns``, ``nps``); ``he/him/his`` or ``she/her`` with a proper noun
      (``np``) or a person noun of that gender (``MALE``, ``FEMALE``, ``PERSON``
      lists); ``it/its`` with a singular common noun that is not a person; or two
      pronouns of the same family ("*he* ... *his*"). "the *workers* said
      *they*". Two different proper nouns are not labelled: tags cannot tell
      whether they name one entity.

**causal** -- the attended word is a cause of what is predicted. A causal
  connective from ``CONNECTIVES`` (because, so, therefore, since, thus, hence,
  consequently, due to, as a result, ...) or a cause--effect verb from
  ``CAUSE_VERBS`` (cause, lead to, result in, produce, bring about, trigger, give
  rise to, causative *make*) lies in ``tokens[a:t]``, i.e. is the attended word or
  lies between it and the target. The attended word must be a content word (or
  the connective itself), and so must the target. Ambiguous words
  are checked by tag: *so* counts as a conjunction (``cs``) or as a clause-initial
  adverb, not as the qualifier of "so big" (``ql``); *since* only as a conjunction
  (``cs``), not the preposition of "since 1960"; *make* only when an adjective or
  bare verb follows within three words ("made the task *difficult*"). Without
  tags, *so* and *since* always count and *make* never does.
  "poisonous *insects* ... so the task is a *challenge*".

**phrase** -- the attended word is an earlier part of a phrase that the target
  completes: in Brown train, ``v`` is followed by ``w`` at exactly distance ``d``
  at least ``PHRASE_MIN_COUNT`` (5) times with pointwise mutual information of at
  least ``PHRASE_MIN_PMI`` (4 bits, i.e. 16 times more often than chance); see
  :mod:`vizlm.resources` for the statistics (``data/brown/collocations.tsv``,
  distances 1..4). "*more* ... than" (``more _ than``: 166 times, 6.1 bits),
  "*come* to *grips*".

**grammar** -- a grammatical dependency, by tags:
  (a) subject--verb agreement: a plural subject (``nns``, ``nps``, *we*, *they*,
      *you*) attended when predicting *are/were/have/do* (or a plural
      present-tense verb ``vb``), a singular one (``nn``, ``np``, *he/she/it*)
      for *is/was/has/does* or a ``vbz`` verb, *I* for *am/was/have/do*. Only
      agreeing pairs are labelled, and only if no subject pronoun and no finite
      verb lie between (they would be the nearer subject, or end the clause);
      for *have/do/vb* no verb, modal or *to* may lie between either (else the
      form is an infinitive: "they will *have*").
      "the *jurors* ... *were*".
  (b) determiner -> noun: an article or determiner (``at``, ``dt*``, ``abn``,
      ``abx``, possessive ``pp$``/``wp$``, ``wdt``) attended when predicting a
      noun of the noun phrase it opens: only adjectives, nouns, numbers,
      qualifiers, adverbs and participles lie between, and the number agrees
      (no *a ... dogs*, no *these ... dog*). "*the* grand *jury*".
  (c) auxiliary -> verb form: a modal or infinitival *to* with a bare verb
      ("*could* not *see*"), *have* with a past participle ("*has* already
      *gone*"), *be* with a participle ("*was* quickly *taken*"), *do* with a bare
      verb ("*did* they *know*"); only adverbs, *not* and subject pronouns lie
      between.

Passages. In a passage (several sentences, ``</s>`` between two of them) a pair may cross
sentence boundaries: a model that reads running text can attend to a word of an earlier
sentence, which is where the AMSRN paper's triggers (an entity mentioned before) mostly live.
**trigger** and **causal** apply across a boundary; **phrase** and **grammar** describe one
sentence (:data:`WITHIN_SENTENCE`) and are not given to a pair a boundary separates. The
boundary itself is never a case, neither as the attended word nor as the target.

The rules are heuristics meant to make a highlight easy to read, not a parser:
they can miss dependencies and can fire on coincidences. :func:`corpus_cases`
counts the labels over a whole corpus split and keeps the strongest examples.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import torch

from vizlm.analysis import (
    BOUNDARY,
    DEFAULT_THRESHOLD,
    MIN_TOP_K_WEIGHT,
    SentenceAnalysis,
    analyze_batch,
    analyze_sentences,
    split_at_boundaries,
    tag_passage,
)
from vizlm.attribution import attribute
from vizlm.cache import cached, checkpoint_digest
from vizlm.checkpoint import Checkpoint
from vizlm.data import document_sizes, load_corpus
from vizlm.resources import Collocations, load_collocations
from vizlm.tagger import simplify_tag, tag_tokens
from vizlm.text import NUMBER, detokenize

__all__ = ["LABELS", "LABEL_DESCRIPTIONS", "RANKINGS", "RANK_FIELDS", "Case", "CaseReport", "label_cases",
           "attribute_cases", "by_effect", "corpus_cases", "gallery_order", "tag_tokens", "stem"]

LABEL_DESCRIPTIONS = {  # label -> what its rule checks, in the order the rules run
    "trigger": "the attended word comes back: same word, same stem, or a pronoun for the same entity",
    "causal": "a causal connective (because, so, due to, …) or cause–effect verb links the two",
    "phrase": "the attended word starts a phrase the target completes (collocation statistics of Brown train)",
    "grammar": "a grammatical dependency: subject–verb agreement, determiner → noun, auxiliary → verb form",
}
LABELS = tuple(LABEL_DESCRIPTIONS)
# How corpus_cases picks its examples -> the field of a case (and of an example) it ranks by: the heaviest, the
# most helpful slot, the most weight above an even spread over the slots the row could attend to
# (Case.above_uniform: one slot gets weight 1, choosing nothing), or the attended word the prediction depended
# on most (gradient x input: computed for this ranking only, :func:`attribute_cases`).
RANK_FIELDS = {"weight": "weight", "effect": "effect", "above_uniform": "above_uniform",
               "attribution": "attribution_bits"}
RANKINGS = tuple(RANK_FIELDS)
ATTRIBUTION_METHOD = "gradient-x-input"  # what rank="attribution" measures (vizlm.attribution.METHODS)
# The Cases page's defaults (the reports of the bundled checkpoints at these ship with them: scripts/ship_stats.py)
GALLERY_RANK, GALLERY_LIMIT, GALLERY_EXAMPLES = "above_uniform", 1000, 8
CASES_VERSION = 1  # in the cache key of a corpus report: raise it when the rules or the report change
PHRASE_MIN_PMI = 4.0  # bits
PHRASE_MIN_COUNT = 5

STOPWORDS = frozenset(
    """a an the this that these those some any no every each either neither all both half another such
    what which who whom whose whatever whichever i me my mine myself we us our ours ourselves you your yours
    yourself yourselves he him his himself she her hers herself it its itself they them their theirs
    themselves one ones there here of to in on at by for with from into onto upon about above below over
    under after before between through during without within among against toward towards around across
    along than as like and or but nor if so because since while when where why how though although unless
    until whether then also not n't only just very too quite rather more most less least much many few
    be am is are was were been being have has had having do does did done doing will would shall should
    can could may might must ought 's 're 've 'll 'd 'm""".split()
)
CONTENT_TAGS = frozenset("nn nns np nps nr nrs jj jjr jjs jjt vb vbd vbg vbn vbz rb rbr rbt od".split())

# --- trigger (c): pronoun families, (number, gender); gender None = any, "n" = neuter
PRONOUNS = {
    **dict.fromkeys(("he", "him", "his", "himself"), ("sg", "m")),
    **dict.fromkeys(("she", "her", "hers", "herself"), ("sg", "f")),
    **dict.fromkeys(("it", "its", "itself"), ("sg", "n")),
    **dict.fromkeys(("they", "them", "their", "theirs", "themselves"), ("pl", None)),
}
MALE = frozenset(
    "man boy father son brother husband king mr. sir gentleman uncle nephew grandfather priest monk "
    "lord prince duke bishop fellow guy businessman chairman congressman spokesman".split()
)
FEMALE = frozenset(
    "woman girl mother daughter sister wife queen mrs. miss ms. lady aunt niece grandmother nun "
    "princess duchess actress waitress widow bride".split()
)
PERSON = frozenset(
    "person child baby friend president governor senator judge doctor teacher officer student player "
    "author writer artist leader member worker citizen owner manager director secretary minister "
    "official lawyer soldier captain general reporter patient neighbor husband wife parent".split()
) | MALE | FEMALE

# --- causal
CONNECTIVES: tuple[tuple[str, ...], ...] = (
    ("because",), ("therefore",), ("thus",), ("hence",), ("consequently",), ("accordingly",),
    ("so",), ("since",), ("due", "to"), ("owing", "to"), ("thanks", "to"), ("as", "a", "result"),
    ("as", "a", "consequence"), ("for", "this", "reason"), ("that's", "why"), ("that", "is", "why"),
)
CAUSE_VERBS: tuple[tuple[str, ...], ...] = (
    ("cause",), ("causes",), ("caused",), ("causing",),
    ("lead", "to"), ("leads", "to"), ("led", "to"), ("leading", "to"),
    ("result", "in"), ("results", "in"), ("resulted", "in"), ("resulting", "in"),
    ("produce",), ("produces",), ("produced",), ("producing",),
    ("bring", "about"), ("brings", "about"), ("brought", "about"), ("bringing", "about"),
    ("trigger",), ("triggers",), ("triggered",), ("triggering",),
    ("give", "rise", "to"), ("gives", "rise", "to"), ("gave", "rise", "to"), ("given", "rise", "to"),
    ("make",), ("makes",), ("made",), ("making",),
)
_MAKE = frozenset(("make", "makes", "made", "making"))

# --- grammar
_SG_VERBS = frozenset("is isn't has hasn't does doesn't".split())
_WAS = frozenset(("was", "wasn't"))
_PL_BE = frozenset("are aren't were weren't".split())
_BASE = frozenset("have haven't do don't".split())
DETERMINER_TAGS = frozenset("at dt dti dts dtx abn abx pp$ wp$ wdt".split())
NOUN_TAGS = frozenset("nn nns np nps nn$ nns$ np$ nps$".split())
_NP_INSIDE = frozenset("jj jjr jjs jjt nn nns np nps cd od ap ql rb vbn vbg `` ''".split())
_SG_DETERMINERS = frozenset("a an another each every this that".split())
_PL_DETERMINERS = frozenset("these those both".split())
_SUBJECT_PRONOUNS = frozenset("i we you they he she it".split())
_FINITE = frozenset("vbd vbz md bez bedz ber bed bem hvz hvd doz dod".split())
_AUX_GAP = frozenset("rb rbr rbt * ql pps ppss".split())
_WORD = re.compile(r".*[^\W\d_].*")  # contains a letter


# --------------------------------------------------------------------------- helpers
def stem(word: str) -> str:
    """A small inflectional stemmer: ``taxes``/``tax`` -> ``tax``, ``running``/``run`` -> ``run``.

    >>> [stem(w) for w in ("taxes", "studies", "stopped", "making", "make", "jury's", "dogs")]
    ['tax', 'study', 'stop', 'mak', 'mak', 'jury', 'dog']
    """
    w = word.lower()
    for suffix in ("'s", "s'", "'"):
        if w.endswith(suffix) and len(w) > len(suffix) + 1:
            w = w[: -len(suffix)]
            break
    if len(w) > 4 and w.endswith(("ies", "ied")):
        w = w[:-3] + "y"
    elif w.endswith("sses"):
        w = w[:-2]
    elif len(w) > 4 and w.endswith("es") and w[:-2].endswith(("s", "x", "z", "ch", "sh")):
        w = w[:-2]
    elif len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    elif len(w) > 5 and w.endswith("ing"):
        w = w[:-3]
    elif len(w) > 4 and w.endswith("ed"):
        w = w[:-2]
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "aeiou":
        w = w[:-1]  # stopp -> stop, runn -> run
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]  # make -> mak, like making
    return w


def _base(tag: str | None) -> str:
    """``np$`` -> ``np``, ``md*`` -> ``md``; the negation tag ``*`` stays ``*``."""
    return (tag or "").rstrip("$*") or (tag or "")


class _Sentence:
    """Words and tags of one analysis, shared by the rules."""

    def __init__(self, sa: SentenceAnalysis, collocations: Collocations | None):
        self.words = list(sa.norms)
        self.tags = _rule_tags(sa)
        self.collocations = collocations

    def tag(self, i: int) -> str | None:
        return None if self.tags is None else self.tags[i]

    def is_content(self, i: int) -> bool:
        w = self.words[i]
        if not _WORD.fullmatch(w) or w in (NUMBER, BOUNDARY):
            return False
        if self.tags is not None:
            return _base(self.tags[i]) in CONTENT_TAGS and w not in STOPWORDS
        return w not in STOPWORDS

    def span(self, a: int, t: int) -> str:
        return " ".join(self.words[a : t + 1])


def _rule_tags(sa: SentenceAnalysis) -> list[str] | None:
    """Simplified Brown tags for the rules: the gold tags if they are Brown tags, else the tagger's."""
    tags = sa.tags
    if tags and len(tags) == len(sa.norms):
        if set(tags) == {"-"}:  # Sinica: characters, no tags
            return None
        if all(t == t.lower() for t in tags):
            return [simplify_tag(t) for t in tags]
    return tag_passage(split_at_boundaries(sa.norms))  # Penn Treebank tags (WSJ) or none: tag like typed text


# --------------------------------------------------------------------------- rules
def _trigger(s: _Sentence, t: int, a: int) -> str | None:
    w, v = s.words[t], s.words[a]
    if s.is_content(t) and s.is_content(a):
        if w == v:
            return f"'{w}' repeats '{v}' (same word)"
        sw = stem(w)
        if len(sw) >= 3 and sw == stem(v):
            return f"'{v}' and '{w}' share the stem '{sw}-'"
    if w not in PRONOUNS:
        return None
    number, gender = PRONOUNS[w]
    if v in PRONOUNS:
        if PRONOUNS[v] == (number, gender):
            return f"'{v}' and '{w}' are pronouns of the same family (same referent)"
        return None
    tag = s.tag(a)
    noun = tag.rstrip("$") if tag else None
    if number == "pl":
        if noun in ("nns", "nps"):
            return f"plural pronoun '{w}' can refer back to the plural noun '{v}'"
        return None
    if gender == "n":
        if noun == "nn" and v not in PERSON:
            return f"pronoun '{w}' can refer back to the singular noun '{v}'"
        return None
    people = MALE if gender == "m" else FEMALE
    other = FEMALE if gender == "m" else MALE
    if v in people or (v in PERSON and v not in other):
        return f"pronoun '{w}' can refer back to '{v}' (a person noun of matching gender)"
    if noun == "np" and v not in other:
        return f"pronoun '{w}' can refer back to the name '{v}' (singular proper noun)"
    return None


@functools.lru_cache(maxsize=8)
def _by_first_word(patterns: tuple[tuple[str, ...], ...]) -> dict[str, list[tuple[str, ...]]]:
    out: dict[str, list[tuple[str, ...]]] = {}
    for pattern in patterns:
        out.setdefault(pattern[0], []).append(pattern)
    return out


def _find(words: list[str], patterns: tuple[tuple[str, ...], ...], lo: int, hi: int):
    """Every ``(start, pattern)`` with ``pattern`` wholly inside ``words[lo:hi]``, left to right (a
    passage has hundreds of pairs, some far apart: only the patterns starting with a word are tried)."""
    by_first = _by_first_word(patterns)
    for i in range(lo, hi):
        for pattern in by_first.get(words[i], ()):
            if i + len(pattern) <= hi and tuple(words[i : i + len(pattern)]) == pattern:
                yield i, pattern


def _causal_ok(s: _Sentence, i: int, pattern: tuple[str, ...], t: int) -> bool:
    """Tag checks for ambiguous connectives (see the module docstring)."""
    word, tag = pattern[0], s.tag(i)
    if tag is None:
        return word not in _MAKE  # causative make needs tags
    if word == "so":
        if tag == "cs":
            return True
        return tag == "rb" and (i == 0 or s.words[i - 1] in (",", ";", ":", "and", "--", ".", BOUNDARY))
    if word == "since":
        return tag == "cs"
    if word in _MAKE:
        return any(_base(s.tag(j)) in ("jj", "jjr", "vb") for j in range(i + 1, min(i + 4, t + 1)))
    return True


def _causal(s: _Sentence, t: int, a: int) -> str | None:
    w, v = s.words[t], s.words[a]
    if not s.is_content(t):
        return None
    for kind, patterns in (("causal connective", CONNECTIVES), ("cause-effect verb", CAUSE_VERBS)):
        for i, pattern in _find(s.words, patterns, a, t):
            if not _causal_ok(s, i, pattern, t):
                continue
            phrase = " ".join(pattern)
            if i == a:
                return f"the attended '{v}' is a {kind} ('{phrase}' ... '{w}')"
            if s.is_content(a):
                return f"{kind} '{phrase}' lies between '{v}' and '{w}'"
    return None


def _phrase(s: _Sentence, t: int, a: int) -> str | None:
    if s.collocations is None:
        return None
    w, v, d = s.words[t], s.words[a], t - a
    if w == v or NUMBER in (w, v):  # a repeat (trigger's business) or a number in a list or table: no phrase
        return None
    hit = s.collocations.get(v, w, d)
    if hit is None or hit.count < PHRASE_MIN_COUNT or hit.pmi < PHRASE_MIN_PMI:
        return None
    return (
        f"'{s.span(a, t)}': '{v}' is followed by '{w}' {d} words later {hit.count} times "
        f"in Brown train, PMI {hit.pmi:.1f} bits"
    )


def _subject_number(word: str, tag: str | None) -> str | None:
    if word == "i":
        return "1sg"
    if word == "you":
        return "2" if tag in (None, "ppss") else None
    if word in ("we", "they") or tag in ("nns", "nps"):
        return "pl"
    if word in ("he", "she", "it") or tag in ("nn", "np", "pn"):
        return "sg"
    return None


def _no_verb_between(s: _Sentence, a: int, t: int) -> bool:
    return all(
        s.words[j] != "to" and not _base(s.tag(j)).startswith(("vb", "be", "hv", "do", "md", "to"))
        for j in range(a + 1, t)
    )


def _agreement(s: _Sentence, t: int, a: int) -> str | None:
    w, v, tag = s.words[t], s.words[a], s.tag(t)
    number = _subject_number(v, s.tag(a))
    if number is None:
        return None
    for j in range(a + 1, t):  # a nearer subject pronoun or a finite verb: not the subject of w
        if s.words[j] in _SUBJECT_PRONOUNS or _base(s.tag(j)) in _FINITE:
            return None
    if w in _SG_VERBS or (tag or "").startswith("vbz"):
        allowed = {"sg"}
    elif w in _WAS:
        allowed = {"sg", "1sg"}
    elif w == "am":
        allowed = {"1sg"}
    elif w in _PL_BE:
        allowed = {"pl", "2"}
    elif (w in _BASE or tag == "vb") and _no_verb_between(s, a, t):
        allowed = {"pl", "1sg", "2"}
    else:
        return None
    if number not in allowed:
        return None
    kind = {"sg": "singular", "pl": "plural", "1sg": "first-person", "2": "second-person"}[number]
    return f"subject-verb agreement: {kind} subject '{v}' agrees with '{w}'"


def _determiner(s: _Sentence, t: int, a: int) -> str | None:
    w, v = s.words[t], s.words[a]
    dtag, ntag = s.tag(a), s.tag(t)
    if dtag not in DETERMINER_TAGS or ntag not in NOUN_TAGS:
        return None
    if not all(s.tag(j) in _NP_INSIDE for j in range(a + 1, t)):
        return None
    plural = ntag.rstrip("$") in ("nns", "nps")
    if (plural and v in _SG_DETERMINERS) or (not plural and v in _PL_DETERMINERS):
        return None
    return f"determiner '{v}' opens the noun phrase '{s.span(a, t)}' that '{w}' belongs to"


def _auxiliary(s: _Sentence, t: int, a: int) -> str | None:
    w, v = s.words[t], s.words[a]
    atag, vtag = _base(s.tag(a)), _base(s.tag(t))
    if not atag or not all(_base(s.tag(j)) in _AUX_GAP for j in range(a + 1, t)):
        return None
    if (atag == "md" or atag == "to") and vtag in ("vb", "be", "hv", "do"):
        what = "modal" if atag == "md" else "infinitival"
        return f"{what} '{v}' takes the bare verb '{w}'"
    if atag.startswith("hv") and vtag in ("vbn", "ben"):
        return f"auxiliary '{v}' (have) takes the past participle '{w}'"
    if atag.startswith("be") and vtag in ("vbg", "vbn"):
        return f"auxiliary '{v}' (be) takes the participle '{w}'"
    if atag.startswith("do") and vtag == "vb":
        return f"auxiliary '{v}' (do) takes the bare verb '{w}'"
    return None


def _grammar(s: _Sentence, t: int, a: int) -> str | None:
    found = [ev for rule in (_agreement, _determiner, _auxiliary) if (ev := rule(s, t, a))]
    return "; ".join(found) or None


RULES = {"trigger": _trigger, "causal": _causal, "phrase": _phrase, "grammar": _grammar}
assert tuple(RULES) == LABELS
WITHIN_SENTENCE = frozenset({"phrase", "grammar"})  # rules about one sentence: not across a boundary


# --------------------------------------------------------------------------- cases
@dataclass
class Case:
    """One highlighted (target, attended word) pair and the labels the rules gave it."""

    target: int  # row index: predicts ``sa.targets[target]``
    word: str  # the target word (normalised; "</s>" for the last row)
    slot: int  # memory slot (>= 2)
    token: int  # index into ``sa.tokens`` of the attended word (slot - 2)
    attended: str  # the attended word (normalised)
    weight: float  # attention weight
    labels: list[str] = field(default_factory=list)  # subset of LABELS, in that order
    evidence: dict[str, str] = field(default_factory=dict)  # label -> why
    effect: float | None = None  # slot effect in bits: log2 P(word) minus the same without this slot (None: not computed)
    slots: int = 1  # slots the row could attend to (its start slot included): uniform attention gives each 1 / slots
    attribution_bits: float | None = None  # gradient x input of log2 P(word) to the attended word, in bits: > 0
    # it raised P(word) (None: not computed; corpus_cases computes it for rank="attribution")

    @property
    def above_uniform(self) -> float:
        """The weight minus what an even spread over the row's slots gives: how much the attention chose
        this slot (0 for a model with a window of 1, whose only slot always gets weight 1)."""
        return self.weight - 1.0 / self.slots

    def to_dict(self) -> dict:
        return {
            "target": int(self.target),
            "word": self.word,
            "slot": int(self.slot),
            "token": int(self.token),
            "attended": self.attended,
            "weight": float(self.weight),
            "labels": list(self.labels),
            "evidence": dict(self.evidence),
            "effect": None if self.effect is None else float(self.effect),
            "slots": int(self.slots),
            "above_uniform": float(self.above_uniform),
            "attribution_bits": None if self.attribution_bits is None else float(self.attribution_bits),
        }


def label_cases(
    sa: SentenceAnalysis,
    threshold: float | None = DEFAULT_THRESHOLD,
    top_k: int | None = None,
    collocations: Collocations | None = None,
) -> list[Case]:
    """Every highlighted pair of ``sa`` (``<s>`` slots skipped) as a :class:`Case`; labels may be empty.

    ``collocations`` defaults to the shipped table (:func:`vizlm.resources.load_collocations`;
    no phrase labels if it is missing).
    """
    s = _Sentence(sa, collocations if collocations is not None else load_collocations())
    n = len(s.words)
    sentence = sa.sentence_of()  # [T] the sentence of each row
    slots = sa.allowed().sum(1) if sa.attention is not None else None  # [T] slots each row could attend to
    cases = []
    for t, row in enumerate(sa.highlights(threshold, top_k)):
        for h in row:
            if h.token < 0 or s.words[h.token] == BOUNDARY:
                continue
            evidence = {}
            if t < n and s.words[t] != BOUNDARY:
                across = sentence[h.token] != sentence[t]  # row h.token predicts the attended word
                for label, rule in RULES.items():
                    why = None if across and label in WITHIN_SENTENCE else rule(s, t, h.token)
                    if why:
                        evidence[label] = why
            word = s.words[t] if t < n else sa.targets[t]
            cases.append(Case(t, word, h.slot, h.token, s.words[h.token], h.weight, list(evidence), evidence,
                              h.effect_bits, int(slots[t])))
    return cases


def attribute_cases(ckpt: Checkpoint, sa: SentenceAnalysis, cases: list[Case]) -> list[Case]:
    """``cases`` (of ``sa``, an analysis of ``ckpt``) with their :attr:`Case.attribution_bits`: the attribution of
    each target's ``log2 P(word)`` to its attended word (:data:`ATTRIBUTION_METHOD`, gradient x input, over
    ``sa``'s reading: :func:`vizlm.attribution.attribute`). Memory slot ``j`` holds input position ``j - 1``, so
    a case's is column ``slot - 1`` of its target's row. One batched gradient pass per reading (per
    :data:`vizlm.attribution.ROW_BLOCK` targets); none when there are no cases. Sets the field in place."""
    if cases:
        bits = attribute(ckpt, sa, ATTRIBUTION_METHOD).bits  # (T, T): predicted word r, input position p
        for case in cases:
            case.attribution_bits = float(bits[case.target, case.slot - 1])
    return cases


def by_effect(cases: list[Case]) -> list[Case]:
    """Cases ranked by effect, the most helpful slot first (then by weight); those without an effect last."""
    return sorted(cases, key=lambda c: (c.effect is None, -(c.effect or 0.0), -c.weight))


# --------------------------------------------------------------------------- corpus
@dataclass
class CaseReport:
    """Label counts over a set of sentences and the strongest examples of each label."""

    model: str
    source: str  # "brown/test" or "text"
    threshold: float | None
    top_k: int | None
    sentences: int  # sentences analysed
    pairs: int  # highlighted (target, word slot) pairs
    labelled: int  # pairs with at least one label
    counts: dict[str, int]  # label -> pairs with that label
    examples: dict[str, list[dict]]  # label -> strongest examples (by ``rank``) first
    notes: list[str] = field(default_factory=list)
    rank: str = "weight"  # what "strongest" means: RANKINGS
    mean_effect: dict[str, float | None] = field(default_factory=dict)  # label -> mean slot effect (bits) of its pairs

    def to_dict(self) -> dict:
        doc = asdict(self)
        doc["shares"] = {k: (v / self.pairs if self.pairs else 0.0) for k, v in self.counts.items()}
        return doc

    @classmethod
    def from_dict(cls, doc: dict) -> CaseReport:
        """The report of :meth:`to_dict` (its ``shares`` are recomputed). An example stored before examples
        had ``attribution_bits`` (the shipped reports) reads as one without it computed: None."""
        report = cls(**{f.name: doc[f.name] for f in fields(cls) if f.name in doc})
        report.examples = {label: [{**e, "attribution_bits": e.get("attribution_bits")} for e in examples]
                           for label, examples in report.examples.items()}
        return report


def _documents(ckpt: Checkpoint, sentences: list[list[str]], ids: list[str], originals: list[list[str]] | None,
               tags: list[list[str]] | None, candidates):
    """``(index of its first sentence, analysis)`` of every document of ``sentences`` (by ``ids``) read
    whole as running text, with the slot effects of the ``candidates`` pairs."""
    first = 0
    for size in document_sizes(ids):
        part = slice(first, first + size)
        if any(sentences[part]):
            yield first, analyze_sentences(
                ckpt, sentences[part], None if originals is None else originals[part], None, None,
                None if tags is None else tags[part], top_k=0, max_effect_pairs=None, max_tokens=None,
                effect_pairs=candidates)
        first += size


def _document_example(case: Case, first: int, boundaries: list[int], ids: list[str],
                      originals: list[list[str]]) -> dict:
    """A case of a document read as running text, on the passage that holds it: the sentence before
    the attended word's (or the target's, whichever comes first) to the target's, a sentence a line.
    ``target``, ``slot`` and ``token`` are the passage's (as :func:`vizlm.analysis.analyze` numbers a
    text); ``reading`` says where it is in the document's analysis (``document``: the ids of its first
    and last sentences, ``target``, ``span``: the passage's tokens)."""
    starts = [0] + [b + 1 for b in boundaries]  # each sentence's first token in the document
    ends = starts[1:] + [None]
    own, attended = (int(np.searchsorted(boundaries, x, side="left")) for x in (case.target, case.token))
    lo = max(0, min(own, attended) - 1)
    shift = starts[lo]
    doc = case.to_dict()
    doc.update(target=case.target - shift, slot=case.slot - shift, token=case.token - shift)
    return {
        "sentence_id": ids[first + own],
        "sentence": "\n".join(detokenize(originals[first + k]) for k in range(lo, own + 1)),
        **doc,
        "reading": {"context": "document", "document": [ids[first], ids[first + len(starts) - 1]],
                    "target": case.target, "span": [shift, ends[own]]},  # None: to the document's end
    }


def _strength(value: float | None) -> float:
    """A value to rank by (the :data:`RANK_FIELDS` field of a case or an example); -inf, ranked last, for
    none (an effect or an attribution not computed)."""
    return -math.inf if value is None else value


def gallery_order(examples: list[tuple[str, str, dict]], rank: str) -> list[tuple[str, str, dict]]:
    """``(model, label, example)`` triples of several models in gallery order: the models take turns
    (each one's strongest by ``rank``, then each one's second, ...; the strongest first within a turn), so
    that no model fills the gallery, e.g. one whose every weight is 1 because its window holds one slot."""
    key = RANK_FIELDS[rank]

    def strength(e: tuple) -> float:
        return _strength(e[2].get(key))

    by_model: dict[str, list] = {}
    for e in sorted(examples, key=strength, reverse=True):
        by_model.setdefault(e[0], []).append(e)
    turns = itertools.zip_longest(*by_model.values())
    return [e for turn in turns for e in sorted((e for e in turn if e is not None), key=strength, reverse=True)]


@torch.no_grad()
def corpus_cases(
    ckpt: Checkpoint,
    corpus: str | None = None,
    split: str = "test",
    threshold: float | None = DEFAULT_THRESHOLD,
    limit: int | None = None,
    examples_per_label: int = 10,
    *,
    sentences: list[list[str]] | None = None,
    ids: list[str] | None = None,
    tags: list[list[str]] | None = None,
    top_k: int | None = None,
    data_dir: Path | None = None,
    rank: str = "weight",
    use_cache: bool = True,
) -> CaseReport:
    """Label the highlights of ``ckpt`` on a corpus split (or on given ``sentences``).

    Every sentence is analysed like :func:`vizlm.analysis.analyze_tokens` does (with
    the gold tags where the corpus has them; forward passes batched; the slot effect of
    every highlighted pair) and labelled by :func:`label_cases`. ``limit`` keeps the
    first sentences only. Examples are the ``examples_per_label`` strongest pairs of
    each label: the heaviest (``rank="weight"``), those whose slot helped the
    prediction most (``rank="effect"``), those with the most weight above an even
    spread (``rank="above_uniform"``) or those whose attended word raised the prediction
    most (``rank="attribution"``: gradient x input of ``log2 P(word)`` to the attended word,
    signed, in bits, :func:`attribute_cases`; computed only for this ranking, one more
    batched gradient pass per sentence or document with a labelled pair, so the other
    rankings' examples have ``attribution_bits`` None); ties: earlier sentence first. Counts do not
    depend on the order sentences are processed in. A corpus split's report is cached
    (:mod:`vizlm.cache`, keyed by the checkpoint's and the split's checksums and every
    argument); the bundled checkpoints' at the gallery's defaults ship with them.
    """
    if rank not in RANKINGS:
        raise ValueError(f"rank must be one of {', '.join(RANKINGS)}, not {rank!r}")
    if sentences is not None:
        return _case_report(ckpt, "text", sentences, ids, tags, None, limit, threshold, top_k, examples_per_label, rank)
    if corpus is None:
        raise ValueError("give a corpus name or sentences")
    c = load_corpus(corpus, split, data_dir)

    def compute() -> dict:
        return _case_report(ckpt, f"{corpus}/{split}", c.sentences, c.ids, c.tags, c.originals, limit, threshold, top_k,
                            examples_per_label, rank).to_dict()

    parts = {"kind": "cases", "version": CASES_VERSION, "checkpoint": checkpoint_digest(ckpt), "corpus": c.checksum,
             "context": ckpt.model.config.context, "threshold": threshold, "top_k": top_k,
             "limit": None if limit is None or limit >= len(c.sentences) else limit,
             "examples": examples_per_label, "rank": rank}
    return CaseReport.from_dict({**cached(parts, compute, use_cache), "model": ckpt.label})


def _case_report(ckpt: Checkpoint, source: str, sentences: list[list[str]], ids: list[str] | None,
                 tags: list[list[str]] | None, originals: list[list[str]] | None, limit: int | None,
                 threshold: float | None, top_k: int | None, examples_per_label: int, rank: str) -> CaseReport:
    """:func:`corpus_cases` on ``sentences`` (uncached)."""
    ids = list(ids) if ids is not None else [f"s{i}" for i in range(len(sentences))]
    n = len(sentences) if limit is None else min(limit, len(sentences))
    collocations = load_collocations()
    counts = dict.fromkeys(LABELS, 0)
    heaps: dict[str, list] = {label: [] for label in LABELS}
    best: dict[str, dict[tuple[str, str], tuple]] = {label: {} for label in LABELS}  # word pair -> its item in heaps
    pairs = labelled = analysed = 0
    effect_sum, effect_n = dict.fromkeys(LABELS, 0.0), dict.fromkeys(LABELS, 0)
    notes: list[str] = []
    if not ckpt.has_attention:
        notes.append(f"{ckpt.label} has no attention: there are no highlights to label")
        n = 0
    # slot effects of the pairs that can be cases: word slots (>= 2) with the weight of a highlight
    least = MIN_TOP_K_WEIGHT if top_k is not None else (threshold if threshold is not None else DEFAULT_THRESHOLD)

    def candidates(att: torch.Tensor) -> torch.Tensor:
        return (att >= least) & (torch.arange(att.shape[-1], device=att.device) >= 2)

    document = ckpt.has_attention and ckpt.model.config.context == "document"
    if document:  # running text: each document analysed whole, its cases crossing sentence boundaries
        readings = _documents(ckpt, sentences[:n], ids[:n], originals, tags, candidates)
    else:
        readings = analyze_batch(ckpt, sentences[:n], originals, tags, effects="slots", effect_pairs=candidates)
    for first, sa in readings:
        analysed += len(sa.boundaries) + 1
        sentence = sa.sentence_of()  # [T]
        where = (first, sa.boundaries) if document else sa.text  # what the example needs of its text
        cases = label_cases(sa, threshold, top_k, collocations=collocations)
        if rank == "attribution" and examples_per_label > 0:  # only the labelled pairs can be examples
            attribute_cases(ckpt, sa, [case for case in cases if case.labels])
        for k, case in enumerate(cases):
            pairs += 1
            labelled += bool(case.labels)
            strength = _strength(getattr(case, RANK_FIELDS[rank]))
            i = first + int(sentence[case.target])
            for label in case.labels:
                counts[label] += 1
                if case.effect is not None:
                    effect_sum[label] += case.effect
                    effect_n[label] += 1
                item = (strength, -i, -k, case, where)  # strongest, then earliest, kept
                pair = (case.attended, case.word)  # one example per word pair: a table's "af ... af" once
                heap, kept = heaps[label], best[label]
                if pair in kept:
                    if item[:3] > kept[pair][:3]:
                        heap.remove(kept[pair])
                        heapq.heapify(heap)
                        heapq.heappush(heap, item)
                        kept[pair] = item
                elif len(heap) < examples_per_label:
                    heapq.heappush(heap, item)
                    kept[pair] = item
                elif examples_per_label > 0 and item[:3] > heap[0][:3]:
                    dropped = heapq.heapreplace(heap, item)
                    kept.pop((dropped[3].attended, dropped[3].word), None)
                    kept[pair] = item
    examples = {}
    for label, heap in heaps.items():
        examples[label] = [
            {"sentence_id": ids[-neg_i], "sentence": where, **case.to_dict(), "evidence": case.evidence[label]}
            if isinstance(where, str) else
            {**_document_example(case, *where, ids, originals or sentences), "evidence": case.evidence[label]}
            for _w, neg_i, _k, case, where in sorted(heap, key=lambda x: x[:3], reverse=True)
        ]
    mean_effect = {label: (effect_sum[label] / effect_n[label] if effect_n[label] else None) for label in LABELS}
    return CaseReport(ckpt.label, source, threshold, top_k, analysed, pairs, labelled, counts, examples, notes, rank,
                      mean_effect)
