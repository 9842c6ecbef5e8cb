"""Why did the model look there? Rules that label attention highlights.

The AMSRN paper (Liu & Lee) reads its attention maps by hand and finds four
patterns when a word gets a large weight while another is predicted. This module
turns them into explicit, documented rules. :func:`label_cases` takes every
highlighted (target row, memory slot) pair of a :class:`~vizlm.inspect.analysis.SentenceAnalysis`
(``sa.highlights(threshold, top_k)``; the two ``<s>`` slots are skipped) and returns
one :class:`Case` per pair, **labelled or not**: ``labels`` may be empty, so the
share of highlights the rules explain is visible. Each label comes with an
evidence string saying which rule fired and on what.

Notation: the target is ``w = tokens[t]`` (row ``t`` predicts it), the attended
word is ``v = tokens[a]`` (slot ``a + 2``), ``d = t - a`` words apart. Because the
current word ``tokens[t-1]`` is the query and not in memory, ``d >= 2``. The row
that predicts ``</s>`` gets no labels. Tags are simplified Brown tags
(:func:`vizlm.data.tagger.simplify_tag`): the gold tags of a Brown sentence, else the
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
      (``nns``, ``nps``); ``he/him/his`` or ``she/her`` with a person noun of
      that gender or of either (``MALE``, ``FEMALE``, ``PERSON`` lists: "the
      *president* said that *he*"), or with a proper noun (``np``) whose gender a
      title in the name gives (``TITLES``: "*Mrs.* *Williams* ... *she*", "*Mr.*
      Peter *Jones* ... *he*"); ``it/its`` with a singular common noun that is not
      a person; or two pronouns of the same family ("*he* ... *his*"). "the
      *workers* said *they*". A bare name is not labelled: tags do not tell
      whether "Peter" is a he or a she, and a pronoun that may or may not match
      is no evidence of the same entity. Nor are two different proper nouns:
      tags cannot tell whether they name one entity.

**causal** -- the attended word and the target lie in the two clauses that a
  causal connective from ``CONNECTIVES`` (because, so, therefore, since, thus,
  hence, consequently, due to, as a result, ...) or a cause--effect verb from
  ``CAUSE_VERBS`` (cause, lead to, result in, produce, bring about, trigger, give
  rise to, causative *make*) links, one the cause and the other the effect:
  usually the attended word is in the clause just before the connective (or is
  the connective) and the target in the clause just after it; a clause ends at
  ``. ! ? ; :`` or a sentence boundary and is at most ``CAUSAL_SPAN`` (12) words
  long, so a content word of another clause, or one far from the connective, is
  not labelled. A connective that opens a sentence ("It rained. *Therefore* the
  game ...") links it with the end of the sentence before (running text). A
  sentence-initial *because*, *since*, *due to*, *owing to* or *thanks to* opens
  the cause clause, up to a comma, and links it with the main clause after the
  comma: "*Because* it *rained*, the game was *cancelled*" (no comma within the
  span: no label). The attended word must be a content word (or
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
  :mod:`vizlm.data.resources` for the statistics (``data/brown/collocations.tsv``,
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
      form is an infinitive: "they will *have*"). One relative (or complement)
      clause may lie between: a relative pronoun (*that*, *which*, *who*, ...),
      the clause's verb and no other finite verb, and no subject pronoun after
      the clause's last verb form: "the *dogs* that the boy feeds *are*".
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

Chance. A rule fires on some pairs whatever the attention does, and more often at
some distances than others (a determiner sits a word or two before its noun). So
each label's rate among the highlighted pairs is set against its **distance-matched
chance rate** (:func:`label_rates_vs_chance`): the same rule applied to all pairs
``(t, t - d)`` of the same readings at the distance ``d`` of each highlighted pair,
the pairs attention did not choose included. Enrichment is the ratio of the two
(about 1: attention picks such pairs no more often than their distances alone
predict), and the interval of observed minus chance is a bootstrap over documents
(the unit the corpus splits sample; sentences when there are no documents).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import re
from collections.abc import Hashable, Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import torch

from vizlm.inspect.analysis import (
    BOUNDARY,
    DEFAULT_THRESHOLD,
    MIN_TOP_K_WEIGHT,
    SentenceAnalysis,
    analyze_batch,
    analyze_sentences,
    split_at_boundaries,
    tag_passage,
)
from vizlm.inspect.attribution import attribute
from vizlm.inspect.cache import cached, checkpoint_digest
from vizlm.modeling.checkpoint import Checkpoint
from vizlm.data.folder import document_sizes
from vizlm.data.registry import load_corpus
from vizlm.data.resources import Collocations, load_collocations
from vizlm.data.tagger import simplify_tag, tag_tokens
from vizlm.data.text import NUMBER, detokenize

__all__ = ["LABELS", "LABEL_DESCRIPTIONS", "RANKINGS", "RANK_FIELDS", "Case", "CaseReport", "LabelChance", "LabelReading",
           "label_cases", "label_rates_vs_chance",
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
ATTRIBUTION_METHOD = "gradient-x-input"  # what rank="attribution" measures (vizlm.inspect.attribution.METHODS)
# The Cases page's defaults (the reports of the bundled checkpoints at these ship with them: scripts/ship_stats.py)
GALLERY_RANK, GALLERY_LIMIT, GALLERY_EXAMPLES = "above_uniform", 1000, 8
CASES_VERSION = 2  # in the cache key of a corpus report: raise it when the rules or the report change
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
TITLES = {  # a title that gives the gender of the name it opens (trigger (c))
    **dict.fromkeys(("mr.", "mr", "sir", "lord", "king", "prince", "duke"), "m"),
    **dict.fromkeys(("mrs.", "mrs", "miss", "ms.", "ms", "lady", "queen", "princess", "duchess", "madame"), "f"),
}
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
CAUSAL_SPAN = 12  # words, at most, of each clause a causal expression links
_CLAUSE_END = frozenset((".", "!", "?", ";", ":", BOUNDARY))  # what ends a clause a causal expression links
_FRONTED = frozenset(("because", "since", "due", "owing", "thanks"))  # open a sentence with its cause clause

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
_RELATIVE = frozenset(("that", "which", "who", "whom", "whose"))
_VERBAL = ("vb", "be", "hv", "do", "md", "to")  # tags of verb forms (and infinitival to)
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
    """Words and tags of one reading (a sentence or a passage), shared by the rules."""

    def __init__(self, words: list[str], tags: list[str] | None, collocations: Collocations | None):
        self.words = list(words)
        self.tags = None if tags is None else list(tags)
        self.collocations = collocations
        # [n + 1] the sentence of each token and row: boundaries before it (row b, predicting a boundary, ends its
        # sentence), as SentenceAnalysis.sentence_of numbers the rows
        self.sentence = np.concatenate(([0], np.cumsum([w == BOUNDARY for w in self.words])))

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
    """Simplified Brown tags for the rules: the gold tags if they are Brown tags, else the tagger's (kept
    with the analysis: its cases and its chance baseline read them)."""
    memo = sa.__dict__.get("_rule_tags")
    if memo is None or memo[0] is not sa.norms:
        memo = sa.__dict__["_rule_tags"] = (sa.norms, _compute_rule_tags(sa))
    return memo[1]


def _compute_rule_tags(sa: SentenceAnalysis) -> list[str] | None:
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
    if noun == "np" and _name_gender(s, a) == gender:
        return f"pronoun '{w}' can refer back to the name '{v}' (a proper noun whose title gives its gender)"
    return None


def _name_gender(s: _Sentence, a: int) -> str | None:
    """The gender of the name that ends at token ``a`` when a title in it says so ("Mrs. Williams", "Mr. John
    Smith": walk back over the name's proper nouns to a title of :data:`TITLES`); None otherwise: tags do not
    tell whether "Peter" is a he or a she."""
    for j in range(a, max(-1, a - 5), -1):
        if s.words[j] in TITLES:
            return TITLES[s.words[j]]
        if j < a and _base(s.tag(j)) != "np":
            return None
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


def _clause_end(s: _Sentence, k: int) -> int:
    """The end (exclusive) of the clause that starts at token ``k``: the first of :data:`_CLAUSE_END`, at most
    :data:`CAUSAL_SPAN` words on."""
    for j in range(k, min(len(s.words), k + CAUSAL_SPAN)):
        if s.words[j] in _CLAUSE_END:
            return j
    return min(len(s.words), k + CAUSAL_SPAN)


def _causal_sides(s: _Sentence, i: int, e: int) -> tuple[range, range] | None:
    """What the causal expression at ``words[i:e]`` links: ``(first, second)``, the tokens an attended word may be
    (the expression's first word included) and those a target may be. Usually the clause before it (back to
    :data:`_CLAUSE_END`, at most :data:`CAUSAL_SPAN` words; when it opens a sentence, the end of the sentence
    before: "It rained. *Therefore* ...") and the clause after it. A sentence-initial *because* / *since* /
    *due to* / *owing to* / *thanks to* links the clause it opens, up to a comma, with the main clause after
    the comma ("*Because* it rained, the game ..."); none when no comma follows within the span."""
    words = s.words
    initial = i == 0 or words[i - 1] in _CLAUSE_END
    if initial and words[i] in _FRONTED:
        for j in range(e, min(len(words), e + CAUSAL_SPAN)):
            if words[j] in _CLAUSE_END:
                return None
            if words[j] == ",":
                return range(i, j), range(j + 1, _clause_end(s, j + 1))
        return None
    j = i
    if initial:  # the sentence before: past its end (".", "</s>"), three tokens at most
        while j > max(0, i - 3) and words[j - 1] in _CLAUSE_END:
            j -= 1
    start = j
    while start > max(0, j - CAUSAL_SPAN) and words[start - 1] not in _CLAUSE_END:
        start -= 1
    if start == j and j < i:  # nothing but sentence ends before it
        return None
    return range(start, i + 1), range(e, _clause_end(s, e))


# the farthest apart two tokens the causal rule links can be: a clause each side, a connective and skipped ends
_CAUSAL_REACH = 2 * CAUSAL_SPAN + 8


def _causal(s: _Sentence, t: int, a: int) -> str | None:
    w, v = s.words[t], s.words[a]
    if t - a > _CAUSAL_REACH or not s.is_content(t):
        return None
    for kind, patterns in (("causal connective", CONNECTIVES), ("cause-effect verb", CAUSE_VERBS)):
        for i, pattern in _find(s.words, patterns, max(0, a - CAUSAL_SPAN - 3), t):
            if not _causal_ok(s, i, pattern, t):
                continue
            sides = _causal_sides(s, i, i + len(pattern))
            if sides is None or a not in sides[0] or t not in sides[1] or not (a == i or s.is_content(a)):
                continue
            phrase = " ".join(pattern)
            if i > a:
                return f"{kind} '{phrase}' lies between '{v}' and '{w}'"
            if i == a:
                return f"the attended '{v}' is a {kind} ('{phrase}' ... '{w}')"
            return f"'{v}' is in the clause that '{phrase}' opens, '{w}' in the clause it explains"
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
    return all(s.words[j] != "to" and not _base(s.tag(j)).startswith(_VERBAL) for j in range(a + 1, t))


def _blocks_subject(s: _Sentence, j: int) -> bool:
    """A nearer subject pronoun or a finite verb at ``j``: the word before it is not the subject of a verb after."""
    return s.words[j] in _SUBJECT_PRONOUNS or _base(s.tag(j)) in _FINITE


def _subject_reaches(s: _Sentence, a: int, t: int) -> int | None:
    """Whether the subject at ``a`` can be the subject of the verb at ``t``: the last token before ``t`` that
    belongs to the subject's phrase (``a`` itself, or the end of a relative clause), None when a nearer subject
    or a finite verb lies between. One relative (or complement) clause may lie between: a relative pronoun
    (*that*, *which*, *who*, ...), then the clause's verb (finite, or a present ``vb``) and no other finite verb,
    and after the clause's last verb form no subject pronoun: "the *dogs* that the boy feeds *are*"."""
    for r in range(a + 1, t):
        if s.words[r] in _RELATIVE and s.tag(r) not in ("dt", "ql"):
            break
        if _blocks_subject(s, r):
            return None
    else:
        return a
    verb = next((j for j in range(r + 1, t) if _base(s.tag(j)) in _FINITE or s.tag(j) == "vb"), None)
    if verb is None:  # no clause: "the dogs that are"; as if the pronoun were any other word
        return None if any(_blocks_subject(s, j) for j in range(r + 1, t)) else a
    if any(_base(s.tag(j)) in _FINITE for j in range(verb + 1, t)):  # a second finite verb: not one clause
        return None
    end = max(j for j in range(verb, t) if _base(s.tag(j)).startswith(_VERBAL) or s.words[j] == "to")
    return None if any(s.words[j] in _SUBJECT_PRONOUNS for j in range(end + 1, t)) else end


def _agreement(s: _Sentence, t: int, a: int) -> str | None:
    w, v, tag = s.words[t], s.words[a], s.tag(t)
    number = _subject_number(v, s.tag(a))
    if number is None:
        return None
    last = _subject_reaches(s, a, t)
    if last is None:
        return None
    if w in _SG_VERBS or (tag or "").startswith("vbz"):
        allowed = {"sg"}
    elif w in _WAS:
        allowed = {"sg", "1sg"}
    elif w == "am":
        allowed = {"1sg"}
    elif w in _PL_BE:
        allowed = {"pl", "2"}
    elif (w in _BASE or tag == "vb") and _no_verb_between(s, last, t):
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

    ``collocations`` defaults to the shipped table (:func:`vizlm.data.resources.load_collocations`;
    no phrase labels if it is missing).
    """
    s = _Sentence(sa.norms, _rule_tags(sa), collocations if collocations is not None else load_collocations())
    n = len(s.words)
    slots = sa.allowed().sum(1) if sa.attention is not None else None  # [T] slots each row could attend to
    cases = []
    for t, h in _case_pairs(sa, threshold, top_k):
        evidence = _labels(s, t, h.token)
        word = s.words[t] if t < n else sa.targets[t]
        cases.append(Case(t, word, h.slot, h.token, s.words[h.token], h.weight, list(evidence), evidence,
                          h.effect_bits, int(slots[t])))
    return cases


def _case_pairs(sa: SentenceAnalysis, threshold: float | None, top_k: int | None):
    """``(row, highlight)`` of every pair that is a case: the highlights of word slots (not a start slot, not a
    boundary)."""
    for t, row in enumerate(sa.highlights(threshold, top_k)):
        for h in row:
            if h.token >= 0 and sa.norms[h.token] != BOUNDARY:
                yield t, h


def _labels(s: _Sentence, t: int, a: int, rules: dict = RULES) -> dict[str, str]:
    """label -> evidence for the pair (row ``t``, attended token ``a``): the one place the rules are applied (to
    highlights and to the chance baseline's pairs alike). None for the row that predicts the end or a boundary;
    no phrase or grammar across a sentence boundary (:data:`WITHIN_SENTENCE`)."""
    if t >= len(s.words) or s.words[t] == BOUNDARY:
        return {}
    across = s.sentence[a] != s.sentence[t]  # row a predicts the attended word
    found = {}
    for label, rule in rules.items():
        if not (across and label in WITHIN_SENTENCE) and (why := rule(s, t, a)):
            found[label] = why
    return found


def attribute_cases(ckpt: Checkpoint, sa: SentenceAnalysis, cases: list[Case]) -> list[Case]:
    """``cases`` (of ``sa``, an analysis of ``ckpt``) with their :attr:`Case.attribution_bits`: the attribution of
    each target's ``log2 P(word)`` to its attended word (:data:`ATTRIBUTION_METHOD`, gradient x input, over
    ``sa``'s reading: :func:`vizlm.inspect.attribution.attribute`). Memory slot ``j`` holds input position ``j - 1``, so
    a case's is column ``slot - 1`` of its target's row. One batched gradient pass per reading (per
    :data:`vizlm.inspect.attribution.ROW_BLOCK` targets); none when there are no cases. Sets the field in place."""
    if cases:
        bits = attribute(ckpt, sa, ATTRIBUTION_METHOD).bits  # (T, T): predicted word r, input position p
        for case in cases:
            case.attribution_bits = float(bits[case.target, case.slot - 1])
    return cases


def by_effect(cases: list[Case]) -> list[Case]:
    """Cases ranked by effect, the most helpful slot first (then by weight); those without an effect last."""
    return sorted(cases, key=lambda c: (c.effect is None, -(c.effect or 0.0), -c.weight))


# --------------------------------------------------------------------------- chance
CHANCE_MIN_PAIRS = 5000  # pairs at a distance the chance rate is computed over, at least (all when there are fewer)
CHANCE_PAIRS_PER_HIGHLIGHT = 50  # ... and per highlighted pair at that distance: linear in the highlights
CHANCE_RESAMPLES = 1000  # bootstrap resamples of the interval


@dataclass(frozen=True)
class LabelReading:
    """One reading as the chance baseline needs it: a stretch of text a model read without restarting (a sentence,
    or a document read as running text) and its highlighted pairs.

    ``words`` [n]: the normalised tokens (:data:`~vizlm.inspect.analysis.BOUNDARY` between two sentences); ``tags`` [n]:
    simplified Brown tags, or None (untagged: the rules that need tags are skipped); ``pairs``: the highlighted
    ``(row t, attended token a)``, ``0 <= a < t <= n`` (row ``t`` predicts ``words[t]``, row ``n`` the end; the
    attended word is not a boundary); ``unit``: what the bootstrap resamples it with (its document; its own
    sentence where there are no documents)."""

    words: tuple[str, ...]
    tags: tuple[str, ...] | None
    pairs: tuple[tuple[int, int], ...]
    unit: Hashable = 0

    def __post_init__(self):
        n = len(self.words)
        if self.tags is not None and len(self.tags) != n:
            raise ValueError(f"a reading has {n} words but {len(self.tags)} tags")
        for t, a in self.pairs:
            if not (0 <= a < t <= n) or self.words[a] == BOUNDARY:
                raise ValueError(f"pair (row {t}, token {a}) is not a pair of a reading of {n} words: it needs "
                                 "0 <= token < row <= words, and a word (not a boundary) at the token")

    @classmethod
    def of(cls, sa: SentenceAnalysis, threshold: float | None = DEFAULT_THRESHOLD, top_k: int | None = None,
           unit: Hashable = 0) -> LabelReading:
        """The reading of ``sa`` with the pairs :func:`label_cases` labels at this highlight setting (``sa`` read
        without restarting: a sentence, or a document as running text)."""
        if sa.restarts:
            raise ValueError("an analysis read in several pieces (sentence by sentence): give each piece alone")
        tags = _rule_tags(sa)
        return cls(tuple(sa.norms), None if tags is None else tuple(tags),
                   tuple((t, h.token) for t, h in _case_pairs(sa, threshold, top_k)), unit)


@dataclass(frozen=True)
class LabelChance:
    """How often one label's rule fires on the highlighted pairs, against how often it fires on pairs at the same
    distances that attention did not choose (:func:`label_rates_vs_chance`)."""

    label: str
    pairs: int  # highlighted pairs
    count: int  # of them with the label
    observed: float  # count / pairs
    chance: float  # the distance-matched rate: the rule's rate over all pairs at each highlighted pair's distance
    enrichment: float | None  # observed / chance (None: chance 0)
    low: float | None  # the interval (``confidence``, bootstrap over ``unit``) of observed - chance (None: one unit)
    high: float | None
    units: int  # units resampled
    unit: str  # what they are: "documents" or "sentences"
    chance_pairs: int  # pairs the chance rates were computed over
    by_distance: tuple[tuple[int, int, float], ...]  # (d, highlighted pairs at d, the rule's rate over pairs at d)

    def to_dict(self) -> dict:
        doc = asdict(self)
        doc["by_distance"] = [list(x) for x in self.by_distance]
        return doc

    @classmethod
    def from_dict(cls, doc: dict) -> LabelChance:
        return cls(**{**doc, "by_distance": tuple((int(d), int(k), float(r)) for d, k, r in doc["by_distance"])})


def _float(x) -> float | None:
    return None if x is None else float(x)


def label_rates_vs_chance(
    readings: Iterable[LabelReading],
    *,
    collocations: Collocations | None = None,
    unit: str = "documents",
    confidence: float = 0.95,
    resamples: int = CHANCE_RESAMPLES,
    seed: int = 0,
    rules: dict | None = None,
) -> dict[str, LabelChance]:
    """Each label's rate among the highlighted pairs of ``readings`` against chance: label -> :class:`LabelChance`
    (empty when there are no highlighted pairs).

    A rule fires more often on some distances than others whatever the attention does (the determiner of a noun
    sits a word or two before it, a repeated word far back), so the chance rate is **distance-matched**: the
    rule applied to every pair ``(t, t - d)`` of the same readings at the distance ``d`` of each highlighted pair,
    i.e. the all-pairs rate at ``d`` weighted by how many highlighted pairs lie at ``d``:
    ``chance = sum_d n_d * r_d / sum_d n_d``, ``r_d`` = labelled pairs / pairs at distance ``d`` (pairs whose
    attended token is a boundary are none, as for the highlights). Enrichment = observed / chance: about 1
    when attention picks pairs the rule labels no more often than their distance alone predicts.

    The interval of observed - chance is a percentile bootstrap (``resamples`` draws, ``seed``) over the readings'
    ``unit``s (documents: the unit the corpus split samples; sentences where there are none), both rates
    recomputed in each draw; none with a single unit. Cost: the rules run on every highlighted pair and, per distance, on all pairs at
    that distance or on an evenly spaced sample of at least :data:`CHANCE_MIN_PAIRS` and
    :data:`CHANCE_PAIRS_PER_HIGHLIGHT` per highlighted pair there (every k-th pair at ``d``, the readings taken in
    order): linear in the highlights. ``rules``: label -> rule (default the four of this module; a test passes its own).
    ``collocations``: as :func:`label_cases`.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie between 0 and 1, not {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, not {resamples}")
    rules = RULES if rules is None else rules
    labels = tuple(rules)
    readings = list(readings)
    collocations = collocations if collocations is not None else load_collocations()
    sentences = [_Sentence(list(r.words), None if r.tags is None else list(r.tags), collocations) for r in readings]
    units = {u: k for k, u in enumerate(dict.fromkeys(r.unit for r in readings))}
    distances = sorted({t - a for r in readings for t, a in r.pairs})
    if not distances:
        return {}
    col = {d: j for j, d in enumerate(distances)}
    shape = (len(units), len(distances))
    highlighted, pairs = np.zeros(shape), np.zeros(shape)  # [U, D]
    labelled = np.zeros((len(labels), *shape))  # [L, U, D] pairs at d the rule labels
    observed = np.zeros((len(labels), len(units)))  # [L, U] highlighted pairs the rule labels
    for r, s in zip(readings, sentences, strict=True):
        u = units[r.unit]
        for t, a in r.pairs:
            highlighted[u, col[t - a]] += 1
            for label in _labels(s, t, a, rules):
                observed[labels.index(label), u] += 1
    per_distance = highlighted.sum(0)  # [D]
    for j, d in enumerate(distances):
        total = sum(max(0, len(r.words) + 1 - d) for r in readings)
        stride = max(1, math.ceil(total / max(CHANCE_MIN_PAIRS, CHANCE_PAIRS_PER_HIGHLIGHT * per_distance[j])))
        seen = 0  # pairs at d enumerated so far, over the readings in order: every stride-th is evaluated
        for r, s in zip(readings, sentences, strict=True):
            u = units[r.unit]
            for t in range(d + (-seen) % stride, len(r.words) + 1, stride):
                if r.words[t - d] == BOUNDARY:
                    continue
                pairs[u, j] += 1
                for label in _labels(s, t, t - d, rules):
                    labelled[labels.index(label), u, j] += 1
            seen += max(0, len(r.words) + 1 - d)
    all_rates = labelled.sum(1) / np.maximum(pairs.sum(0), 1)  # [L, D] the rule's rate at each distance

    def rates(h, m, p, o):  # h, m [..., D]; p [L, ..., D]; o [L, ...] -> observed, chance [L, ...]
        n = h.sum(-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            # a draw without a sampled pair at d (but a highlight there): the rate of all draws
            rate = np.where(m > 0, p / np.where(m > 0, m, 1), all_rates.reshape(len(labels), *[1] * (m.ndim - 1), -1))
            return o / n, (rate * h).sum(-1) / n

    obs, chance = rates(per_distance, pairs.sum(0), labelled.sum(1), observed.sum(1))  # [L]
    draws = np.random.default_rng(seed).multinomial(len(units), np.full(len(units), 1 / len(units)), size=resamples)
    obs_b, chance_b = rates(draws @ highlighted, draws @ pairs, np.einsum("bu,lud->lbd", draws, labelled),
                            observed @ draws.T)  # [L, B]
    lows, highs = np.nanquantile(obs_b - chance_b, [(1 - confidence) / 2, (1 + confidence) / 2], axis=1)  # [L]
    if len(units) < 2:  # resampling one unit draws it every time: no interval
        lows = highs = [None] * len(labels)
    n = int(per_distance.sum())
    return {label: LabelChance(
        label, n, int(observed[k].sum()), float(obs[k]), float(chance[k]),
        float(obs[k] / chance[k]) if chance[k] > 0 else None, _float(lows[k]), _float(highs[k]), len(units), unit,
        int(pairs.sum()), tuple((d, int(per_distance[j]), float(all_rates[k, j])) for j, d in enumerate(distances)))
        for k, label in enumerate(labels)}


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
    # label -> its rate against the distance-matched chance rate (LabelChance.to_dict(); empty: no pairs)
    chance: dict[str, dict] = field(default_factory=dict)

    def chance_of(self) -> dict[str, LabelChance]:
        """:attr:`chance` as :class:`LabelChance` objects."""
        return {label: LabelChance.from_dict(doc) for label, doc in self.chance.items()}

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
    ``target``, ``slot`` and ``token`` are the passage's (as :func:`vizlm.inspect.analysis.analyze` numbers a
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

    Every sentence is analysed like :func:`vizlm.inspect.analysis.analyze_tokens` does (with
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
    (:mod:`vizlm.inspect.cache`, keyed by the checkpoint's and the split's checksums and every
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
    sizes = document_sizes(ids[:n])
    doc_of = np.repeat(np.arange(len(sizes)), sizes)  # [n] the document of each sentence: the bootstrap's unit
    readings_seen: list[LabelReading] = []
    if document:  # running text: each document analysed whole, its cases crossing sentence boundaries
        readings = _documents(ckpt, sentences[:n], ids[:n], originals, tags, candidates)
    else:
        readings = analyze_batch(ckpt, sentences[:n], originals, tags, effects="slots", effect_pairs=candidates)
    for first, sa in readings:
        analysed += len(sa.boundaries) + 1
        sentence = sa.sentence_of()  # [T]
        where = (first, sa.boundaries) if document else sa.text  # what the example needs of its text
        cases = label_cases(sa, threshold, top_k, collocations=collocations)
        tags = _rule_tags(sa)
        readings_seen.append(LabelReading(tuple(sa.norms), None if tags is None else tuple(tags),
                                          tuple((case.target, case.token) for case in cases), int(doc_of[first])))
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
    chance = label_rates_vs_chance(readings_seen, collocations=collocations,
                                   unit="documents" if any(size > 1 for size in sizes) else "sentences")
    return CaseReport(ckpt.label, source, threshold, top_k, analysed, pairs, labelled, counts, examples, notes, rank,
                      mean_effect, {label: c.to_dict() for label, c in chance.items()})
