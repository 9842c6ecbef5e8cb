"""The corpus evidence of the bundled checkpoints, beyond the papers: what the manifest's corpus tables
(:mod:`vizlm.reproduce.corpus_runs`) write and their report sections read, in ``evidence/``
(:func:`vizlm.core.paths.evidence_dir`):

    attribution/CHECKPOINT/     config.json and sums.safetensors: per unit (sentence, or a document model's
                                passage) the sum and count of each quantity of the corpus attribution
                                (:data:`vizlm.inspect.attribution_corpus.UNIT_SUMS`), each unit's document
    faithfulness/CHECKPOINT/    config.json and sums.safetensors: what every statistic of the faithfulness tests
                                and its interval are computed from (:func:`faithfulness_sums`), each unit's document
    cases/CHECKPOINT.json       each case label's rate beside its distance-matched chance rate

Each with the checkpoint's and the corpus's checksums, every parameter, the command and the commit; a folder is
written whole (:func:`vizlm.reproduce.evidence.publish`). A run's own evidence is :mod:`vizlm.reproduce.evidence`'s.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import sys
import time
from dataclasses import dataclass, field
from itertools import combinations, pairwise
from pathlib import Path

import numpy as np
import torch

from vizlm.core import paths
from vizlm.core.files import write_text
from vizlm.data.folder import document_keys
from vizlm.data.registry import load_corpus
from vizlm.inspect.analysis import head_words
from vizlm.inspect.cache import checkpoint_digest
from vizlm.modeling.checkpoint import load_checkpoint, meta_context
from vizlm.present.links import head_code, parse_head_code
from vizlm.reproduce.evidence import EvidenceError, check_whole, display_path, dump_json, publish


class _Progress:
    """A corpus pass's progress, said on ``log`` every tenth of the way (``progress(fraction)``, the callback of
    the library's ``collect``), with the seconds since it was made (:meth:`seconds`: the evidence's wall time)."""

    def __init__(self, name: str, what: str, log) -> None:
        self.name, self.what, self.log = name, what, log
        self.start, self.said = time.perf_counter(), 0.0

    def __call__(self, fraction: float) -> None:
        if fraction - self.said >= 0.1 or fraction >= 1:
            self.said = fraction
            print(f"evidence: {self.name}: {self.what} {fraction:.0%} ({self.seconds():.0f} s)", file=self.log)

    def seconds(self) -> float:
        return time.perf_counter() - self.start


# --------------------------------------------------------------------------- corpus attribution (beyond the papers)
ATTRIBUTION = "attribution"  # evidence/attribution/CHECKPOINT/: what a bundled model's predictions depended on
ATTRIBUTION_FILES = ("config.json", "sums.safetensors")
UNIT_DOCUMENT = "unit.document"  # in sums.safetensors (attribution, faithfulness): each unit's document, 0, 1, ...


@dataclass
class AttributionEvidence:
    """A bundled checkpoint's attribution over a corpus split, read back (:func:`read_attribution`): per unit
    (sentence, or a document model's passage) the sum and count of each quantity of
    :data:`vizlm.inspect.attribution_corpus.UNIT_SUMS` it has, and ``documents``: each unit's document (None in
    evidence written before it was kept)."""

    name: str
    config: dict
    sums: dict[str, tuple[np.ndarray, np.ndarray]] = field(repr=False)
    documents: np.ndarray | None = field(default=None, repr=False)

    def statistic(self, key: str, resample: str = "documents") -> dict | None:
        """The mean of ``key`` over the targets with its 95% interval resampling ``resample``: ``"documents"`` (the
        report's and :func:`vizlm.inspect.attribution_corpus.corpus_attribution`'s: the unit a split samples)
        or ``"units"`` (sentences or passages: narrower intervals that ignore the documents), by
        :func:`vizlm.inspect.attribution_corpus.cluster_mean` with the seed and resamples the config records; None
        when the model has no such quantity (agreement without attention)."""
        from vizlm.inspect.attribution_corpus import cluster_mean, clusters_of

        if key not in self.sums:
            return None
        sums, counts = self.sums[key]
        if resample == "documents" and self.documents is None:
            raise EvidenceError(f"{self.name}: attribution evidence without its units' documents; write it again: "
                                f"vizlm reproduce --attribution {attribution_checkpoint(self.name)} --force")
        cluster, n = clusters_of(np.zeros(len(sums)) if self.documents is None else self.documents, resample)
        return cluster_mean(np.bincount(cluster, weights=sums, minlength=n),
                            np.bincount(cluster, weights=counts, minlength=n),
                            n_boot=self.config["n_boot"], seed=self.config["seed"])


def attribution_folder(name: str) -> Path:
    return paths.evidence_dir() / ATTRIBUTION / name


def _checkpoints_with(table: str) -> list[str]:
    """The checkpoints with a folder in ``evidence/TABLE/`` (not a hidden one: a folder being written)."""
    root = paths.evidence_dir() / table
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")) if root.is_dir() else []


def attribution_names() -> list[str]:
    """The corpus attribution evidence there is (:func:`attribution_name`)."""
    return _checkpoints_with(ATTRIBUTION)


def attribution_name(checkpoint: str, method: str, main: str) -> str:
    """The evidence of a checkpoint's corpus attribution by ``method``: the checkpoint's name for the ``main``
    method, ``CHECKPOINT.METHOD`` for another (``salton-doc.integrated-gradients``)."""
    return checkpoint if method == main else f"{checkpoint}.{method}"


def attribution_checkpoint(name: str) -> str:
    """The checkpoint an :func:`attribution_name` is of (what `vizlm reproduce --attribution` takes)."""
    from vizlm.inspect.attribution import TEXT_METHODS

    return next((name[: -len(m) - 1] for m in TEXT_METHODS if name.endswith(f".{m}")), name)


def _publish_sums(dest: Path, config: dict, arrays: dict) -> None:
    """An evidence folder of ``config.json`` and ``sums.safetensors`` (attribution, faithfulness), written whole
    (:func:`vizlm.reproduce.evidence.publish`)."""
    from safetensors.numpy import save_file

    def fill(tmp: Path) -> None:
        dump_json(tmp / "config.json", config)
        save_file(arrays, str(tmp / "sums.safetensors"))

    publish(dest, fill)


def _read_sums(where: Path, files: tuple[str, ...], command: str) -> tuple[dict, dict] | None:
    """``(config.json, sums.safetensors' arrays)`` of an evidence folder (attribution, faithfulness); None when
    it is not there; :class:`EvidenceError` when a file is missing (``command`` writes it again) or unreadable."""
    from safetensors.numpy import load_file

    if not where.exists():
        return None
    check_whole(where, files, command)
    try:
        config = json.loads((where / "config.json").read_text(encoding="utf-8"))
        arrays = load_file(str(where / "sums.safetensors"))
    except (OSError, ValueError) as e:
        raise EvidenceError(f"{where}: cannot be read ({e})") from e
    return config, arrays


def read_attribution(name: str) -> AttributionEvidence | None:
    """The corpus attribution evidence of checkpoint ``name``, None when it has none."""
    read = _read_sums(attribution_folder(name), ATTRIBUTION_FILES,
                      f"vizlm reproduce --attribution {attribution_checkpoint(name)}")
    if read is None:
        return None
    config, arrays = read
    documents = arrays.pop(UNIT_DOCUMENT, None)
    keys = sorted({k.rsplit(".", 1)[0] for k in arrays})
    return AttributionEvidence(name, config, _paired_sums(arrays, keys),
                               None if documents is None else documents.astype(np.int64))


def corpus_sample(corpus: str, split: str, document: bool, per_document: int | None = None,
                  limit: int | None = None) -> tuple[list[int] | None, list[list[int]], np.ndarray]:
    """What a corpus pass over ``corpus``/``split`` reads: ``(select, units, unit documents)``. ``select``: the
    indices of the first ``per_document`` sentences of every document (:func:`first_of_each_document`), None for
    the split's first ``limit`` sentences (all, without a limit); ``units``: the sentence indices, within those,
    of each unit (:func:`vizlm.inspect.attribution_corpus.reading_units`: a sentence, or a ``document`` model's
    passage); and each unit's document, numbered from 0 (what the report's bootstrap resamples)."""
    from vizlm.inspect.attribution_corpus import PASSAGE_TOKENS, reading_units, unit_documents

    data = load_corpus(corpus, split)
    select = first_of_each_document(corpus, split, per_document) if per_document is not None else None
    index = select if select is not None else list(range(len(data.sentences)))[:limit]
    ids = [data.ids[i] for i in index]
    units = reading_units([data.sentences[i] for i in index], ids, document, PASSAGE_TOKENS)
    return select, units, unit_documents(units, ids)


def _flat_sums(sums: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per-unit ``{name: (sums, counts)}`` as the arrays ``NAME.sum`` and ``NAME.count`` a safetensors file holds."""
    return {f"{k}.{part}": a for k, (s_, c) in sums.items() for part, a in (("sum", s_), ("count", c))}


def _paired_sums(arrays: dict[str, np.ndarray], keys) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """:func:`_flat_sums` read back: ``{name: (NAME.sum, NAME.count)}`` for each of ``keys``."""
    return {k: (arrays[f"{k}.sum"], arrays[f"{k}.count"]) for k in keys}


def _runs_of(unit_document: np.ndarray) -> list[tuple[int, int]]:
    """``[(first unit, end)]`` of each run of consecutive units of one document."""
    cuts = [0, *(np.flatnonzero(np.diff(unit_document)) + 1).tolist(), len(unit_document)]
    return [(a, b) for a, b in pairwise(cuts) if b > a]


def _loaded(source: Path | str, device: str) -> tuple:
    """``(checkpoint, torch device)``: ``source`` read and put on ``device`` (:data:`vizlm.core.choices.DEVICES`;
    one this machine lacks is refused before anything is read)."""
    from vizlm.core.distributed import resolve_device

    where = resolve_device(device)
    ckpt = load_checkpoint(source)
    ckpt.model.to(where)
    return ckpt, where


class _Blocks:
    """The finished documents of a corpus pass whose evidence is not written yet (:func:`write_attribution`), kept
    in the cache folder (``partial/NAME/``, outside the repository), one file a document, each written whole:
    a pass that was stopped reads them back and computes the others. ``key`` (the checkpoint's and the corpus's
    checksums, the method, the sentences, the commit of the code) must match, else they are computed again."""

    def __init__(self, name: str, key: dict) -> None:
        self.folder = paths.cache_dir() / "partial" / name
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        stamp = self.folder / "key.json"
        if self.folder.is_dir() and (not stamp.is_file() or json.loads(stamp.read_text("utf-8")).get("digest") != digest):
            shutil.rmtree(self.folder)  # another checkpoint, sample or code: nothing to go on from
        self.folder.mkdir(parents=True, exist_ok=True)
        if not stamp.is_file():
            write_text(stamp, json.dumps({"digest": digest}), force=True)

    def get(self, b: int) -> dict | None:
        from safetensors.numpy import load_file

        path = self.folder / f"{b}.safetensors"
        if not path.is_file():
            return None
        arrays = load_file(str(path))
        meta = json.loads((self.folder / f"{b}.json").read_text("utf-8"))
        return {"sums": _paired_sums(arrays, meta["keys"]),
                "targets": meta["targets"], "seconds": meta["seconds"]}

    def put(self, b: int, sums: dict, targets: int, seconds: float) -> dict:
        from safetensors.numpy import save_file

        write_text(self.folder / f"{b}.json", json.dumps({"keys": list(sums), "targets": targets, "seconds": seconds}),
                   force=True)
        tmp = self.folder / f".{b}.safetensors.tmp"
        save_file(_flat_sums(sums), str(tmp))
        tmp.replace(self.folder / f"{b}.safetensors")  # the arrays last: a block is there when its arrays are
        return {"sums": sums, "targets": targets, "seconds": seconds}

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def write_attribution(name: str, source: Path | str, corpus: str, split: str, method: str, limit: int | None = None,
                      force: bool = False, log=None, per_document: int | None = None, device: str = "cpu") -> Path:
    """Attribute the predictions of checkpoint ``source`` over ``corpus``/``split`` (the first ``per_document``
    sentences of each document, else the first ``limit`` sentences, else all; :func:`corpus_sample`,
    :func:`vizlm.inspect.attribution_corpus.collect`) and keep, in ``evidence/attribution/NAME/``, the per-unit sums
    the report's means and intervals are computed from (:func:`vizlm.inspect.attribution_corpus.unit_sums`), each
    unit's document, and a config: the checkpoint's and the corpus's checksums, every parameter, the command and
    the commit. No permutation test: the faithfulness evidence runs Jain & Wallace's as they did
    (:func:`write_faithfulness`). Written whole; existing evidence is replaced only with ``force``. Computed a
    document at a time, each document kept until the evidence is written: run again after a stop, it goes on
    from the documents done (:class:`_Blocks`, on the same device only). ``device``: where the model computes
    (:data:`vizlm.core.choices.DEVICES`), recorded in the config."""
    from vizlm.inspect import attribution_corpus as va
    from vizlm.inspect.attribution import DEFAULT_STEPS

    log = log or sys.stderr
    dest = attribution_folder(name)
    if dest.exists() and not force:
        raise EvidenceError(f"{dest} exists already (attribution evidence of {name}); pass --force to rewrite it")
    ckpt, where = _loaded(source, device)
    commit = paths.commit()  # the code that computes it, read before it starts
    document = meta_context(ckpt.meta) == "document"
    select, units, unit_document = corpus_sample(corpus, split, document, per_document, limit)
    index = select if select is not None else list(range(len(load_corpus(corpus, split).sentences)))[:limit]
    progress = _Progress(name, "attribution", log)
    key = {"name": name, "checkpoint_sha256": checkpoint_digest(ckpt), "corpus_sha256": load_corpus(corpus, split).checksum,
           "method": method, "sentences": index, "commit": commit, "device": where.type}
    # a document at a time (a unit never spans two), each kept until the evidence is written, so that a run
    # that was stopped goes on where it was (:class:`_Blocks`)
    blocks = _Blocks(name, key)
    sums: dict[str, list] = {}
    targets, seconds = 0, 0.0
    for b, (u0, u1) in enumerate(_runs_of(unit_document)):
        part = blocks.get(b)
        if part is None:
            start = time.perf_counter()
            chosen = [index[i] for u in units[u0:u1] for i in u]
            rows, n = va.collect(ckpt, corpus, split, method, permutations=0, select=chosen,
                                 progress=lambda f, a=u0, n=u1 - u0: progress((a + f * n) / len(units)))
            if n != u1 - u0:
                raise EvidenceError(f"{name}: {n} units read in document {b}, {u1 - u0} expected")
            part = blocks.put(b, va.unit_sums(rows, n), len(rows["unit"]), time.perf_counter() - start)
        targets, seconds = targets + part["targets"], seconds + part["seconds"]
        for k, pair in part["sums"].items():
            sums.setdefault(k, []).append(pair)
    n_units = len(units)
    sums = {k: (np.concatenate([s for s, _ in parts]), np.concatenate([c for _, c in parts])) for k, parts in sums.items()}
    if any(len(s) != n_units for s, _ in sums.values()):
        raise EvidenceError(f"{name}: the documents' sums do not add up to the {n_units} units read")
    config = {
        "checkpoint": Path(source).name, "checkpoint_sha256": checkpoint_digest(ckpt), "family": ckpt.meta.get("model"),
        "context": meta_context(ckpt.meta), "window": va.model_window(ckpt), "attention": ckpt.has_attention,
        "corpus": corpus, "split": split, "corpus_sha256": load_corpus(corpus, split).checksum, "limit": limit,
        "per_document": per_document, "method": method,
        "n_steps": DEFAULT_STEPS if method == "integrated-gradients" else None, "units": n_units,
        "unit": "passages" if document else "sentences", "documents": int(unit_document.max(initial=-1)) + 1,
        "resampled": "documents", "targets": targets, "permutations": 0, "max_offset": va.MAX_OFFSET,
        "passage_tokens": va.PASSAGE_TOKENS if document else None, "absolute": True, "seed": 0, "n_boot": va.N_BOOT,
        "written_by": f"vizlm reproduce --attribution {Path(source).name}", "commit": commit,
        "source": display_path(Path(source)), "threads": torch.get_num_threads(), "device": where.type,
        "wall_s": round(seconds, 1),  # the documents' own, summed over the runs that computed them
    }
    arrays = _flat_sums(sums)
    arrays[UNIT_DOCUMENT] = unit_document

    _publish_sums(dest, config, arrays)
    blocks.clear()
    print(f"evidence: {name} -> {dest} ({config['targets']:,} targets in {n_units:,} {config['unit']} of "
          f"{config['documents']} documents, {config['wall_s']:.0f} s)", file=log)
    return dest


# --------------------------------------------------------------------------- the faithfulness tests (beyond the papers)
FAITHFULNESS = "faithfulness"  # evidence/faithfulness/CHECKPOINT/: the literature's tests of attention, one model
FAITHFULNESS_FILES = ("config.json", "sums.safetensors")


def _per_unit(values, units, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per unit the sum and the count of the finite ``values`` (what a mean's cluster bootstrap needs)."""
    values, units = np.asarray(values, float), np.asarray(units, int)
    ok = np.isfinite(values)
    return (np.bincount(units[ok], weights=values[ok], minlength=n),
            np.bincount(units[ok], minlength=n).astype(float))


def _fraction_key(f: float) -> str:
    return f"f{100 * f:g}"  # 0.01 -> "f1": no dot in a key (keys split at their last dot)


def faithfulness_sums(frames: dict, n_units: int) -> dict[str, np.ndarray]:
    """What the report needs of :func:`vizlm.inspect.faithfulness_corpus.collect`'s frames to recompute every statistic of
    :func:`vizlm.inspect.faithfulness_corpus.statistics` and its interval: per unit the sum and count of each quantity a mean is
    taken of (``NAME.sum``, ``NAME.count``, float64 [units]), and, for the medians (Jain & Wallace's per-row
    medians, the adversary's JSD), the rows' values with their unit (``NAME.value``, ``NAME.unit``). The rows
    chosen are :func:`~vizlm.inspect.faithfulness_corpus.statistics`' (its test: the evidence gives its numbers)."""
    out: dict[str, np.ndarray] = {}

    def mean(name: str, values, units) -> None:
        out[f"{name}.sum"], out[f"{name}.count"] = _per_unit(values, units, n_units)

    def rows(name: str, values, units) -> None:
        values, units = np.asarray(values, float), np.asarray(units, int)
        ok = np.isfinite(values)
        out[f"{name}.value"], out[f"{name}.unit"] = values[ok], units[ok].astype(np.int32)

    a = frames["agreement"]
    if len(a):
        chosen = a[a.positions >= 2]
        for c in (c for c in a.columns if "~" in c):
            mean(f"agreement.{c}", chosen[c], chosen.unit)
    p = frames["permutations"]
    if len(p):
        shuffled = p[p.word_slots >= 2]
        mean("permutations.fixed_weight", shuffled.fixed_weight, shuffled.unit)
        ok = shuffled[np.isfinite(shuffled.max_weight)]
        for c in ("max_weight", "median_tvd", "median_jsd", "median_abs_dlogp"):
            rows(f"permutations.{c}", ok[c], ok.unit)  # NaN in none of them where max_weight is finite
    v = frames["adversarial"]
    if len(v):
        moved = v[v.slots >= 2]
        mean("adversarial.jsd", moved.jsd, moved.unit)
        rows("adversarial.jsd", moved.jsd, moved.unit)
        mean("adversarial.over_half_ln2", (moved.jsd > 0.5 * math.log(2)).astype(float), moved.unit)
        mean("adversarial.abs_dlogp", moved.dlogp.abs(), moved.unit)
    u = frames["uniform"]
    if len(u):
        mean("uniform.nll", -u.logprob, u.unit)
        mean("uniform.uniform_nll", -u.uniform_logprob, u.unit)
        mean("uniform.uniform_minus_own", u.logprob - u.uniform_logprob, u.unit)
        if "frozen_logprob" in u:
            mean("uniform.frozen_nll", -u.frozen_logprob, u.unit)
            mean("uniform.frozen_minus_own", u.logprob - u.frozen_logprob, u.unit)
            ok = u[np.isfinite(u.seed_jsd)]  # rows with two slots or more
            mean("uniform.seed_jsd", ok.seed_jsd, ok.unit)
    e = frames["erasure"]
    for r, g in (e.groupby("ranking", sort=False) if len(e) else ()):
        for k, gk in g.groupby("k"):
            mean(f"erasure.{r}.k{int(k)}.dlogp", gk.dlogp, gk.unit)
            mean(f"erasure.{r}.k{int(k)}.flip", gk.flip, gk.unit)
    o = frames["aopc"]
    for r, g in (o.groupby("ranking", sort=False) if len(o) else ()):
        per_row = g.groupby(["unit", "row"])[["comprehensiveness", "sufficiency"]].mean().reset_index()
        for c in ("comprehensiveness", "sufficiency"):
            mean(f"aopc.{r}.{c}", per_row[c], per_row.unit)
            for f, gf in g.groupby("fraction"):
                mean(f"aopc.{r}.{_fraction_key(f)}.{c}", gf[c], gf.unit)
    t = frames["paths"]
    if len(t):
        from vizlm.inspect.faithfulness_corpus import MAX_DISTANCE

        for d in range(1, MAX_DISTANCE + 2):  # MAX_DISTANCE + 1: every distance beyond
            sel = t[t.distance == d] if d <= MAX_DISTANCE else t[t.distance > MAX_DISTANCE]
            for c in ("read", "state", "total"):
                mean(f"paths.d{d}.{c}", sel[c].abs(), sel.unit)
    return out


@dataclass
class FaithfulnessEvidence:
    """A bundled attention checkpoint's faithfulness tests over a corpus split, read back
    (:func:`read_faithfulness`): the config (every parameter, the command, the commit) and the arrays of
    :func:`faithfulness_sums`, with ``unit.document``: the document of each unit (sentence or passage)."""

    name: str
    config: dict
    arrays: dict[str, np.ndarray] = field(repr=False)

    def clusters(self, resample: str = "documents") -> tuple[np.ndarray, int]:
        """``(cluster of each unit, number of clusters)``: the documents (the Brown splits sample documents, as
        :mod:`vizlm.reproduce.verdicts` and :func:`~vizlm.inspect.faithfulness_corpus.corpus_faithfulness` resample
        them; the units where all are of one, :func:`~vizlm.inspect.attribution_corpus.resample_clusters`) or the
        units themselves (sentences or passages: narrower intervals that ignore the documents)."""
        from vizlm.inspect.attribution_corpus import clusters_of

        return clusters_of(self.arrays[UNIT_DOCUMENT], resample)

    def keys(self, prefix: str) -> list[str]:
        """The quantities stored under ``prefix`` (``"erasure.attention."``: its ``k1.dlogp`` ...), in order."""
        names = dict.fromkeys(k.rsplit(".", 1)[0] for k in self.arrays if k.startswith(prefix))
        return [k[len(prefix):] for k in names]

    def mean(self, name: str, resample: str = "documents") -> dict | None:
        """The mean of ``name`` over its rows with a 95% bootstrap interval resampling ``resample`` (the config's
        seed and resamples); None when the evidence has no such quantity."""
        return self.pooled([name], resample)

    def pooled(self, names: list[str], resample: str = "documents") -> dict | None:
        """The mean over the rows of several quantities together (e.g. distances 3 to 5 of the two paths)."""
        from vizlm.inspect.attribution_corpus import cluster_mean

        if any(f"{n}.sum" not in self.arrays for n in names):
            return None
        return cluster_mean(*self._sums(names, resample), n_boot=self.config["n_boot"], seed=self.config["seed"])

    def ratio(self, num: list[str], den: list[str], resample: str = "documents") -> dict | None:
        """``sum(num) / sum(den)`` of the sums of quantities (the read's share: |read| / (|read| + |state|)),
        with a 95% bootstrap interval from the draws of :func:`mean` (:func:`vizlm.inspect.attribution_corpus.cluster_ratio`)."""
        from vizlm.inspect.attribution_corpus import cluster_ratio

        if any(f"{n}.sum" not in self.arrays for n in [*num, *den]):
            return None
        top, bottom = self._sums(num, resample)[0], self._sums(den, resample)[0]
        return cluster_ratio(top, bottom, self.config["n_boot"], self.config["seed"])

    def difference(self, a: str, b: str, resample: str = "documents") -> dict | None:
        """The mean of ``a - b`` over the rows both have (two rankings of the same rows: the same counts) with its
        95% interval, a paired comparison; None when they are not of the same rows."""
        from vizlm.inspect.attribution_corpus import cluster_mean

        if f"{a}.sum" not in self.arrays or f"{b}.sum" not in self.arrays:
            return None
        (sa, ca), (sb, cb) = self._sums([a], resample), self._sums([b], resample)
        if not np.array_equal(ca, cb):
            return None
        return cluster_mean(sa - sb, ca, n_boot=self.config["n_boot"], seed=self.config["seed"])

    def median(self, name: str, resample: str = "documents", where: tuple[str, float, float, bool] | None = None) -> dict | None:
        """The median of the rows' ``name`` (``.value``) with its 95% bootstrap interval; ``where``:
        ``(other, lo, hi, closed)``, the rows whose ``other`` lies in [lo, hi) ([lo, hi] when ``closed``)."""
        from vizlm.inspect.attribution_corpus import cluster_interval

        if f"{name}.value" not in self.arrays:
            return None
        values, units = self.arrays[f"{name}.value"], self.arrays[f"{name}.unit"].astype(int)
        if where is not None:
            other, lo, hi = self.arrays[f"{where[0]}.value"], where[1], where[2]
            keep = (other >= lo) & ((other <= hi) if where[3] else (other < hi))
            values, units = values[keep], units[keep]
        cluster, n = self.clusters(resample)
        return cluster_interval(values, cluster[units], n, "median", self.config["n_boot"], self.config["seed"])

    def rows(self, name: str) -> int:
        """How many rows a mean of ``name`` is over (a quantity defined on every row of its test)."""
        return int(self.arrays[f"{name}.count"].sum())

    def _rankings(self, prefix: str) -> list[str]:
        """The rankings stored under ``prefix``: attention, gradient, the attribution methods, random."""
        have = {k.split(".")[0] for k in self.keys(prefix)}
        order = ["attention", "gradient", *self.config["methods"], "random"]
        return [r for r in order if r in have] + sorted(have - set(order))

    def _sums(self, names: list[str], resample: str) -> tuple[np.ndarray, np.ndarray]:
        cluster, n = self.clusters(resample)
        s = sum(self.arrays[f"{k}.sum"] for k in names)
        c = sum(self.arrays[f"{k}.count"] for k in names)
        return np.bincount(cluster, weights=s, minlength=n), np.bincount(cluster, weights=c, minlength=n)

    def statistics(self, resample: str = "documents") -> dict:
        """:func:`vizlm.inspect.faithfulness_corpus.statistics`' numbers from the evidence alone, in its layout (agreement,
        permutations by weight bin, adversarial, uniform, erasure, aopc, paths), every interval resampling
        ``resample``: ``"documents"``, the report's and the library's intervals, or ``"units"`` (:meth:`clusters`)."""
        from vizlm.inspect.faithfulness_corpus import MAX_DISTANCE, WEIGHT_BINS

        def m(name):
            return self.mean(name, resample)

        methods = list(self.config["methods"])
        out: dict = {}
        stored = set(self.keys("agreement."))  # in the library's order: attention, slot-effect, then the methods
        if pairs := [f"{a}~{b}" for a, b in combinations(["attention", "slot-effect", *methods], 2)
                     if f"{a}~{b}" in stored]:
            tau = {c: m(f"agreement.{c}") for c in pairs}
            out["agreement"] = {"kendall_tau": tau, "ceiling": [c for c in pairs if not c.startswith("attention~")]}
        if "permutations.max_weight.value" in self.arrays:
            cols = ("median_tvd", "median_jsd", "median_abs_dlogp")
            weight, bins = self.arrays["permutations.max_weight.value"], []
            for lo, hi in pairwise(WEIGHT_BINS):
                where = ("permutations.max_weight", lo, hi, hi == WEIGHT_BINS[-1])
                rows = int(((weight >= lo) & ((weight <= hi) if where[3] else (weight < hi))).sum())
                bins.append({"lo": lo, "hi": hi, "rows": rows,
                             **{c: self.median(f"permutations.{c}", resample, where) for c in cols}})
            out["permutations"] = {"rows": self.rows("permutations.fixed_weight"), "bins": bins,
                                   "all": {c: self.median(f"permutations.{c}", resample) for c in cols},
                                   "fixed_weight": m("permutations.fixed_weight")}
        if "adversarial.jsd.sum" in self.arrays:
            out["adversarial"] = {"rows": self.rows("adversarial.over_half_ln2"), "mean_jsd": m("adversarial.jsd"),
                                  "median_jsd": self.median("adversarial.jsd", resample),
                                  "share_over_half_ln2": m("adversarial.over_half_ln2"),
                                  "mean_abs_dlogp": m("adversarial.abs_dlogp")}
        if "uniform.nll.sum" in self.arrays:
            out["uniform"] = {k: m(f"uniform.{k}") for k in self.keys("uniform.")}
        if self.keys("erasure."):
            rankings = self._rankings("erasure.")
            out["erasure"] = {}
            for r in rankings:
                ks = sorted({int(k.split(".")[0][1:]) for k in self.keys(f"erasure.{r}.")})
                out["erasure"][r] = {"k": ks, "dlogp": [m(f"erasure.{r}.k{k}.dlogp") for k in ks],
                                     "flip": [m(f"erasure.{r}.k{k}.flip") for k in ks]}
        if self.keys("aopc."):
            out["aopc"] = {}
            for r in self._rankings("aopc."):
                fractions = [f for f in self.config["fractions"] if f"aopc.{r}.{_fraction_key(f)}.sufficiency.sum" in self.arrays]
                out["aopc"][r] = {c: m(f"aopc.{r}.{c}") for c in ("comprehensiveness", "sufficiency")}
                out["aopc"][r]["by_fraction"] = {str(f): {c: m(f"aopc.{r}.{_fraction_key(f)}.{c}")
                                                          for c in ("comprehensiveness", "sufficiency")} for f in fractions}
        if "paths.d1.read.sum" in self.arrays:
            ds = range(1, MAX_DISTANCE + 2)
            out["paths"] = {"distance": [str(d) if d <= MAX_DISTANCE else f">{MAX_DISTANCE}" for d in ds],
                            **{c: [m(f"paths.d{d}.{c}") for d in ds] for c in ("read", "state", "total")},
                            "read_share": [self.ratio([f"paths.d{d}.read"], [f"paths.d{d}.read", f"paths.d{d}.state"],
                                                      resample) for d in ds]}
        return out


def faithfulness_folder(name: str) -> Path:
    return paths.evidence_dir() / FAITHFULNESS / name


def faithfulness_name(checkpoint: str, head: tuple[int, int] | None = None) -> str:
    """The evidence of a checkpoint's faithfulness tests: its name, or, for a Transformer, one per head tested
    (``transformer-doc.head2.1``: layer 2, head 1, counted from 1 as :func:`vizlm.present.links.head_code`)."""
    return checkpoint if head is None else f"{checkpoint}.head{head_code(head)}"


def faithfulness_checkpoint(name: str) -> str:
    """The checkpoint a :func:`faithfulness_name` is of."""
    stem, dot, code = name.rpartition(".head")
    return stem if dot and parse_head_code(code) else name


def faithfulness_names() -> list[str]:
    """The evidence of faithfulness tests there is (:func:`faithfulness_name`: checkpoints, and Transformers'
    heads)."""
    return _checkpoints_with(FAITHFULNESS)


def read_faithfulness(name: str) -> FaithfulnessEvidence | None:
    """The faithfulness evidence of checkpoint ``name``, None when it has none; :class:`EvidenceError` when a
    file is missing or unreadable."""
    read = _read_sums(faithfulness_folder(name), FAITHFULNESS_FILES, f"vizlm reproduce --faithfulness {name}")
    return None if read is None else FaithfulnessEvidence(name, *read)


def sample_words(per_document: int | None, limit: int | None) -> str:
    """A corpus run's sample of its split in words (the report's and the app's): the first sentences of every
    document, or of the split."""
    return ("the first sentence of each of its documents" if per_document == 1
            else f"the first {per_document} sentences of each of its documents" if per_document
            else f"its first {limit:,} sentences" if limit else "all its sentences")


def first_of_each_document(corpus: str, split: str, per_document: int) -> list[int]:
    """The indices of the first ``per_document`` sentences of every document of a processed split (all of a
    shorter one): a sample spread over the documents the split samples, so a bootstrap over documents has
    every document of the split to draw."""

    seen: dict[str, int] = {}
    out = []
    for i, doc in enumerate(document_keys(load_corpus(corpus, split).ids)):
        if seen.get(doc, 0) < per_document:
            seen[doc] = seen.get(doc, 0) + 1
            out.append(i)
    return out


def write_faithfulness(name: str, source: Path | str, corpus: str, split: str, limit: int | None = None,
                       per_document: int | None = None, permutations: int | None = None, n_steps: int | None = None,
                       adversary_steps: int | None = None, force: bool = False, log=None,
                       frozen: Path | str | None = None, head: tuple[int, int] | None = None,
                       device: str = "cpu") -> Path:
    """Run the faithfulness tests of checkpoint ``source`` over ``corpus``/``split`` (the first ``per_document``
    sentences of each document, else the first ``limit`` sentences; :func:`vizlm.inspect.faithfulness_corpus.collect`) and
    keep, in ``evidence/faithfulness/NAME/``, what every statistic and its interval are computed from
    (:func:`faithfulness_sums`, with each unit's document) and a config: the checkpoint's and the corpus's
    checksums, every parameter, the command, the commit and the wall time. ``frozen``: another seed's checkpoint
    of the model, whose attention the model reads in Wiegreffe & Pinter's frozen baseline (its checksum kept too).
    ``head``: a Transformer's head tested (``(layer, head)`` from 0; ``name`` is then :func:`faithfulness_name`'s).
    ``device``: where the models compute, recorded in the config. Written whole; existing evidence is replaced only
    with ``force``."""
    from vizlm.inspect import faithfulness as vf
    from vizlm.inspect import faithfulness_corpus as vfc
    from vizlm.inspect import faithfulness_erasure as vfe
    from vizlm.inspect.attribution import DEFAULT_STEPS, TEXT_METHODS
    from vizlm.inspect.attribution_corpus import N_BOOT, PASSAGE_TOKENS, model_window

    log = log or sys.stderr
    dest = faithfulness_folder(name)
    if dest.exists() and not force:
        raise EvidenceError(f"{dest} exists already (faithfulness evidence of {name}); pass --force to rewrite it")
    ckpt, where = _loaded(source, device)
    try:
        head = vfc.testable_head(ckpt, head)
    except vf.FaithfulnessError as exc:
        raise EvidenceError(f"{name}: {exc}") from None
    other = None if frozen is None else _loaded(frozen, device)[0]
    commit = paths.commit()  # the code that computes it, read before it starts
    permutations = vf.PERMUTATIONS if permutations is None else permutations
    n_steps = DEFAULT_STEPS if n_steps is None else n_steps
    adversary_steps = vf.ADVERSARY_STEPS if adversary_steps is None else adversary_steps
    data = load_corpus(corpus, split)
    document = meta_context(ckpt.meta) == "document"
    select, units, unit_document = corpus_sample(corpus, split, document, per_document, limit)
    progress = _Progress(name, "faithfulness", log)

    frames, documents = vfc.collect(ckpt, corpus, split, limit, permutations, adversary_steps=adversary_steps,
                                    n_steps=n_steps, other=other, progress=progress, select=select, head=head)
    n_units = len(documents)
    if n_units != len(units) or not np.array_equal(documents, unit_document):
        raise EvidenceError(f"{name}: {n_units} units read, {len(units)} expected")
    arrays = faithfulness_sums(frames, n_units)
    arrays[UNIT_DOCUMENT] = unit_document
    config = {
        "checkpoint": name, "checkpoint_sha256": checkpoint_digest(ckpt), "family": ckpt.meta.get("model"),
        "head": None if head is None else list(head),
        "view": None if head is None else head_words(head, ckpt.model.config.heads),
        "context": meta_context(ckpt.meta), "window": model_window(ckpt), "corpus": corpus, "split": split,
        "corpus_sha256": data.checksum, "limit": limit, "per_document": per_document,
        "sentences": sum(map(len, units)), "units": n_units, "unit": "passages" if document else "sentences",
        "documents": int(unit_document.max(initial=-1)) + 1,
        "resampled": "documents", "targets": len(frames["uniform"]), "permutations": permutations,
        "epsilon": vf.EPSILON, "adversary_steps": adversary_steps, "adversary_lr": vf.ADVERSARY_LR,
        "methods": list(TEXT_METHODS), "n_steps": n_steps, "ks": list(vfe.ERASE_K), "fractions": list(vfe.FRACTIONS),
        "weight_bins": list(vfc.WEIGHT_BINS), "max_distance": vfc.MAX_DISTANCE, "masking": vfe.MASKING,
        "passage_tokens": PASSAGE_TOKENS if document else None,
        "frozen": None if other is None else Path(frozen).name,
        "frozen_sha256": None if other is None else checkpoint_digest(other), "seed": 0, "n_boot": N_BOOT,
        "written_by": f"vizlm reproduce --faithfulness {Path(source).name}", "commit": commit,
        "source": display_path(Path(source)),
        "threads": torch.get_num_threads(), "device": where.type, "wall_s": round(progress.seconds(), 1),
    }

    _publish_sums(dest, config, arrays)
    print(f"evidence: {name} -> {dest} ({config['targets']:,} targets in {n_units:,} {config['unit']} of "
          f"{config['documents']} documents, {config['wall_s']:.0f} s)", file=log)
    return dest


CASES = "cases"  # evidence/cases/CHECKPOINT.json: a bundled model's case labels against chance over one split


def cases_path(name: str) -> Path:
    return paths.evidence_dir() / CASES / f"{name}.json"


def write_cases(name: str, source: Path | str, corpus: str, split: str, limit: int | None, force: bool = False,
                log=None, device: str = "cpu") -> Path:
    """Label the highlights of checkpoint ``source`` over ``corpus``/``split`` (its first ``limit`` sentences,
    the Cases page's threshold; :func:`vizlm.inspect.case_gallery.corpus_cases`) and keep each label's rate beside its
    distance-matched chance rate with the interval of their difference (:func:`vizlm.inspect.case_chance.label_rates_vs_chance`)
    in ``evidence/cases/NAME.json``, with the checkpoint's and the corpus's checksums, the command and the commit.
    ``device``: where the model computes, recorded. Existing evidence is replaced only with ``force``."""
    from vizlm.core import files
    from vizlm.inspect.case_gallery import corpus_cases

    log = log or sys.stderr
    dest = cases_path(name)
    if dest.exists() and not force:
        raise EvidenceError(f"{dest} exists already (case evidence of {name}); pass --force to rewrite it")
    ckpt, where = _loaded(source, device)
    start = time.perf_counter()
    report = corpus_cases(ckpt, corpus, split, limit=limit, use_cache=False)
    doc = {
        "checkpoint": name, "checkpoint_sha256": checkpoint_digest(ckpt), "context": meta_context(ckpt.meta),
        "corpus": corpus, "split": split, "corpus_sha256": load_corpus(corpus, split).checksum, "limit": limit,
        "threshold": report.threshold, "pairs": report.pairs, "chance": report.chance,
        "written_by": f"vizlm reproduce --cases {name}", "commit": paths.commit(), "source": display_path(Path(source)),
        "device": where.type, "wall_s": round(time.perf_counter() - start, 1),
    }
    dest.parent.mkdir(parents=True, exist_ok=True)
    files.write_text(dest, json.dumps(doc, indent=1, sort_keys=True) + "\n", force=True)
    print(f"evidence: {name} -> {dest} ({report.pairs:,} highlighted pairs, {doc['wall_s']:.0f} s)", file=log)
    return dest


def read_cases(name: str) -> dict | None:
    """A checkpoint's case evidence (:func:`write_cases`), None when it has none."""
    path = cases_path(name)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise EvidenceError(f"{path}: cannot be read ({e})") from e


__all__ = ["ATTRIBUTION", "CASES", "FAITHFULNESS", "UNIT_DOCUMENT", "AttributionEvidence", "FaithfulnessEvidence",
           "attribution_checkpoint", "attribution_folder", "attribution_name", "attribution_names", "cases_path",
           "corpus_sample", "faithfulness_folder", "faithfulness_names", "faithfulness_sums",
           "first_of_each_document", "read_attribution", "read_cases", "read_faithfulness", "write_attribution",
           "write_cases", "write_faithfulness"]
