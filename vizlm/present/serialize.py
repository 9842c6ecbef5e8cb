"""One analysis as JSON, and back: the one serialiser.

:func:`analysis_dict` is the only route from a :class:`~vizlm.inspect.analysis.SentenceAnalysis` to a
dict: the CLI's ``analyze --json``, ``export --format json``, the app's page and its JSON
download and :meth:`vizlm.Analysis.save` all write it. :func:`analysis_from_dict` reads it back
(also the exports of earlier versions, which lack the few exact fields added since), so a saved
analysis can be loaded, shown and exported again without the model.

The document (JSON types only, no NaN: :func:`json_safe`)::

    format, format_version          "vizlm-analysis", 1
    model, text, context            checkpoint label, the text read, "sentence" | "document"
    tokens, normalized, unk, offsets, tags   [n] per token (tags: None without a tagger)
    slots                           [S] label of each memory slot
    sentences, documents, breaks    counts; token indices of the boundaries that end a document
    perplexity, truncated, notes
    threshold, top_k                the highlight setting of "highlights" and "cases" (vizlm.inspect.highlight.fields)
    effects                         sentence-level effect summary (None without attention)
    targets                         [T] one entry per predicted word:
        index, word, prob, logprob, surprisal_bits, top [{word, prob}],
        attention [r + 1] (slots 0..r), highlights [{slot, word, token, weight, effect_bits}],
        gate_mean, gates [d] (AMSRN), start_weight, read_effect_bits, prob_without_read,
        effects_bits [r + 1] (slot effects), cases [{slot, attended, labels, evidence, ...}],
        heads [layers][heads][r + 1] (self-attention: every layer's and head's row)
    self_attention, head            a Transformer's layout (slot j = input j) and the (layer, head) "attention"
                                    shows, head null: the mean over the layer's heads (absent: recurrent)

Every number in bits is also kept in nats in memory (``read_effect``, ``slot_effects``); a loaded
analysis gets them back as bits x ln 2 (float64 rounding: within 1e-12 relative).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from vizlm.inspect.analysis import LN2, SentenceAnalysis
from vizlm.inspect.highlight import DEFAULT, Setting, fields
from vizlm.present.word_view import cases_by_target
from vizlm.core.errors import VizlmError

FORMAT = "vizlm-analysis"
FORMAT_VERSION = 1


class AnalysisFileError(VizlmError, ValueError):
    """A JSON document that is not a vizlm analysis (or not one this version can read)."""


def json_safe(obj: object) -> object:
    """Plain JSON types only: numpy scalars/arrays unwrapped, NaN and infinities as None."""
    kind = type(obj)  # the plain types first, by identity: a passage's analysis has 30,000 values
    if kind is str or kind is int or kind is bool or obj is None:
        return obj
    if kind is float:
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        if all(type(v) is float for v in obj):  # fast path: a row of weights (a 400-word passage has 80k)
            return [v if math.isfinite(v) else None for v in obj]
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [json_safe(v) for v in obj.tolist()]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, pd.Timestamp):
        return obj.isoformat()
    if obj is pd.NA or obj is pd.NaT:
        return None
    return str(obj)


def _finite(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def analysis_dict(sa: SentenceAnalysis, setting: Setting = DEFAULT, cases: bool = True) -> dict:
    """The JSON document of one analysis (the module docstring lists its keys), highlights and, unless
    ``cases=False``, case labels for the highlight ``setting``. JSON types only, no NaN."""
    hl = sa.highlighted(setting)
    case_map = cases_by_target(sa, setting) if cases else {}
    threshold, top_k = fields(setting)
    read_bits, slot_bits = sa.read_effect_bits, sa.slot_effect_bits
    # plain floats, row by row (numpy scalars cost 10x in a passage's 400 rows)
    probs, surprisal, top_probs = sa.probs.tolist(), sa.surprisal.tolist(), sa.top_probs.tolist()
    logprobs = sa.logprobs.tolist()
    gates = None if sa.gates is None else sa.gates.tolist()
    gate_means = None if sa.gates is None else sa.gates.mean(1).tolist()
    with np.errstate(over="ignore"):  # P(word) without the read of a model that gives it next to none
        without = None if sa.read_effect is None else np.exp(sa.logprobs - sa.read_effect).tolist()
    starts = sa.first_rows().tolist()  # each row's start slot
    heads = None if sa.heads is None else sa.heads.transpose(2, 0, 1, 3)  # (T, L, H, S)
    targets = []
    for r, word in enumerate(sa.targets):
        targets.append({
            "index": r,
            "word": word,
            "prob": probs[r],
            "logprob": logprobs[r],
            "surprisal_bits": surprisal[r],
            "top": [{"word": w, "prob": p} for w, p in zip(sa.top_words[r], top_probs[r])],
            "attention": None if sa.attention is None else sa.attention[r, : r + 1].tolist(),
            "highlights": [h.to_dict() for h in hl[r]],
            "gate_mean": None if gate_means is None else gate_means[r],
            "gates": None if gates is None else gates[r],
            # the start slot is the zero start state: weight there reads nothing ("attention off"); self-attention
            # has none (its first slot is the <s> it read)
            "start_weight": None if sa.attention is None or sa.self_attention else float(sa.attention[r, starts[r]]),
            # effects in bits: log2 P(word) with the read minus without; per slot, minus with the slot dropped
            "read_effect_bits": None if read_bits is None else _finite(read_bits[r]),
            "prob_without_read": None if without is None else without[r],
            "effects_bits": None if slot_bits is None else [_finite(e) for e in slot_bits[r, : r + 1]],
            "cases": case_map.get(r, []),
            **({} if heads is None else {"heads": heads[r, :, :, : r + 1].tolist()}),
        })
    return json_safe({
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model": sa.model,
        "text": sa.text,
        "tokens": list(sa.tokens),
        "normalized": list(sa.norms),
        "unk": list(sa.unk),
        "offsets": [list(o) for o in sa.offsets],
        "tags": None if sa.tags is None else list(sa.tags),
        "slots": sa.slot_labels,
        "context": sa.context,
        "sentences": len(sa.boundaries) + 1,
        "documents": len(sa.breaks) + 1,
        "breaks": list(sa.breaks),
        "perplexity": sa.perplexity,
        "truncated": sa.truncated,
        "notes": list(sa.notes),
        "threshold": threshold,
        "top_k": top_k,
        "effects": sa.effect_summary(),
        **({} if sa.heads is None else {"self_attention": True, "head": list(sa.head)}),
        "targets": targets,
    })


def _floats(values, what: str) -> list[float]:
    """Numbers of a JSON list, None -> NaN."""
    if not isinstance(values, list):
        raise AnalysisFileError(f"{what} is not a list of numbers")
    out = []
    for v in values:
        if v is None:
            out.append(math.nan)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append(float(v))
        else:
            raise AnalysisFileError(f"{what} holds {v!r}, not a number")
    return out


def _strings(values, what: str, n: int | None = None) -> list[str]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise AnalysisFileError(f"{what} is not a list of strings")
    if n is not None and len(values) != n:
        raise AnalysisFileError(f"{what} has {len(values)} entries; expected {n}")
    return list(values)


def _field(doc: dict, key: str, kind: type | tuple, what: str = "the analysis"):
    if key not in doc:
        raise AnalysisFileError(f"{what} has no {key!r}")
    value = doc[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise AnalysisFileError(f"{what}: {key!r} is {type(value).__name__}, not what vizlm writes")
    return value


def analysis_from_dict(doc: object) -> SentenceAnalysis:
    """The analysis an :func:`analysis_dict` document holds; :class:`AnalysisFileError` (a
    :class:`~vizlm.core.errors.VizlmError`) for anything else, with what is wrong."""
    if not isinstance(doc, dict):
        raise AnalysisFileError("a vizlm analysis is a JSON object with 'tokens' and 'targets'")
    if doc.get("format", FORMAT) != FORMAT:
        raise AnalysisFileError(f"this is a {doc.get('format')!r} document, not a vizlm analysis")
    version = doc.get("format_version", FORMAT_VERSION)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise AnalysisFileError(f"analysis format version {version!r}; this vizlm reads up to {FORMAT_VERSION}")
    tokens = _strings(_field(doc, "tokens", list), "'tokens'")
    n = len(tokens)
    norms = _strings(doc.get("normalized", tokens), "'normalized'", n)
    unk = _field(doc, "unk", list)
    if len(unk) != n or not all(isinstance(u, bool) for u in unk):
        raise AnalysisFileError(f"'unk' must be {n} true/false values")
    offsets = _field(doc, "offsets", list)
    try:
        offsets = [(int(a), int(b)) for a, b in offsets]
    except (TypeError, ValueError):
        raise AnalysisFileError("'offsets' must be [start, end] pairs") from None
    if len(offsets) != n:
        raise AnalysisFileError(f"'offsets' has {len(offsets)} entries; expected {n}")
    targets = _field(doc, "targets", list)
    T = n + 1
    if len(targets) != T:
        raise AnalysisFileError(f"'targets' has {len(targets)} entries; a text of {n} tokens has {T}")
    rows = [t if isinstance(t, dict) else {} for t in targets]
    words = _strings([t.get("word") for t in rows], "the targets' 'word'")
    logprobs = np.array([t["logprob"] if isinstance(t.get("logprob"), (int, float)) else
                         math.log(t["prob"]) if isinstance(t.get("prob"), (int, float)) and t["prob"] > 0 else -math.inf
                         for t in rows], dtype=float)
    try:
        top = [t.get("top") or [] for t in rows]
        top_words = [[str(x["word"]) for x in row] for row in top]
        k = max((len(row) for row in top), default=0)
        top_probs = np.array([_floats([x["prob"] for x in row], "'top'") for row in top], dtype=float) \
            if all(len(row) == k for row in top) else None
    except (TypeError, KeyError):
        raise AnalysisFileError("a target's 'top' is not a list of {word, prob}") from None
    if top_probs is None:
        raise AnalysisFileError("the targets' 'top' lists differ in length")
    top_probs = top_probs.reshape(T, k)
    attention = _matrix([t.get("attention") for t in rows], "attention", T)
    slot_bits = _matrix([t.get("effects_bits") for t in rows], "effects_bits", T)
    reads = [t.get("read_effect_bits") for t in rows]
    read_effect = None if attention is None or all(v is None for v in reads) else \
        np.array(_floats(reads, "'read_effect_bits'")) * LN2
    gate_rows = [t.get("gates") for t in rows]
    gates = None
    if all(g is not None for g in gate_rows):
        gates = np.array([_floats(g, "'gates'") for g in gate_rows], dtype=float)
        if gates.ndim != 2:
            raise AnalysisFileError("the targets' 'gates' differ in length")
    tags = doc.get("tags")
    breaks = doc.get("breaks") or []
    if not isinstance(breaks, list) or not all(isinstance(b, int) and 0 <= b < n for b in breaks):
        raise AnalysisFileError("'breaks' must be token indices")
    context = doc.get("context", "sentence")
    if context not in ("sentence", "document"):
        raise AnalysisFileError(f"'context' is {context!r}, not 'sentence' or 'document'")
    notes = doc.get("notes") or []
    heads, head = _heads(doc, rows, T)
    sa = SentenceAnalysis(
        model=str(_field(doc, "model", str)),
        text=str(_field(doc, "text", str)),
        tokens=tokens,
        norms=norms,
        offsets=offsets,
        unk=list(unk),
        targets=words,
        logprobs=logprobs,
        top_words=top_words,
        top_probs=top_probs,
        attention=attention,
        gates=gates,
        tags=None if tags is None else _strings(tags, "'tags'", n),
        truncated=int(doc.get("truncated") or 0),
        notes=_strings(notes, "'notes'"),
        read_effect=read_effect,
        slot_effects=None if slot_bits is None else slot_bits * LN2,
        context=context,
        breaks=list(breaks),
        self_attention=heads is not None,
        heads=heads,
        head=head,
    )
    return sa


def _heads(doc: dict, rows: list[dict], T: int) -> tuple[np.ndarray | None, tuple[int, int | None] | None]:
    """``(heads [L, H, T, S], (layer, head))`` of a self-attention analysis; ``(None, None)`` for another."""
    if not doc.get("self_attention"):
        return None, None
    head = doc.get("head")
    if not (isinstance(head, list) and len(head) == 2 and type(head[0]) is int
            and (head[1] is None or type(head[1]) is int)):
        raise AnalysisFileError("'head' must be [layer, head] (head null: the mean over the layer's heads)")
    first = rows[0].get("heads") if rows else None
    if not (isinstance(first, list) and first and isinstance(first[0], list) and first[0]):
        raise AnalysisFileError("a self-attention analysis needs every target's 'heads' [layers][heads][slots]")
    L, H = len(first), len(first[0])
    if not (0 <= head[0] < L and (head[1] is None or 0 <= head[1] < H)):
        raise AnalysisFileError(f"'head' {head} is not one of the {L} layers x {H} heads")
    out = np.zeros((L, H, T, T))
    for r, row in enumerate(rows):
        layers = row.get("heads")
        if not (isinstance(layers, list) and len(layers) == L and all(isinstance(x, list) and len(x) == H for x in layers)):
            raise AnalysisFileError(f"target {r}'s 'heads' must be {L} layers of {H} heads")
        for i, per_head in enumerate(layers):
            for k, values in enumerate(per_head):
                values = _floats(values, f"target {r}'s 'heads'")
                if len(values) != r + 1:
                    raise AnalysisFileError(f"target {r}'s 'heads' has {len(values)} values; row {r} has {r + 1} slots")
                out[i, k, r, : r + 1] = values
    return out, (head[0], head[1])


def _matrix(rows: list, what: str, T: int) -> np.ndarray | None:
    """[T, T] from the targets' lower-triangular rows (row r: slots 0..r); None when every row is None."""
    if all(r is None for r in rows):
        return None
    out = np.zeros((T, T))
    for r, row in enumerate(rows):
        values = _floats(row, f"target {r}'s {what!r}")
        if len(values) != r + 1:
            raise AnalysisFileError(f"target {r}'s {what!r} has {len(values)} values; row {r} has {r + 1} slots")
        out[r, : r + 1] = values
    return out
