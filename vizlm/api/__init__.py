"""The Python API, the front door that the CLI and the app walk through too.

::

    import vizlm

    lm = vizlm.load("amsrn")                  # a bundled name, a checkpoint folder or a model.safetensors
    a = lm.analyze("The dogs in the park are barking .")
    a                                         # in Jupyter: the highlighted text, its effects and the heat map
    a.show(target="barking")                  # another word
    a.frame(), a.attention_frame()            # tidy pandas frames
    a.save("dogs.json"); vizlm.Analysis.load("dogs.json")
    vizlm.compare("lstm-continued", "amsrn", corpus="brown", split="test").summary
    vizlm.positions(["kvp-doc", "attention-doc-w10"], corpus="brown", split="test").chart()

:func:`load` gives a :class:`Model`; :meth:`Model.analyze` an :class:`Analysis` (the result type:
a :class:`vizlm.inspect.analysis.SentenceAnalysis` with frames, highlights, case labels, saving, charts and
notebook display); :func:`compare` a :class:`Comparison`, :func:`positions` a :class:`Positions`. The result types
live in :mod:`vizlm.api.results`; this module makes them.
Every error a user can cause raises a :class:`vizlm.VizlmError` with a message for a person.
Shapes: ``n`` tokens, ``T = n + 1`` predicted words (rows, ``</s>`` last), ``S = T`` memory slots.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import pandas as pd

from vizlm.api.results import Analysis, Attribution, Comparison, Positions, View, check_whole
from vizlm.core.distributed import SINGLE, Context, resolve_device
from vizlm.core.errors import InputError, VizlmError
from vizlm.data.registry import CORPORA, CORPUS_LANGUAGE, CORPUS_TITLES, DataError, corpus_splits, load_corpus
from vizlm.data.text import MAX_TOKENS  # noqa: F401 - read by the front ends from here
from vizlm.inspect import corpus_stats as stats
from vizlm.inspect import faithfulness as faith
from vizlm.inspect import faithfulness_corpus as faith_corpus
from vizlm.inspect.analysis import (  # noqa: F401 - ATTENTION_OFF: a fact the front ends read from here
    ATTENTION_OFF,
    SentenceAnalysis,
    analyze,
    distance,
)
from vizlm.inspect.attribution import SAY_COST_S  # noqa: F401 - read by the CLI from here
from vizlm.inspect.attribution import TEXT_METHODS as ATTRIBUTION_TEXT_METHODS
from vizlm.inspect.highlight import setting
from vizlm.inspect.reading import READINGS, context_of  # noqa: F401 - READINGS: a fact the front ends read from here
from vizlm.modeling.checkpoint import (
    MAX_META_BYTES,
    META,
    WEIGHTS,
    Checkpoint,
    CheckpointError,
    bundled_checkpoints,
    bundled_dir,
    load_checkpoint,
    meta_context,
    meta_corpus,
    read_meta,
)
from vizlm.models import ATTENTION_MODELS, PluginError

__all__ = [
    "Analysis", "Attribution", "Comparison", "Model", "Positions", "View", "VizlmError",
    "checkpoints", "compare", "corpora", "corpus_card", "load", "positions", "prepare_corpus",
]

# Slot effects computed by analyze() at most (word, slot) pairs: a 400-word passage of sentences has
# about 5,000 (a few seconds on one core); one 400-word sentence has 80,000 (half a minute), so past this
# only the read effects are computed, with a note. The CLI's analyze and export use the same bound.
EFFECT_PAIRS = 10_000
MAX_UPLOAD_MB = 50  # an uploaded checkpoint's weights (the app's limit); every bundled model is a few MB


# --------------------------------------------------------------------------- checking arguments
def _permutations(value) -> int:
    """A permutation count: 0 (no permutation test) up to :data:`vizlm.inspect.attribution_corpus.MAX_PERMUTATIONS`."""
    from vizlm.inspect.attribution_corpus import MAX_PERMUTATIONS

    n = check_whole(value, "permutations", low=0)
    if n > MAX_PERMUTATIONS:
        raise InputError(f"permutations must be at most {MAX_PERMUTATIONS:,}, not {n:,}")
    return n


def _check_split(corpus, split) -> None:
    """A split of one of vizlm's corpora or of one ``vizlm import`` wrote (:func:`vizlm.data.registry.corpus_splits`)."""
    splits = corpus_splits(corpus)  # an unknown one: a DataError naming the valid ones
    if split not in splits:
        raise DataError(f"corpus {corpus!r} has no split {split!r}; valid: {', '.join(splits)}")


# --------------------------------------------------------------------------- models
def checkpoint_folders() -> dict[str, Path]:
    """Loadable checkpoints by name: the checkpoints folder (:func:`vizlm.core.paths.checkpoints_dir`), then
    the folders of ``$VIZLM_EXTRA_CHECKPOINTS`` (``os.pathsep``-separated, for development)."""
    folders = {name: bundled_dir() / name for name in bundled_checkpoints()}
    for entry in os.environ.get("VIZLM_EXTRA_CHECKPOINTS", "").split(os.pathsep):
        p = Path(entry) if entry else None
        if p and (p / WEIGHTS).is_file() and (p / META).is_file():
            folders.setdefault(p.name, p)
    return folders


def _facts(name: str, meta: dict, path: Path | None) -> dict:
    metrics = meta.get("metrics") or {}
    return {
        "name": name,
        "family": meta.get("model"),
        "context": meta_context(meta),
        "corpus": meta_corpus(meta),
        "parameters": meta.get("parameters"),
        "test_perplexity": metrics.get("test_perplexity"),
        "valid_perplexity": metrics.get("valid_perplexity"),
        "wsj_perplexity": metrics.get("wsj_perplexity"),
        "attention": meta.get("model") in ATTENTION_MODELS,
        "path": None if path is None else str(path),
    }


FACT_COLUMNS = list(_facts("", {}, None))


def checkpoints() -> pd.DataFrame:
    """The checkpoints :func:`load` finds by name, one row each: name, family, context (``sentence``:
    each sentence read alone; ``document``: running text), corpus, parameters, test / valid / WSJ
    perplexity, attention (whether it has any), path. A checkpoint whose ``config.json`` cannot be read
    has its name and path only."""
    rows = []
    for name, folder in checkpoint_folders().items():
        try:
            meta = read_meta(folder)
        except (CheckpointError, OSError):
            meta = {}
        rows.append(_facts(name, meta, folder) if meta else {"name": name, "path": str(folder)})
    return pd.DataFrame(rows, columns=FACT_COLUMNS)


CORPUS_COLUMNS = ["corpus", "split", "kind", "title", "language", "documents", "sentences", "tokens", "vocab_size",
                  "oov_rate", "layout", "path"]


def corpora() -> pd.DataFrame:
    """The corpora and splits every command reads by name, one row per split: vizlm's own (``kind``
    ``vizlm``: Brown, WSJ, Sinica) and yours (``yours``: prepared by :func:`prepare_corpus` /
    ``vizlm prepare --corpus``, or written by ``vizlm import``), with title, language, documents,
    sentences, tokens (None where vizlm's processed files are missing: ``vizlm prepare`` makes them),
    vocabulary size, the split's OOV rate under the corpus's own vocabulary, layout and folder. A user
    corpus's whole card: :func:`corpus_card`."""
    from vizlm.core import paths
    from vizlm.data.registry import user_corpus_cards

    def counts(path: Path) -> tuple[int | None, int | None]:  # (sentences, tokens) of a processed split: its lines
        if not path.is_file():
            return None, None
        data = path.read_bytes()
        return sum(1 for line in data.splitlines() if line.strip()), len(data.split())

    rows = []
    for corpus, splits in CORPORA.items():
        for split in splits:
            path = paths.data_dir() / corpus / f"{split}.txt"
            sentences, tokens = counts(path)
            rows.append({"corpus": corpus, "split": split, "kind": "vizlm", "title": CORPUS_TITLES.get(corpus),
                         "language": CORPUS_LANGUAGE.get(corpus), "sentences": sentences, "tokens": tokens,
                         "path": str(path.parent)})
    for corpus, (folder, card) in user_corpus_cards().items():
        for split in card.get("splits", ()):
            st = (card.get("split_stats") or {}).get(split) or {}
            if st.get("sentences") is None:  # an imported corpus's card has no statistics: count its files
                st = dict(zip(("sentences", "tokens"), counts(Path(folder) / f"{split}.txt"))) | st
            rows.append({"corpus": corpus, "split": split, "kind": "yours", "title": corpus, "language": None,
                         "documents": st.get("documents"), "sentences": st.get("sentences"), "tokens": st.get("tokens"),
                         "vocab_size": card.get("vocab_size"), "oov_rate": st.get("oov_rate"),
                         "layout": (card.get("layout") or {}).get("name") or (card.get("source") or {}).get("kind"),
                         "path": str(folder)})
    # counts are whole numbers, missing ones <NA> (a float column would write 1234.0 in JSON)
    return pd.DataFrame(rows, columns=CORPUS_COLUMNS).astype(
        {c: "Int64" for c in ("documents", "sentences", "tokens", "vocab_size")})


def corpus_card(name: str) -> dict | None:
    """The card of your corpus ``name`` (source files and checksums, layout and why, documents /
    sentences / tokens / OOV rates per split, vocabulary and options); None for vizlm's own corpora;
    :class:`~vizlm.data.registry.DataError` for an unknown name."""
    from vizlm.data.registry import corpus_card as card_of

    return card_of(name)


def prepare_corpus(name: str, source: str | os.PathLike, layout: str | None = None, vocab_size: int | None = None,
                   min_count: int | None = None, all_words: bool = False, lowercase: bool = False, chars: bool = False,
                   force: bool = False, progress: bool = False) -> dict:
    """Prepare the folder ``source`` (``train`` / ``valid`` / ``test`` as ``.txt``, ``.txt.gz`` or WikiText's
    ``wiki.*.tokens``) as your corpus ``name``, which every command and the app then read by name; returns
    its card. The layout (``sentence``, ``paragraph``, ``wikitext``) is detected unless given; the
    vocabulary is the 10,000 most frequent words of train unless ``vocab_size``, ``min_count`` or
    ``all_words`` says otherwise (:mod:`vizlm.data.ingest` has the rules). Nothing already prepared is replaced
    without ``force``; bad input raises :class:`~vizlm.data.registry.DataError` before anything is written."""
    from vizlm.data.ingest import prepare_corpus as prepare

    if not isinstance(source, (str, os.PathLike)):
        raise InputError(f"prepare_corpus() takes the source folder as a path (str or Path), not {type(source).__name__}")
    return prepare(name, Path(source), layout=layout, vocab_size=vocab_size, min_count=min_count,
                   all_words=all_words, lowercase=lowercase, chars=chars, force=force, progress=progress)


def check_upload(weights_name: str, weights: bytes, config_name: str, config: bytes,
                 max_mb: float = MAX_UPLOAD_MB) -> None:
    """The checks on a checkpoint given as two files' contents before it is read (the app's upload):
    the names' kinds, the weights at most ``max_mb`` MB, the config at most
    :data:`vizlm.modeling.checkpoint.MAX_META_BYTES`; :class:`~vizlm.modeling.checkpoint.CheckpointError` otherwise."""
    if not str(weights_name).lower().endswith(".safetensors"):
        raise CheckpointError(f"{weights_name!r} is not a .safetensors file; vizlm loads weights only in that format")
    if not str(config_name).lower().endswith(".json"):
        raise CheckpointError(f"{config_name!r} is not a .json file; give the checkpoint's config.json")
    if len(weights) > max_mb * 2**20:
        raise CheckpointError(f"the weights file is {len(weights) / 2**20:.0f} MB; uploads are limited to {max_mb} MB")
    if len(config) > MAX_META_BYTES:
        raise CheckpointError(f"the JSON file is {len(config) / 2**20:.0f} MB; it is limited to {MAX_META_BYTES // 2**20} MB")


def known_models(text: str, names: list[str] | None = None, where: str = "listed by vizlm.checkpoints()") -> str:
    """What a message about an unknown model name ``text`` says next: the close names among ``names`` (default: the
    bundled and registered checkpoints), and every name while the list stays short (else how many there are and
    ``where`` they are listed)."""
    import difflib

    names = list(checkpoint_folders()) if names is None else list(names)
    close = difflib.get_close_matches(text, names, n=3)
    said = f" (did you mean {' or '.join(repr(n) for n in close)}?)" if close else ""
    listed = ", ".join(names) or "none"
    if len(listed) > 200:
        listed = f"{len(names)} models, {where}"
    return f"{said}; available: {listed}"


def load(name_or_path: str | os.PathLike, device: str | None = None) -> Model:
    """A model ready to analyse text: a bundled checkpoint's name (``"amsrn"``, :func:`checkpoints`
    lists them), a checkpoint folder (``model.safetensors`` + ``config.json``), or a
    ``model.safetensors`` file with its ``config.json`` beside it.

    ``device``: where the model runs, ``"cpu"``, ``"cuda"`` or ``"auto"`` (the GPU when CUDA is
    available, else the CPU; :data:`vizlm.core.choices.DEVICES`); None: the CPU, or where a given
    :class:`Model` already is. Analyses move their inputs to the model and their results to the CPU.

    Checked as the app checks an upload (:func:`vizlm.modeling.checkpoint.load_checkpoint`: data, never
    unpickled code; every shape, size and weight validated before use). Raises
    :class:`~vizlm.modeling.checkpoint.CheckpointError` (a :class:`VizlmError`) saying what is wrong."""
    where = None if device is None else check_device(device)  # a device this machine lacks: before reading
    if isinstance(name_or_path, Model):
        if where is not None:
            name_or_path.checkpoint.model.to(where)
        return name_or_path
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise CheckpointError(f"load() takes a bundled model's name, a checkpoint folder or a .safetensors file, "
                              f"not {type(name_or_path).__name__}")
    text = os.fspath(name_or_path)
    path = Path(text)
    if not text.strip():
        raise CheckpointError("load() needs a model name or a path; vizlm.checkpoints() lists the bundled models")
    try:
        exists = path.exists()
    except OSError as exc:  # a name too long for the file system (ENAMETOOLONG), a NUL: not a path there is
        shown = text if len(text) <= 80 else f"{text[:60]}... ({len(text):,} characters)"
        raise CheckpointError(f"{shown!r} cannot be a checkpoint's name or path: {exc.strerror or exc}") from None
    if not exists:
        folder = checkpoint_folders().get(text) if os.sep not in text and "/" not in text else None
        if folder is None and (os.sep in text or "/" in text or path.suffix):
            raise CheckpointError(f"{text}: no such file or folder")
        if folder is None:
            raise CheckpointError(f"there is no model called {text!r}{known_models(text)}")
        path = folder
    elif path.is_file() and path.suffix != ".safetensors":
        raise CheckpointError(f"{text} is not a .safetensors file; give a checkpoint folder or its model.safetensors")
    model = Model(load_checkpoint(path))
    if where is not None:
        model.checkpoint.model.to(where)
    return model


def check_device(device: str):
    """``device`` (:data:`vizlm.core.choices.DEVICES`) as a torch device; one that this machine lacks is an
    :class:`InputError` saying so."""
    try:
        return resolve_device(device)
    except ValueError as exc:
        raise InputError(str(exc).replace("--device cuda", "device='cuda'")) from None


def _model(x) -> Model:
    return x if isinstance(x, Model) else Model(x) if isinstance(x, Checkpoint) else load(x)


class Model:
    """A loaded checkpoint (:func:`load`): its facts, and :meth:`analyze`.

    ``checkpoint`` is the :class:`vizlm.modeling.checkpoint.Checkpoint` (``.model``, a torch module in eval
    mode; ``.vocab``) for the lower-level functions of :mod:`vizlm.inspect.analysis` and :mod:`vizlm.inspect.corpus_stats`."""

    def __init__(self, checkpoint: Checkpoint):
        self.checkpoint = checkpoint

    @property
    def name(self) -> str:
        """How results name the model: its folder (``kvp-doc``), else its family."""
        return self.checkpoint.label

    @property
    def family(self) -> str:
        """The model family (``lstm``, ``amsrn``, ``kvp``, ...: :data:`vizlm.models.REGISTRY`)."""
        return self.checkpoint.name

    @property
    def context(self) -> str:
        """How it reads text: ``sentence`` (each sentence alone) or ``document`` (running text)."""
        return context_of(self.checkpoint)

    @property
    def corpus(self) -> str | None:
        return meta_corpus(self.checkpoint.meta)

    @property
    def has_attention(self) -> bool:
        return self.checkpoint.has_attention

    def off_corpus(self, corpus: str, split: str) -> str | None:
        """A note when this model is run on a corpus it was not trained on: the share of the split's tokens
        outside its vocabulary, which it reads (and predicts) as ``<unk>`` (:func:`vizlm.data.vocab.vocab_overlap`);
        None on its own corpus."""
        from vizlm.data.vocab import vocab_overlap

        if self.corpus == corpus:
            return None
        ov = vocab_overlap(self.checkpoint.vocab, corpus, split)
        trained = f"trained on {self.corpus}" if self.corpus else "its training corpus is not recorded"
        return (f"{self.name} ({trained}) is run on {corpus} {split}: {ov.oov_rate:.1%} of its tokens ({ov.oov_tokens:,} "
                f"of {ov.tokens:,}; {ov.oov_types:,} of {ov.types:,} distinct words) are outside its vocabulary and read "
                "as <unk>, so its numbers are not those of text like its own corpus")

    @property
    def parameters(self) -> int:
        return int(sum(p.numel() for p in self.checkpoint.model.parameters()))

    @property
    def metrics(self) -> dict:
        """The stored metrics (``test_perplexity``, ``valid_perplexity``, ...), as trained."""
        return dict(self.checkpoint.meta.get("metrics") or {})

    def facts(self) -> dict:
        """The row :func:`checkpoints` shows for this model."""
        return {**_facts(self.name, self.checkpoint.meta, self.checkpoint.path), "parameters": self.parameters}

    def __repr__(self) -> str:
        ppl = self.metrics.get("test_perplexity")
        return (f"Model({self.name!r}, family={self.family!r}, context={self.context!r}, corpus={self.corpus!r}"
                + (f", test_perplexity={ppl:.1f}" if isinstance(ppl, (int, float)) else "") + ")")

    def analyze(self, text: str, *, threshold: float | None = None, top_k: int | None = None, effects: bool = True,
                max_effect_pairs: int | None = EFFECT_PAIRS, predictions: int = 5) -> Analysis:
        """Analyse ``text``, a sentence or a passage (sentences end at a line break, at . ! ? before a
        capital, or 。！？; a blank line ends a document), read in the model's context.

        ``threshold`` (the share of a row's attention, default :data:`vizlm.inspect.highlight.DEFAULT`) or ``top_k``
        is the analysis's highlight setting (its methods take another). With ``effects`` an attention model's read
        effects are computed, and its slot effects while there are at most ``max_effect_pairs`` (word,
        slot) pairs (None: always); past that a note says so. ``predictions``: the top predictions kept
        per word. The text is cut at :data:`vizlm.data.text.MAX_TOKENS` tokens, with a note."""
        if not isinstance(text, str):
            raise InputError(f"analyze() takes a text (str), not {type(text).__name__}")
        highlight = setting(threshold, top_k)
        if max_effect_pairs is not None:
            max_effect_pairs = check_whole(max_effect_pairs, "max_effect_pairs", 0)
        predictions = min(check_whole(predictions, "predictions", 0), len(self.checkpoint.vocab))
        sa = analyze(self.checkpoint, text, top_k=predictions, effects=bool(effects), max_effect_pairs=max_effect_pairs)
        if effects and max_effect_pairs and self.checkpoint.has_attention and sa.slot_effects is None:
            pairs = int((sa.attention > 0).sum())
            sa.notes.append(f"slot effects not computed: the text has {pairs:,} (word, slot) pairs with weight, more "
                            f"than the {max_effect_pairs:,} computed at most (shorter sentences have fewer); the read "
                            "effects are")
        return Analysis.of(sa, highlight)

    def attribute(self, text: str, method: str = "integrated-gradients", n_steps: int = 32, rows=None,
                  progress: Callable[[float], None] | None = None, cancel: Callable[[], bool] | None = None):
        """Which earlier words the prediction of every word of ``text`` depended on: the attribution of
        ``log P(word)`` (nats) to each token read before it, in the model's context, for any family
        (:func:`vizlm.inspect.attribution.attribute`; ``method``: ``gradient-x-input``, ``integrated-gradients``
        with ``n_steps`` (1 to :data:`vizlm.inspect.attribution.MAX_STEPS`; doubled where its convergence delta exceeds
        1%), ``occlusion`` or, with attention, ``slot-effect``). Gives a :class:`vizlm.inspect.attribution.Attribution`
        (``.frame()``, ``.agreement()`` with the attention, ``.to_dict()``).

        A long text costs its tokens times the steps (:meth:`attribute_seconds` says how long beforehand):
        ``rows`` (row indices or a ``range``) computes only those predicted words, each as in the whole
        text's attribution; ``progress(fraction)`` is called as it goes; ``cancel()`` returning True stops it
        (:class:`vizlm.inspect.attribution_methods.AttributionCancelled`) between two batches of passes."""
        from vizlm.inspect.attribution import attribute, check_steps

        if not isinstance(text, str):
            raise InputError(f"attribute() takes a text (str), not {type(text).__name__}")
        if method == "integrated-gradients":
            check_steps(n_steps)  # before the text is even read
        return Attribution.of(attribute(self.checkpoint, text, method=method, n_steps=n_steps, rows=rows,
                                        progress=progress, cancel=cancel))

    def attribute_seconds(self, text: str, method: str = "integrated-gradients", n_steps: int = 32,
                          rows=None) -> float:
        """The expected time of :meth:`attribute` with these arguments, in seconds, from the text's tokens and the
        steps (:func:`vizlm.inspect.attribution.estimate_seconds`: an order of magnitude, measured on one core)."""
        from vizlm.inspect.analysis import analyze
        from vizlm.inspect.attribution import METHODS, estimate_seconds
        from vizlm.inspect.attribution_methods import AttributionError

        if not isinstance(text, str):
            raise InputError(f"attribute_seconds() takes a text (str), not {type(text).__name__}")
        if method not in METHODS:
            raise AttributionError(f"unknown attribution method {method!r}; valid: {', '.join(METHODS)}")
        sa = analyze(self.checkpoint, text, top_k=0, effects=False)
        return estimate_seconds(self.checkpoint, sa, method, n_steps, rows)

    def corpus_attribution(self, corpus: str = "brown", split: str = "test", method: str = "gradient-x-input",
                           limit: int | None = None, n_steps: int = 32, permutations: int = 10,
                           progress: Callable[[float], None] | None = None) -> dict:
        """:meth:`attribute` over a corpus split (its first ``limit`` sentences), cached on disk
        (:func:`vizlm.inspect.attribution_corpus.corpus_attribution`): attribution by distance beside the attention's
        (Daniluk et al.'s Fig. 3) and, for attention models, the agreement and Jain & Wallace's permutation
        test (``permutations`` shuffles of each row; 0: none, as the Positions page's attribution by distance,
        :data:`vizlm.inspect.attribution_corpus.BY_DISTANCE`), each with a 95% bootstrap interval over the split's
        documents."""
        from vizlm.inspect.attribution_corpus import corpus_attribution

        _check_split(corpus, split)
        if limit is not None:
            limit = check_whole(limit, "limit")
        return corpus_attribution(self.checkpoint, corpus, split, method=method, limit=limit, n_steps=n_steps,
                                  permutations=_permutations(permutations), progress=progress)


    def corpus_faithfulness(self, corpus: str = "brown", split: str = "test", limit: int | None = None,
                            permutations: int = faith.PERMUTATIONS, epsilon: float = faith.EPSILON,
                            adversary_steps: int = faith.ADVERSARY_STEPS, methods: Iterable[str] = ATTRIBUTION_TEXT_METHODS,
                            n_steps: int = 32, other: Model | str | None = None, seed: int = 0,
                            progress: Callable[[float], None] | None = None,
                            head: tuple[int, int] | None = None) -> dict:
        """Is this model's attention an explanation? The literature's tests over a corpus split (its first
        ``limit`` sentences), cached on disk (:func:`vizlm.inspect.faithfulness_corpus.corpus_faithfulness`): the agreement of
        attention with slot effects and word-level attribution (``methods``, of
        :data:`vizlm.inspect.attribution.TEXT_METHODS`) beside the methods' agreement with each other (the ceiling), Jain &
        Wallace's ``permutations`` shuffles of each row binned by its largest weight and their adversarial
        attention (``|delta log P| < epsilon`` nats, ``adversary_steps`` steps), the uniform baseline (and
        ``other``'s attention: another seed of the same family, a :class:`Model` or a name), Serrano & Smith's
        erasure curves, ERASER's comprehensiveness and sufficiency, and the two paths (the attention read vs the
        recurrent state) by distance; each with a 95% bootstrap interval over the split's documents (over its
        sentences or passages where the first ``limit`` sentences are all of one document: ``resampled`` says
        which). A Transformer: the tests of one ``head`` (``(layer, head)`` counted from 0, as
        :meth:`Analysis.at_head`; default the last layer's first head), each row's weights of that head changed
        alone, the other positions as computed; it has no two paths. Costly: :meth:`faithfulness_seconds` says how
        long beforehand; ``progress(fraction)`` is called after each sentence or passage. A model without
        attention, or a bad argument: a :class:`~vizlm.core.errors.VizlmError`."""
        from vizlm.inspect.attribution import check_steps

        head = faith_corpus.testable_head(self.checkpoint, head)
        _check_split(corpus, split)
        if limit is not None:
            limit = check_whole(limit, "limit")
        if _permutations(permutations) < 1:
            raise InputError("permutations must be a whole number of at least 1, not 0")
        if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or not 0 < epsilon < math.inf:
            raise InputError(f"epsilon must be a positive number of nats, not {epsilon!r}")
        adversary_steps = check_whole(adversary_steps, "adversary_steps")
        if isinstance(methods, str):
            methods = [methods]
        methods = list(methods)
        for m in methods:
            if m not in ATTRIBUTION_TEXT_METHODS:
                raise InputError(f"unknown word-level method {m!r}; valid: {', '.join(ATTRIBUTION_TEXT_METHODS)}")
        n_steps = check_steps(n_steps)
        seed = check_whole(seed, "seed", low=0)
        if isinstance(other, str):
            other = load(other)
        if other is not None and not isinstance(other, Model):
            raise InputError(f"other must be a Model, a name or None, not {type(other).__name__}")
        return faith_corpus.corpus_faithfulness(
            self.checkpoint, corpus, split, limit=limit, permutations_n=permutations, epsilon=float(epsilon),
            adversary_steps=adversary_steps, methods=methods, n_steps=n_steps,
            other=None if other is None else other.checkpoint, seed=seed, progress=progress, head=head)

    def faithfulness_seconds(self, corpus: str = "brown", split: str = "test", limit: int | None = None,
                             head: tuple[int, int] | None = None) -> float | None:
        """The expected time of :meth:`corpus_faithfulness` with its default tests over the first ``limit``
        sentences, in seconds (:func:`vizlm.inspect.faithfulness_corpus.estimate_seconds`, an order of magnitude); None when
        the result is already in the disk cache."""
        _check_split(corpus, split)
        if limit is not None:
            limit = check_whole(limit, "limit")
        head = faith_corpus.testable_head(self.checkpoint, head)
        if faith_corpus.is_stored(self.checkpoint, corpus, split, limit=limit, head=head):
            return None
        return faith_corpus.estimate_seconds(self.checkpoint, corpus, split, limit)


def _given(sentences, ids, what: str) -> tuple[list[list[str]], list[str]]:
    """Sentences given instead of a split, and their ids (``document:index``; each sentence its own
    document when none are given)."""
    if isinstance(sentences, (str, bytes)) or not isinstance(sentences, Iterable):
        raise InputError(f"sentences= takes a list of sentences, each a list of words (str), not "
                         f"{type(sentences).__name__}" + (": split the text into sentences and words first"
                                                          if isinstance(sentences, str) else ""))
    sentences = list(sentences)
    for i, s in enumerate(sentences):
        if isinstance(s, (str, bytes)) or not isinstance(s, Iterable):
            raise InputError(f"sentences= takes a list of sentences, each a list of words (str); sentence {i} is "
                             f"a {type(s).__name__}")
        s = sentences[i] = list(s)
        for w in s:
            if not isinstance(w, str):
                raise InputError(f"sentences= takes a list of sentences, each a list of words (str); sentence {i} "
                                 f"holds a value of type {type(w).__name__}")
    if not any(sentences):
        raise InputError(f"no sentences to {what}: the text has no words")
    ids = [f"s{i}:0" for i in range(len(sentences))] if ids is None else [str(i) for i in ids]
    if len(ids) != len(sentences):
        raise InputError(f"{len(ids)} ids for {len(sentences)} sentences")
    return sentences, ids


def compare(a: str | Model, b: str | Model, corpus: str = "brown", split: str = "test",
            limit: int | None = None, progress: Callable[[float], None] | None = None, *,
            sentences: Iterable[list[str]] | None = None, ids: Iterable[str] | None = None,
            context: Context | None = None) -> Comparison:
    """Per-sentence perplexity of ``b`` against the baseline ``a`` (names, paths or loaded models) on a
    corpus split (:func:`corpora`), each model in its context (a document model scores every sentence
    after the ones before it). The whole split is cached on disk; ``limit`` scores only its first
    sentences (not cached). ``progress(fraction)`` is called as the whole split is scored.

    ``sentences`` (tokenised and normalised, e.g. :func:`vizlm.data.registry.read_text_file`'s) are scored
    instead of a split, with their ``ids`` (``document:index``: a document model reads each
    document's sentences as running text). ``context``: the process group of a ``torchrun`` run
    (:func:`vizlm.core.distributed.session`, what ``vizlm compare --device`` uses): its ranks score
    the split together and every rank gets the result."""
    ma, mb = _model(a), _model(b)
    if ma.checkpoint.vocab.itos != mb.checkpoint.vocab.itos:
        raise InputError(f"{ma.name} and {mb.name} have different vocabularies (trained on different corpora?); "
                         "their per-sentence perplexities are not comparable")
    if sentences is not None:
        sents, names = _given(sentences, ids, "compare")
        return Comparison(stats.compare(ma.checkpoint, mb.checkpoint, sents, names), None, None)
    _check_split(corpus, split)
    if limit is None:
        result = stats.compare_corpus(ma.checkpoint, mb.checkpoint, corpus, split, progress=progress,
                                      ctx=context or SINGLE)
    else:
        c = load_corpus(corpus, split)
        n = check_whole(limit, "limit")
        result = stats.compare(ma.checkpoint, mb.checkpoint, c.sentences[:n], c.ids[:n], originals=c.originals[:n])
    return Comparison(result, corpus, split)


def positions(models: str | Model | Iterable[str | Model], corpus: str = "brown", split: str = "test",
              window: int = 10, effects: bool = True, limit: int | None = None,
              progress: Callable[[float], None] | None = None, *, sentences: Iterable[list[str]] | None = None,
              ids: Iterable[str] | None = None, context: Context | None = None) -> Positions:
    """Mean attention weight at 1..``window`` words back for each attention model (names, paths or
    loaded models), with the mean slot effect there and the share of words the read moves by more than
    1 bit, over a corpus split read in each model's context (a document model reads the documents as
    running text). The whole split is cached on disk (a window's statistics serve every narrower one);
    ``limit`` reads only its first sentences. ``progress(fraction)`` is called as the text is read.
    ``sentences``, ``ids`` and ``context``: as :func:`compare` takes them."""
    chosen = [models] if isinstance(models, (str, os.PathLike, Model, Checkpoint)) else list(models)
    if not chosen:
        raise InputError("positions() needs at least one model")
    ckpts = [_model(m).checkpoint for m in chosen]
    window = check_whole(window, "window")
    if sentences is not None:
        sents, names = _given(sentences, ids, "read")

        def one(ckpt, tick):
            return stats.attention_by_position([ckpt], sents, window=window, effects=bool(effects), ids=names,
                                               progress=tick)
        return Positions(_each_model(ckpts, one, progress), None, None)
    _check_split(corpus, split)
    if limit is None:
        def one(ckpt, tick):
            return stats.positions_corpus([ckpt], corpus, split, window=window, effects=bool(effects), progress=tick,
                                          ctx=context or SINGLE)
    else:
        c = load_corpus(corpus, split)
        n = check_whole(limit, "limit")

        def one(ckpt, tick):
            return stats.attention_by_position([ckpt], c.sentences[:n], window=window, effects=bool(effects),
                                               ids=c.ids[:n], progress=tick)
    return Positions(_each_model(ckpts, one, progress), corpus, split)


def _each_model(ckpts: list[Checkpoint], one: Callable, progress: Callable[[float], None] | None) -> stats.PositionStats:
    """``one(ckpt, progress)`` for each model apart, merged: a model that fails (a plugin's that breaks on
    longer input: :class:`vizlm.models.PluginError`) is named in ``failed`` and the others go on; when every
    one fails, the first error is raised."""
    parts, failed, first = [], {}, None
    for i, ckpt in enumerate(ckpts):
        tick = None if progress is None else (lambda f, i=i: progress((i + f) / len(ckpts)))
        try:
            parts.append(one(ckpt, tick))
        except PluginError as exc:
            failed[ckpt.label] = str(exc)
            first = first or exc
    if not parts:
        raise first
    return stats.PositionStats.merge(parts, failed)

