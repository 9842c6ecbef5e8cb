"""The four rules that label an attention highlight, and what each label means.

The AMSRN paper (Liu & Lee) reads its attention maps by hand and finds four
patterns when a word gets a large weight while another is predicted. This module
turns them into explicit, documented rules over a pair (row ``t``, attended token ``a``) of
a reading's words and tags (:class:`TaggedWords`). :func:`apply_rules` is the one place
they are applied: to the highlights (:func:`vizlm.inspect.cases.label_cases`) and to the
chance baseline's pairs (:mod:`vizlm.inspect.case_chance`) alike. Each label comes with an
evidence string saying which rule fired and on what.

Notation: the target is ``w = tokens[t]`` (row ``t`` predicts it), the attended
word is ``v = tokens[a]`` (slot ``a + 2``), ``d = t - a`` words apart. Because the
current word ``tokens[t-1]`` is the query and not in memory, ``d >= 2``. The row
that predicts ``</s>`` gets no labels. Tags are simplified Brown tags
(:func:`vizlm.data.tagger.simplify_tag`): the gold tags of a Brown sentence, else the
output of :func:`vizlm.data.tagger.tag_tokens` (the bundled HMM tagger). Rules that need tags are
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
they can miss dependencies and can fire on coincidences. Changing a rule changes the stored
corpus reports: raise :data:`vizlm.inspect.case_gallery.CASES_VERSION`.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from vizlm.data.resources import Collocations
from vizlm.data.text import NUMBER
from vizlm.inspect.choices import CASE_LABEL_DESCRIPTIONS as LABEL_DESCRIPTIONS  # label -> what its rule checks
from vizlm.inspect.choices import CASE_LABELS as LABELS
from vizlm.inspect.reading import BOUNDARY

__all__ = ["LABELS", "LABEL_DESCRIPTIONS", "RULES", "WITHIN_SENTENCE", "TaggedWords", "apply_rules", "stem"]

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


class TaggedWords:
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


# --------------------------------------------------------------------------- rules
def _trigger(s: TaggedWords, t: int, a: int) -> str | None:
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


def _name_gender(s: TaggedWords, a: int) -> str | None:
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


def _causal_ok(s: TaggedWords, i: int, pattern: tuple[str, ...], t: int) -> bool:
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


def _clause_end(s: TaggedWords, k: int) -> int:
    """The end (exclusive) of the clause that starts at token ``k``: the first of :data:`_CLAUSE_END`, at most
    :data:`CAUSAL_SPAN` words on."""
    for j in range(k, min(len(s.words), k + CAUSAL_SPAN)):
        if s.words[j] in _CLAUSE_END:
            return j
    return min(len(s.words), k + CAUSAL_SPAN)


def _causal_sides(s: TaggedWords, i: int, e: int) -> tuple[range, range] | None:
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


def _causal(s: TaggedWords, t: int, a: int) -> str | None:
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


def _phrase(s: TaggedWords, t: int, a: int) -> str | None:
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


def _no_verb_between(s: TaggedWords, a: int, t: int) -> bool:
    return all(s.words[j] != "to" and not _base(s.tag(j)).startswith(_VERBAL) for j in range(a + 1, t))


def _blocks_subject(s: TaggedWords, j: int) -> bool:
    """A nearer subject pronoun or a finite verb at ``j``: the word before it is not the subject of a verb after."""
    return s.words[j] in _SUBJECT_PRONOUNS or _base(s.tag(j)) in _FINITE


def _subject_reaches(s: TaggedWords, a: int, t: int) -> int | None:
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


def _agreement(s: TaggedWords, t: int, a: int) -> str | None:
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


def _determiner(s: TaggedWords, t: int, a: int) -> str | None:
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


def _auxiliary(s: TaggedWords, t: int, a: int) -> str | None:
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


def _grammar(s: TaggedWords, t: int, a: int) -> str | None:
    found = [ev for rule in (_agreement, _determiner, _auxiliary) if (ev := rule(s, t, a))]
    return "; ".join(found) or None


RULES = {"trigger": _trigger, "causal": _causal, "phrase": _phrase, "grammar": _grammar}
assert tuple(RULES) == LABELS
WITHIN_SENTENCE = frozenset({"phrase", "grammar"})  # rules about one sentence: not across a boundary


def apply_rules(s: TaggedWords, t: int, a: int, rules: dict = RULES) -> dict[str, str]:
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

