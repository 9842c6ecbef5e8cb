"""The cases over a corpus split and the Cases gallery.

:func:`corpus_cases` labels the highlights of every sentence of a split (or of given sentences;
documents read as running text by a document model) with :func:`vizlm.inspect.cases.label_cases`,
counts the labels, sets each against chance (:func:`vizlm.inspect.case_chance.label_rates_vs_chance`)
and keeps the strongest examples of each, ranked by weight, effect, weight above uniform or
attribution (:data:`RANKINGS`; :func:`attribute_cases`); a split's report is cached.
:func:`gallery_order` lets several models take turns in the gallery; ``GALLERY_*`` are the Cases
page's defaults. :func:`by_effect` ranks the cases of one analysis by their slot effect.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import torch

from vizlm.core.errors import InputError
from vizlm.data.folder import document_sizes
from vizlm.data.registry import load_corpus
from vizlm.data.resources import load_collocations
from vizlm.data.text import detokenize
from vizlm.inspect.analysis import (
    MIN_TOP_K_WEIGHT,
    SentenceAnalysis,
    analyze_batch,
    analyze_sentences,
    check_head,
    view_label,
)
from vizlm.inspect.attribution import attribute
from vizlm.inspect.cache import cached, checkpoint_digest
from vizlm.inspect.case_chance import LabelChance, LabelReading, label_rates_vs_chance
from vizlm.inspect.case_rules import LABELS
from vizlm.inspect.cases import Case, label_cases, rule_tags
from vizlm.inspect.choices import CASE_RANK_FIELDS as RANK_FIELDS  # how corpus_cases picks its examples
from vizlm.inspect.choices import CASE_RANKINGS as RANKINGS
from vizlm.inspect.highlight import DEFAULT, Setting, Share, TopK
from vizlm.inspect.highlight import fields as setting_fields
from vizlm.modeling.checkpoint import Checkpoint

__all__ = ["CASES_VERSION", "GALLERY_EXAMPLES", "GALLERY_LIMIT", "GALLERY_RANK", "RANKINGS", "RANK_FIELDS",
           "CaseReport", "attribute_cases", "by_effect", "corpus_cases", "gallery_order"]

ATTRIBUTION_METHOD = "gradient-x-input"  # what rank="attribution" measures (vizlm.inspect.attribution.METHODS)
# The Cases page's defaults (the reports of the bundled checkpoints at these ship with them: scripts/ship_stats.py)
GALLERY_RANK, GALLERY_LIMIT, GALLERY_EXAMPLES = "above_uniform", 1000, 8
CASES_VERSION = 2  # in the cache key of a corpus report: raise it when the rules or the report change


def attribute_cases(ckpt: Checkpoint, sa: SentenceAnalysis, cases: list[Case]) -> list[Case]:
    """``cases`` (of ``sa``, an analysis of ``ckpt``) with their :attr:`Case.attribution_bits`: the attribution of
    each target's ``log2 P(word)`` to its attended word (:data:`ATTRIBUTION_METHOD`, gradient x input, over
    ``sa``'s reading: :func:`vizlm.inspect.attribution.attribute`). Memory slot ``j`` holds input position ``j - 1``
    (self-attention's slot ``j`` is position ``j``), so a case's is column ``slot - shift`` of its target's row. One
    batched gradient pass per reading (per :data:`vizlm.inspect.attribution_methods.ROW_BLOCK` targets); none when
    there are no cases. Sets the field in place."""
    if cases:
        bits = attribute(ckpt, sa, ATTRIBUTION_METHOD).bits  # (T, T): predicted word r, input position p
        for case in cases:
            case.attribution_bits = float(bits[case.target, case.slot - sa.shift])
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
               tags: list[list[str]] | None, candidates, head: tuple[int, int | None] | None = None):
    """``(index of its first sentence, analysis)`` of every document of ``sentences`` (by ``ids``) read
    whole as running text, with the slot effects of the ``candidates`` pairs."""
    first = 0
    for size in document_sizes(ids):
        part = slice(first, first + size)
        if any(sentences[part]):
            yield first, analyze_sentences(
                ckpt, sentences[part], None if originals is None else originals[part], None, None,
                None if tags is None else tags[part], top_k=0, max_effect_pairs=None, max_tokens=None,
                effect_pairs=candidates, head=head)
        first += size


def _sentences_alone(ckpt: Checkpoint, sentences: list[list[str]], originals: list[list[str]] | None,
                     tags: list[list[str]] | None, candidates, head: tuple[int, int | None]):
    """``(index, analysis)`` of every non-empty sentence read alone by a Transformer, showing ``head``."""
    for i, sentence in enumerate(sentences):
        if sentence:
            yield i, analyze_sentences(ckpt, [sentence], None if originals is None else [originals[i]], None, None,
                                       None if tags is None else [tags[i]], top_k=0, max_effect_pairs=None,
                                       effect_pairs=candidates, head=head)


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
    setting: Setting = DEFAULT,
    limit: int | None = None,
    examples_per_label: int = 10,
    *,
    sentences: list[list[str]] | None = None,
    ids: list[str] | None = None,
    tags: list[list[str]] | None = None,
    data_dir: Path | None = None,
    rank: str = "weight",
    use_cache: bool = True,
    head: tuple[int, int | None] | None = None,
) -> CaseReport:
    """Label the highlights (``setting``: :mod:`vizlm.inspect.highlight`) of ``ckpt`` on a corpus split (or on given
    ``sentences``).

    Every sentence is analysed like :func:`vizlm.inspect.analysis.analyze_tokens` does (with
    the gold tags where the corpus has them; forward passes batched; the slot effect of
    every highlighted pair) and labelled by :func:`~vizlm.inspect.cases.label_cases`. ``limit`` keeps the
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
    head = _transformer_head(ckpt, head)
    if sentences is not None:
        return _case_report(ckpt, "text", sentences, ids, tags, None, limit, setting, examples_per_label, rank, head)
    if corpus is None:
        raise ValueError("give a corpus name or sentences")
    c = load_corpus(corpus, split, data_dir)

    def compute() -> dict:
        return _case_report(ckpt, f"{corpus}/{split}", c.sentences, c.ids, c.tags, c.originals, limit, setting,
                            examples_per_label, rank, head).to_dict()

    threshold, top_k = setting_fields(setting)
    parts = {"kind": "cases", "version": CASES_VERSION, "checkpoint": checkpoint_digest(ckpt), "corpus": c.checksum,
             "context": ckpt.model.config.context, "threshold": threshold, "top_k": top_k,
             "limit": None if limit is None or limit >= len(c.sentences) else limit,
             "examples": examples_per_label, "rank": rank, **({} if head is None else {"head": list(head)})}
    return CaseReport.from_dict({**cached(parts, compute, use_cache), "model": _label(ckpt, head)})


def _transformer_head(ckpt: Checkpoint, head: tuple[int, int | None] | None) -> tuple[int, int | None] | None:
    """The self-attention view a Transformer's cases label (default: the last layer's heads together, as the
    analysis shows it), counted from 0; None for another model (which takes none)."""
    if not getattr(ckpt.model, "self_attention", False):
        if head is not None:
            raise InputError(f"{ckpt.label} has no self-attention heads to choose from")
        return None
    L, H = ckpt.model.config.layers, ckpt.model.config.heads
    return check_head(L, H, *((-1, None) if head is None else head), ckpt.label)


def _label(ckpt: Checkpoint, head: tuple[int, int | None] | None) -> str:
    """The report's model: the checkpoint, and a Transformer's layer and head ("name · layer 2, head 1")."""
    return view_label(ckpt.label, head, ckpt.model.config.heads if head is not None else 0)


def _case_report(ckpt: Checkpoint, source: str, sentences: list[list[str]], ids: list[str] | None,
                 tags: list[list[str]] | None, originals: list[list[str]] | None, limit: int | None,
                 setting: Setting, examples_per_label: int, rank: str,
                 head: tuple[int, int | None] | None = None) -> CaseReport:
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
    attending = ckpt.has_attention or head is not None
    if not attending:
        notes.append(f"{ckpt.label} has no attention: there are no highlights to label")
        n = 0
    # slot effects of the pairs that can be cases: word slots (>= 2; self-attention: >= 1, slot 0 reads <s>) with
    # the weight of a highlight
    least = (setting.share if isinstance(setting, Share) else MIN_TOP_K_WEIGHT if isinstance(setting, TopK)
             else math.inf)
    first_word = 2 if head is None else 1

    def candidates(att: torch.Tensor) -> torch.Tensor:
        return (att >= least) & (torch.arange(att.shape[-1], device=att.device) >= first_word)

    document = attending and ckpt.model.config.context == "document"
    sizes = document_sizes(ids[:n])
    doc_of = np.repeat(np.arange(len(sizes)), sizes)  # [n] the document of each sentence: the bootstrap's unit
    readings_seen: list[LabelReading] = []
    if document:  # running text: each document analysed whole, its cases crossing sentence boundaries
        readings = _documents(ckpt, sentences[:n], ids[:n], originals, tags, candidates, head)
    elif head is not None:  # a Transformer reading each sentence alone
        readings = _sentences_alone(ckpt, sentences[:n], originals, tags, candidates, head)
    else:
        readings = analyze_batch(ckpt, sentences[:n], originals, tags, effects="slots", effect_pairs=candidates)
    for first, sa in readings:
        analysed += len(sa.boundaries) + 1
        sentence = sa.sentence_of()  # [T]
        where = (first, sa.boundaries) if document else sa.text  # what the example needs of its text
        cases = label_cases(sa, setting, collocations=collocations)
        tags = rule_tags(sa)
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
    return CaseReport(_label(ckpt, head), source, *setting_fields(setting), analysed, pairs, labelled, counts, examples, notes, rank,
                      mean_effect, {label: c.to_dict() for label, c in chance.items()})
