"""The API's result types: one model on one text (:class:`Analysis`, :class:`Attribution`, :class:`View`), two
models over a corpus (:class:`Comparison`) and attention by position (:class:`Positions`). Each holds what the library
computed, displays itself in a notebook, gives tidy frames, charts and files; :mod:`vizlm.api` makes them.
Shapes: ``n`` tokens, ``T = n + 1`` predicted words (rows, ``</s>`` last), ``S = T`` memory slots.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd

from vizlm.core import files
from vizlm.core.errors import InputError
from vizlm.inspect import corpus_stats as stats
from vizlm.inspect.analysis import SentenceAnalysis, distance
from vizlm.inspect.attribution import Attribution as _Attribution
from vizlm.inspect.highlight import DEFAULT, Setting, fields, setting
from vizlm.present import charts, export, heatmap, notebook, style
from vizlm.present.render import RenderError
from vizlm.present.serialize import AnalysisFileError, analysis_dict, analysis_from_dict
from vizlm.present.word_view import cases_by_target, default_target

MAX_ANALYSIS_BYTES = 512 * 2**20  # Analysis.load: a 400-word passage's JSON is ~10 MB
SVG_MAX_POINTS = 3_000  # a comparison's notebook view draws its scatter up to this many sentences


# --------------------------------------------------------------------------- checking arguments
def check_whole(value, name: str, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < low:
        raise InputError(f"{name} must be a whole number of at least {low}, not {value!r}")
    return int(value)


def check_measure(value) -> str:
    if value not in style.MEASURES:
        raise InputError(f"measure must be one of {', '.join(style.MEASURES)}, not {value!r}")
    return value


# --------------------------------------------------------------------------- one analysis
@dataclass(repr=False)
class Analysis(SentenceAnalysis):
    """One model on one text (:meth:`Model.analyze`), the result type of vizlm.

    Arrays (numpy, float64): ``logprobs`` / ``probs`` / ``surprisal`` [T] (nats, probability, bits);
    ``attention`` [T, S] (row ``r`` over slots ``0..r``, None without attention) with ``slot_labels``
    [S] and :attr:`slot_tokens` [S] (index into ``tokens``, -1 for ``<s>``); ``read_effect_bits`` [T]
    and ``slot_effect_bits`` [T, S] (NaN: not computed); ``gates`` [T, d] (AMSRN); ``top_words``
    (T lists of k words) and ``top_probs`` [T, k]. Lists: ``tokens`` / ``norms`` / ``offsets`` / ``unk`` [n],
    ``targets`` [T]. The same as tidy frames: :meth:`frame`, :meth:`attention_frame`, :meth:`cases`.

    A Transformer's self-attention: ``heads`` [layers, heads, T, S], slot ``j`` being input ``j`` (the word just read
    is the row's last slot); ``attention`` is one head's or a layer's mean over its heads (``head``, in words
    ``head_label``; by default the last layer's mean), and :meth:`at_head` shows another: every view, frame and
    export reads the head shown. :meth:`heads_frame` has them all.

    ``highlight``: the highlight setting (:mod:`vizlm.inspect.highlight`, made from ``threshold`` / ``top_k`` by
    :meth:`Model.analyze`) that :meth:`highlights`, :meth:`cases`, :meth:`to_dict` and the display use when not
    given another; each setting is computed once. The layers below take the setting as an argument: this class adds
    methods for people and overrides none of theirs.
    """

    highlight: Setting = DEFAULT

    @classmethod
    def of(cls, sa: SentenceAnalysis, highlight: Setting = DEFAULT) -> Analysis:
        """``sa`` as an :class:`Analysis` (its arrays shared, not copied)."""
        if isinstance(sa, cls) and sa.highlight == highlight:
            return sa
        shared = {f: getattr(sa, f) for f in SentenceAnalysis.__dataclass_fields__}
        return cls(**shared, highlight=highlight)

    @property
    def threshold(self) -> float | None:
        """The highlight setting's threshold (None in top-k mode)."""
        return fields(self.highlight)[0]

    @property
    def top_k(self) -> int | None:
        """The highlight setting's k (None in threshold mode)."""
        return fields(self.highlight)[1]

    def __repr__(self) -> str:
        what = "no attention" if self.attention is None else \
            f"self-attention {self.layers}x{self.heads_per_layer}, {self.head_label}" if self.heads is not None else \
            "slot effects" if self.slot_effects is not None else "attention"
        return (f"Analysis(model={self.model!r}, tokens={len(self.tokens)}, targets={len(self.targets)}, "
                f"perplexity={self.perplexity:.2f}, {what}, context={self.context!r})")

    def _setting(self, threshold, top_k) -> Setting:
        return setting(threshold, top_k, self.highlight)

    @property
    def slot_tokens(self) -> list[int]:
        """[S] the index into ``tokens`` of the word each memory slot holds (-1: a ``<s>`` slot)."""
        return [self.slot_token(j) for j in range(len(self.targets))]

    def default_target(self, threshold: float | None = None, top_k: int | None = None) -> int:
        """The word a view opens on: the first with a labelled case, else the last word before ``</s>``."""
        return default_target(self, self._setting(threshold, top_k))

    def highlights(self, threshold: float | None = None, top_k: int | None = None, rows=None):
        """Per predicted word (or per row of ``rows``), the memory slots with weight >= ``threshold`` or
        the ``top_k`` heaviest (:class:`vizlm.inspect.analysis.Highlight`: slot, word, token, weight,
        effect_bits), heaviest first; computed once per setting (default: the analysis's own)."""
        return self.highlighted(self._setting(threshold, top_k), rows=rows)

    def cases(self, threshold: float | None = None, top_k: int | None = None) -> pd.DataFrame:
        """The labelled cases of the highlights (:mod:`vizlm.inspect.cases`), one row per (target, attended slot,
        label): target, word, slot, attended, label, evidence, weight, effect_bits."""
        rows = [{"target": c["target"], "word": c["word"], "slot": c["slot"], "attended": c["attended"], "label": label,
                 "evidence": c["evidence"].get(label, ""), "weight": c["weight"], "effect_bits": c["effect"]}
                for _, cs in sorted(cases_by_target(self, self._setting(threshold, top_k)).items())
                for c in cs for label in c["labels"]]
        return pd.DataFrame(rows, columns=["target", "word", "slot", "attended", "label", "evidence", "weight",
                                           "effect_bits"])

    def frame(self) -> pd.DataFrame:
        """One row per predicted word (index: its row): word (predicted), token (its surface form,
        ``</s>`` last), current (the word just read), sentence, unk, prob, logprob, surprisal_bits,
        read_effect_bits, prob_without_read, start_weight (weight on the empty start slot), gate_mean,
        top_word (the most likely next word)."""
        T = len(self.targets)
        read = self.read_effect_bits
        with np.errstate(over="ignore"):
            without = None if self.read_effect is None else np.exp(self.logprobs - self.read_effect)
        frame = pd.DataFrame({
            "word": self.targets,
            "token": list(self.tokens[: T - 1]) + [self.targets[-1]],
            "current": self.input_labels,
            "sentence": self.sentence_of(),
            "unk": list(self.unk[: T - 1]) + [False],
            "prob": self.probs,
            "logprob": self.logprobs,
            "surprisal_bits": self.surprisal,
            "read_effect_bits": np.full(T, math.nan) if read is None else read,
            "prob_without_read": np.full(T, math.nan) if without is None else without,
            "start_weight": np.full(T, math.nan) if self.attention is None or self.self_attention else
            self.attention[np.arange(T), self.first_rows()],
            "gate_mean": np.full(T, math.nan) if self.gates is None else self.gates.mean(1),
            "top_word": [w[0] if w else None for w in self.top_words],
        })
        frame.index.name = "target"
        return frame

    def heads_frame(self) -> pd.DataFrame:
        """A Transformer's every layer and head, one row per (layer, head, target, slot) a row could attend to:
        layer and head (counted from 1, as the labels), target_index, target, slot, attended (the word read),
        distance (1 = the word just read) and weight. Empty for a model without self-attention."""
        columns = ["layer", "head", "target_index", "target", "slot", "attended", "distance", "weight"]
        if self.heads is None:
            return pd.DataFrame(columns=columns)
        L, H = self.heads.shape[:2]
        rows, slots = np.nonzero(self.allowed())
        n = len(rows)
        labels, targets = np.array(self.slot_labels, dtype=object), np.array(self.targets, dtype=object)
        return pd.DataFrame({
            "layer": np.repeat(np.arange(1, L + 1), H * n),
            "head": np.tile(np.repeat(np.arange(1, H + 1), n), L),
            "target_index": np.tile(rows, L * H),
            "target": np.tile(targets[rows], L * H),
            "slot": np.tile(slots, L * H),
            "attended": np.tile(labels[slots], L * H),
            "distance": np.tile(distance(self.slot_offsets()[rows, slots]), L * H),
            "weight": self.heads[:, :, rows, slots].reshape(-1),
        }, columns=columns)

    def attention_frame(self, threshold: float | None = None, top_k: int | None = None) -> pd.DataFrame:
        """Long form, one row per (predicted word, memory slot it could attend to), the rows of the CSV
        export (:func:`vizlm.present.export.analysis_records`): model, target_index, target, current, sentence,
        target_unk, prob, surprisal_bits, read_effect_bits, slot, attended, attended_token, weight,
        effect_bits, highlighted (by this setting). One row per word for a model without attention."""
        return pd.DataFrame(export.analysis_records(self, self._setting(threshold, top_k)))

    def to_dict(self, threshold: float | None = None, top_k: int | None = None, cases: bool = True) -> dict:
        """The JSON document the exports write (:func:`vizlm.present.serialize.analysis_dict`): JSON types only."""
        return analysis_dict(self, self._setting(threshold, top_k), cases=cases)

    @classmethod
    def from_dict(cls, doc: dict) -> Analysis:
        """The analysis a :meth:`to_dict` document holds (also an export of an earlier vizlm)."""
        sa = analysis_from_dict(doc)
        try:
            highlight = setting(doc.get("threshold"), doc.get("top_k"))
        except InputError as exc:
            raise AnalysisFileError(f"the analysis's highlight setting: {exc}") from None
        return cls.of(sa, highlight)

    def save(self, path: str | os.PathLike, force: bool = False) -> Path:
        """Write the JSON of :meth:`to_dict` (what ``vizlm export --format json`` writes) to ``path``,
        atomically; an existing file with other content is replaced only with ``force``."""
        return files.write_bytes(path, export.export_analysis(self, "json", self.highlight), force=force,
                                 how="pass force=True")

    @classmethod
    def load(cls, path: str | os.PathLike) -> Analysis:
        """An analysis saved by :meth:`save` (or a JSON export of the CLI or the app)."""
        path = Path(path)
        try:
            info = path.stat()
            if not stat.S_ISREG(info.st_mode):
                raise AnalysisFileError(f"{path} is not a file")
            if info.st_size > MAX_ANALYSIS_BYTES:
                raise AnalysisFileError(f"{path} is {info.st_size / 2**20:,.0f} MB; an analysis is at most "
                                        f"{MAX_ANALYSIS_BYTES // 2**20} MB")
            raw = path.read_bytes()
        except OSError as exc:
            raise AnalysisFileError(f"{path}: {exc.strerror or exc}") from None
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise AnalysisFileError(f"{path} is not JSON ({exc})") from None
        return cls.from_dict(doc)

    def export(self, path: str | os.PathLike, format: str | None = None, force: bool = False,
               measure: str = "weight", target: int | str | None = None) -> Path:
        """Write the analysis as ``png`` / ``svg`` / ``html`` (the heat map; ``target``: outline that word,
        and draw the rows around it when the text is long, as the app does) or ``csv`` / ``json`` (every
        number); ``format`` defaults to the file's suffix. Refuses to replace another file unless ``force``."""
        fmt = (format or Path(path).suffix.lstrip(".")).lower()
        if fmt not in export.FORMATS:
            raise InputError(f"unknown export format {fmt or Path(path).name!r}; choose one of: {', '.join(export.FORMATS)}")
        files.check_replace(path, None, force, how="pass force=True")
        row = None if target is None else self.target_index(target)
        rows = heatmap.heatmap_rows(self, row) if row is not None and len(self.targets) > style.WINDOW_ROWS else None
        data = export.export_analysis(self, fmt, self.highlight, measure=check_measure(measure),
                                      rows=rows, selected=row)
        return files.write_bytes(path, data, force=force, how="pass force=True")

    def chart(self, measure: str = "weight", target: int | str | None = None) -> alt.TopLevelMixin:
        """The app's heat map (an Altair chart; surprisal bars for a model without attention), coloured by
        ``measure`` (``weight`` or ``effect``), the highlights outlined; ``target`` outlines that word's
        row and, in a long text, draws the :data:`vizlm.present.style.WINDOW_ROWS` rows around it."""
        measure = check_measure(measure)
        if measure == "effect" and self.attention is not None and self.slot_effects is None:
            raise InputError("this analysis has no slot effects (a long text); analyze it with "
                             "max_effect_pairs=None to compute every one")
        row = None if target is None else self.target_index(target)
        rows = heatmap.heatmap_rows(self, row) if row is not None and len(self.targets) > style.WINDOW_ROWS else None
        return export.analysis_chart(self, self.highlight, measure=measure, rows=rows, selected=row)

    def html(self, target: int | str | None = None, measure: str = "weight", threshold: float | None = None,
             top_k: int | None = None) -> str:
        """The notebook view as a self-contained HTML string (no JavaScript): :meth:`show`'s."""
        highlight = self._setting(threshold, top_k)
        row = default_target(self, highlight) if target is None else self.target_index(target)
        cases = cases_by_target(self, highlight).get(row, [])
        return notebook.analysis_html(self, row, highlight, check_measure(measure), cases)

    def show(self, target: int | str | None = None, measure: str = "weight", threshold: float | None = None,
             top_k: int | None = None) -> View:
        """The view of one predicted word (an index or the word; default: the first with a labelled case):
        the running text with its attention highlighted, its probability and attention effect, its memory
        slots' weights and effects, its cases, and the heat map coloured by ``measure``. A notebook cell
        ending in it displays it (``_repr_html_``)."""
        return View(self.html(target, measure, threshold, top_k))

    def _repr_html_(self) -> str:
        return self.html()


@dataclass(repr=False)
class Attribution(_Attribution):
    """One attribution (:meth:`Model.attribute`): :class:`vizlm.inspect.attribution.Attribution` (``scores`` [T, T]
    in nats, ``bits``, :meth:`row_frame`, :meth:`highlights`, :meth:`frame`, :meth:`agreement`, ...; a row is
    a number or a predicted word) that shows itself in a notebook as the Explorer does."""

    @classmethod
    def of(cls, attr: _Attribution) -> Attribution:
        """``attr`` as an :class:`Attribution` (its arrays shared, not copied)."""
        return attr if isinstance(attr, cls) else cls(**{f: getattr(attr, f) for f in _Attribution.__dataclass_fields__})

    def default_target(self) -> int:
        """The word a view opens on: the last word before ``</s>``."""
        return max(0, len(self.targets) - 2)

    def highlights(self, row: int | str, threshold: float | None = None, top_k: int | None = None) -> list[int]:
        """The positions row ``row`` depended on most, largest ``|attribution|`` first: those with at least
        ``threshold`` (default 0.2) of the row's largest ``|attribution|``, or the ``top_k`` largest
        (:meth:`vizlm.inspect.attribution.Attribution.highlighted`). ``row``: a number or a predicted word."""
        return self.highlighted(row, setting(threshold, top_k))

    def html(self, target: int | str | None = None, threshold: float | None = None, top_k: int | None = None) -> str:
        """The notebook view as a self-contained HTML string (no JavaScript): :meth:`show`'s."""
        row = self.default_target() if target is None else self.row_of(target)
        return notebook.attribution_html(self, row, setting(threshold, top_k))

    def show(self, target: int | str | None = None, threshold: float | None = None, top_k: int | None = None) -> View:
        """The view of one predicted word (an index or the word; default: the last word of the text): the running
        text with the words its prediction depended on highlighted (default: those with at least a fifth of the
        largest |attribution|) and the words read, largest first. A notebook cell ending in it displays it."""
        return View(self.html(target, threshold, top_k))

    def _repr_html_(self) -> str:
        return self.html()


class View:
    """HTML that displays itself in Jupyter (``_repr_html_``); ``.html`` is the string, :meth:`save`
    writes it as a page."""

    def __init__(self, html: str):
        self.html = html

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return f"View({len(self.html):,} characters of HTML; displayed in Jupyter)"

    def save(self, path: str | os.PathLike, force: bool = False) -> Path:
        page = ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>vizlm</title></head>'
                f"<body>{self.html}</body></html>\n")
        return files.write_text(path, page, force=force, how="pass force=True")


def _svg(chart: alt.TopLevelMixin) -> str | None:
    """The chart as SVG for a notebook view (drawn in a child process); None when it cannot be drawn."""
    try:
        svg = export.chart_bytes(chart, "svg").decode("utf-8")
    except (RenderError, OSError):
        return None
    return re.sub(r"^<\?xml[^>]*>\s*", "", svg)


# --------------------------------------------------------------------------- corpora
class Comparison:
    """Model ``b`` against the baseline ``a``, sentence by sentence (:func:`compare`)."""

    def __init__(self, result: stats.Comparison, corpus: str, split: str):
        self.result, self.corpus, self.split = result, corpus, split
        self.a, self.b = result.name_a, result.name_b

    @property
    def summary(self) -> dict:
        """perplexity_a, perplexity_b, ratio (b / a over the corpus) with its 95% bootstrap interval
        (ratio_ci_low, ratio_ci_high; resampling documents when a model reads running text),
        share_improved (sentences where b's perplexity is lower), median_sentence_ratio, sentences, tokens."""
        return dict(self.result.summary)

    def frame(self) -> pd.DataFrame:
        """One row per sentence, most improved first: sentence_id, text, length, ppl_a, ppl_b, difference,
        log_ratio."""
        return self.result.table.copy()

    def most_improved(self, n: int = 10, min_length: int = 0) -> pd.DataFrame:
        """The ``n`` sentences (of at least ``min_length`` words) whose perplexity ``b`` lowers most."""
        return self.result.most_improved(check_whole(n, "n", 0), check_whole(min_length, "min_length", 0)).copy()

    def most_worsened(self, n: int = 10, min_length: int = 0) -> pd.DataFrame:
        return self.result.most_worsened(check_whole(n, "n", 0), check_whole(min_length, "min_length", 0)).copy()

    def chart(self) -> alt.LayerChart:
        """The app's scatter: per-sentence perplexity of a (x) against b (y), log axes, the diagonal."""
        return charts.comparison_scatter(self.result.table, self.a, self.b)

    def to_dict(self) -> dict:
        return export.json_safe(self.result.to_dict())

    def __repr__(self) -> str:
        s = self.result.summary
        where = f"{self.corpus}/{self.split}" if self.corpus else "the given sentences"
        return (f"Comparison({self.b!r} vs {self.a!r} on {where}: ratio {s.get('ratio', math.nan):.4f}, "
                f"{s.get('sentences', 0):,} sentences)")

    def _repr_html_(self) -> str:
        svg = _svg(self.chart()) if len(self.result.table) <= SVG_MAX_POINTS else None
        return notebook.comparison_html(self.a, self.b, self.result.summary, self.most_improved(10, 5),
                                        self.most_worsened(10, 5), svg)


class Positions:
    """Mean attention and slot effect by relative position (:func:`positions`; Daniluk et al. Fig. 3)."""

    def __init__(self, result: stats.PositionStats, corpus: str | None, split: str | None):
        self.result, self.corpus, self.split = result, corpus, split

    def frame(self) -> pd.DataFrame:
        """One row per (model, offset): model, offset (1 = the most recent slot), distance (from the predicted
        word, :func:`vizlm.inspect.analysis.distance`: 2 for the most recent slot, 1 being the word just read), mean
        weight, lo, hi (95% band), count, effect (mean slot effect in bits), effect_lo, effect_hi."""
        frame = self.result.frame.copy()
        frame.insert(frame.columns.get_loc("offset") + 1, "distance", distance(frame["offset"].astype(int)))
        return frame

    @property
    def entropy(self) -> dict[str, float]:
        """Mean attention entropy per model (nats)."""
        return dict(self.result.entropy)

    @property
    def failed(self) -> dict[str, str]:
        """Models whose reading failed (a plugin's that breaks on longer input), and why; the others are here."""
        return dict(self.result.failed)

    @property
    def resampled(self) -> dict[str, str]:
        """Per model, what the 95% bands resample: ``"documents"`` (the unit a split samples), ``"sentences"`` (a
        text of one document) or ``"words"`` (a single sentence: a normal band over its words)."""
        return self.result.resampled

    @property
    def effects(self) -> dict[str, dict]:
        """Per model: tokens, mean_read_bits, mean_abs_read_bits, share_over_1_bit (words the read moves
        by more than 1 bit)."""
        return dict(self.result.effects)

    @property
    def skipped(self) -> list[str]:
        """Models left out: they have no attention."""
        return list(self.result.skipped)

    def chart(self, measure: str = "weight") -> alt.LayerChart | alt.FacetChart:
        """The app's chart: the mean weight (``measure="effect"``: the mean slot effect) by position, one
        line per model, the 95% band."""
        measure = check_measure(measure)
        if self.result.frame.empty:
            raise InputError("none of these models has attention: there is nothing to draw")
        if measure == "effect" and not self.result.frame["effect"].notna().any():
            raise InputError("these positions were computed without effects (effects=False)")
        return charts.positions_chart(self.result.frame, measure=measure)

    def to_dict(self) -> dict:
        return export.json_safe(self.result.to_dict())

    def __repr__(self) -> str:
        models = list(dict.fromkeys(self.result.frame["model"].astype(str))) if not self.result.frame.empty else []
        where = f" on {self.corpus}/{self.split}" if self.corpus else ""
        return f"Positions({', '.join(models) or 'no attention model'}{where})"

    def _repr_html_(self) -> str:
        frame = self.result.frame
        svgs = []
        if not frame.empty:
            svgs.append(_svg(self.chart()))
            if frame["effect"].notna().any():
                svgs.append(_svg(self.chart("effect")))
        return notebook.positions_html(frame, self.result.entropy, self.result.peak, self.result.effects,
                                       self.result.skipped, svgs)
