"""Token-id files (``vizlm prepare --token-ids``): the same batches, scores and training as the
text files, chunked reading, shares across ranks, and peak memory that does not grow with the
corpus."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ROOT
from corpora import make_corpus

from vizlm import cli
from vizlm.core import paths
from vizlm.data.batches import document_batches, iter_batches, split_documents
from vizlm.data.folder import document_sizes
from vizlm.data.registry import load_corpus
from vizlm.data.vocab import Vocab, encode_sentences
from vizlm.modeling.evaluate import score, score_split
from vizlm.models import build_model
from vizlm.data.prepare import prepare_token_ids
from vizlm.data.batches import DocumentEpoch, SentenceEpoch
from vizlm.data.tokens import TokenSplit, open_split


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = make_corpus(tmp_path_factory.mktemp("corpus") / "data", train=900, valid=130, test=70, doc_sentences=23)
    counts = prepare_token_ids(root)
    assert set(counts) == {"brown/train", "brown/valid", "brown/test", "wsj/test"}
    return root


@pytest.fixture(autouse=True)
def _no_overrides_left():
    yield
    paths.clear_overrides()


def _text_split(data: Path, split: str) -> tuple[list[list[int]], list[int]]:
    c = load_corpus("brown", split, data)
    return encode_sentences(c.sentences, Vocab.for_corpus("brown", data)), document_sizes(c.ids)


def test_files_hold_the_text_and_its_documents(data):
    vocab = Vocab.for_corpus("brown", data)
    stored = TokenSplit.open(data / "brown", "train")
    seqs, sizes = _text_split(data, "train")
    memory = TokenSplit.from_sequences(seqs, sizes)
    assert stored.source != "memory" and len(stored) == len(seqs) == 900 and stored.n_documents == len(sizes)
    for chunk_size in (None, 500, 1):  # one chunk; several; every document a chunk of its own
        chunks = stored.chunks(chunk_size)
        assert [c.d0 for c in chunks[1:]] == [c.d1 for c in chunks[:-1]] and chunks[-1].d1 == len(sizes)
        assert all(c.t1 - c.t0 <= (chunk_size or 10**9) or c.d1 - c.d0 == 1 for c in chunks)
        got = [stored.read(c).sentence(i) for c in chunks for i in range(c.s1 - c.s0)]
        assert got == seqs
        assert [n for c in chunks for n in stored.read(c).document_sentences()] == sizes
    for name in ("_tokens", "_sentences", "_documents"):
        whole = getattr(stored, name)[0 : len(getattr(stored, name))]
        assert np.array_equal(whole, getattr(memory, name))
    assert open_split("brown", "train", vocab, data).source == str(data / "brown")  # the files, not the text
    wsj = open_split("wsj", "test", vocab, data)  # WSJ is encoded with Brown's vocabulary
    assert wsj.source == str(data / "wsj")


@pytest.mark.parametrize("balance", [False, True])
def test_one_chunk_batches_exactly_as_in_memory(data, balance):
    stored = TokenSplit.open(data / "brown", "train")
    seqs, sizes = _text_split(data, "train")
    steps = list(SentenceEpoch(stored, 16, seed=7).steps())
    batches = list(iter_batches(seqs, 16, shuffle=True, seed=7))
    assert len(steps) == len(batches)
    for step, (idx, inputs, targets) in zip(steps, batches):
        assert torch.equal(step.inputs, inputs) and torch.equal(step.targets, targets)
        assert step.tokens == int((targets != 0).sum())
    segs = document_batches(split_documents(seqs, sizes), 5, 9, shuffle=True, seed=7, balance=balance)
    steps = list(DocumentEpoch(stored, 5, 9, seed=7, balance=balance).steps())
    assert len(steps) == len(segs)
    for step, seg in zip(steps, segs):
        assert torch.equal(step.inputs, seg.inputs) and torch.equal(step.targets, seg.targets)
        assert torch.equal(step.starts, seg.starts) and step.tokens == int((seg.targets != 0).sum())


@pytest.mark.parametrize("document", [False, True])
def test_ranks_share_every_step_and_chunks_cover_the_epoch(data, document):
    stored = TokenSplit.open(data / "brown", "train")

    def epoch():
        return DocumentEpoch(stored, 6, 8, seed=3, max_tokens=700) if document else SentenceEpoch(stored, 16, seed=3, max_tokens=700)

    assert len(epoch().chunks) > 5
    whole = list(epoch().steps())
    assert len(whole) == len(epoch())
    assert sum(s.tokens for s in whole) == stored.n_tokens  # every target once
    shares = [list(epoch().steps(rank, 3)) for rank in range(3)]
    for k, step in enumerate(whole):
        parts = [s[k] for s in shares]
        assert all(p.tokens == step.tokens for p in parts)
        rows = [p for p in parts if p.inputs is not None]
        assert sum(int((p.targets != 0).sum()) for p in rows) == step.tokens
        assert sum(len(p.inputs) for p in rows) == len(step.inputs)
    late = list(epoch().steps(1, 3, start=len(whole) - 4))  # a resumed epoch starts where it stopped
    assert len(late) == 4 and all(torch.equal(a.targets, b.targets) for a, b in zip(late, shares[1][-4:]) if a.inputs is not None)


@pytest.mark.parametrize("context", ["sentence", "document"])
def test_scores_from_files_equal_the_text_and_add_up_over_ranks(data, context):
    torch.manual_seed(0)
    model = build_model("kvp", vocab_size=54, emb_dim=6, hidden_dim=5, context=context).double().eval()
    seqs, sizes = _text_split(data, "valid")
    reference = score(model, seqs, sizes)
    stored = TokenSplit.open(data / "brown", "valid")
    for max_tokens in (None, 300):
        total = score_split(model, stored, max_tokens=max_tokens)
        assert total.tokens == reference.total_tokens and total.sentences == len(seqs)
        assert total.nll == pytest.approx(reference.total_nll, rel=1e-9)
        shares = [score_split(model, stored, r, 3, max_tokens=max_tokens) for r in range(3)]
        assert sum(s.tokens for s in shares) == total.tokens and sum(s.sentences for s in shares) == len(seqs)
        assert sum(s.nll for s in shares) == pytest.approx(total.nll, rel=1e-9)
        assert all(s.tokens > 0 for s in shares) or max_tokens is None  # one chunk of 2 batches: rank 2 has none


def test_training_from_the_files_equals_training_from_the_text(data, tmp_path, capsys):
    args = ["train", "--model", "lstm", "--emb-dim", "6", "--hidden-dim", "5", "--epochs", "1", "--batch-size", "32"]
    assert cli.main(["--data", str(data), *args, "--out", str(tmp_path / "files")]) == 0
    text = tmp_path / "text"
    text.mkdir()
    for f in data.rglob("*"):  # the same corpus without the token-id files
        if f.is_file() and ".tokens" not in f.name and not f.name.endswith((".sentences.npy", ".documents.npy")):
            (text / f.relative_to(data)).parent.mkdir(parents=True, exist_ok=True)
            (text / f.relative_to(data)).write_bytes(f.read_bytes())
    assert cli.main(["--data", str(text), *args, "--out", str(tmp_path / "text-out")]) == 0
    a, b = (json.loads((tmp_path / d / "config.json").read_text()) for d in ("files", "text-out"))
    assert a["metrics"]["valid_perplexity"] == pytest.approx(b["metrics"]["valid_perplexity"], rel=1e-9)
    assert a["corpus"]["checksums"] == b["corpus"]["checksums"]
    capsys.readouterr()
    assert cli.main(["--data", str(data), "eval", "--checkpoint", str(tmp_path / "files"), "--corpus", "brown",
                     "--split", "valid", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["perplexity"] == pytest.approx(a["metrics"]["valid_perplexity"], rel=1e-9) and doc["sentences"] == 130


def test_files_older_than_their_text_are_refused(tmp_path):
    root = make_corpus(tmp_path / "data", train=50, valid=10, test=10)
    prepare_token_ids(root)
    with open(root / "brown" / "valid.txt", "a", encoding="utf-8") as fh:
        fh.write("w1 w2\n")
    with pytest.raises(ValueError, match="prepare --token-ids"):
        TokenSplit.open(root / "brown", "valid")


# --------------------------------------------------------------------------- peak memory
# VmHWM, the peak resident memory of this process image. Not getrusage's ru_maxrss: a child
# forked from pytest starts with pytest's peak, which execve keeps.
PEAK = """
import sys
from vizlm import cli
code = cli.main(sys.argv[1:])
hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]
print("PEAK_KB", hwm.split()[1], file=sys.stderr)
sys.exit(code)
"""


def _peak_mb(args: list[str], env: dict) -> float:
    run = subprocess.run([sys.executable, "-c", PEAK, *args], env=env, capture_output=True, text=True, check=False, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    return int(run.stderr.rsplit("PEAK_KB", 1)[1].split()[0]) / 1024


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the peak from /proc (Linux)")
def test_peak_memory_does_not_grow_with_the_corpus(tmp_path):
    """Eval and a whole training epoch (both contexts) over a corpus of ~0.25M and of ~1M tokens,
    in chunks of 64k tokens: the peak resident memory stays the same (within 25 MB). Reading the
    text instead (no token-id files) grows by about 200 MB over the same corpora (~400 MB from 0.5M
    to 2M tokens, 812 MB from 1M to 4M), which shows the measurement sees it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VIZLM_CHUNK_TOKENS": str(2**16), "OMP_NUM_THREADS": "1"}
    roots, tokens = {}, {}
    for size, sentences in (("small", 25_000), ("large", 100_000)):
        roots[size] = make_corpus(tmp_path / size, train=sentences, valid=2000, test=500, doc_sentences=200)
        tokens[size] = prepare_token_ids(roots[size])["brown/train"]
    assert tokens["large"] > 3.9 * tokens["small"] > 0.95e6
    ckpt = tmp_path / "ckpt"
    assert cli.main(["--data", str(roots["small"]), "train", "--model", "lstm", "--emb-dim", "8", "--hidden-dim", "8",
                     "--dry-run", "--out", str(ckpt)]) == 0
    commands = {
        "eval": ["eval", "--checkpoint", str(ckpt), "--corpus", "brown", "--split", "train", "--json"],
        "train": ["train", "--model", "lstm", "--emb-dim", "8", "--hidden-dim", "8", "--epochs", "1",
                  "--batch-size", "256", "--save-every", "0", "--threads", "1"],
        "train-document": ["train", "--model", "lstm", "--emb-dim", "8", "--hidden-dim", "8", "--epochs", "1",
                           "--context", "document", "--streams", "128", "--bptt", "50", "--save-every", "0", "--threads", "1"],
    }
    peaks = {}
    for name, argv in commands.items():
        for size, root in roots.items():
            out = ["--out", str(tmp_path / f"{name}-{size}")] if argv[0] == "train" else []
            peaks[name, size] = _peak_mb(["--data", str(root), *argv, *out], env)
    growth = {name: peaks[name, "large"] - peaks[name, "small"] for name in commands}
    assert all(g < 25 for g in growth.values()), (peaks, growth)
    for size, root in roots.items():  # the text path, for contrast
        for f in root.rglob("*.tokens.json"):
            f.unlink()
        peaks["text", size] = _peak_mb(["--data", str(root), *commands["eval"]], env)
    print("peak MB:", {f"{k[0]}/{k[1]}": round(v, 1) for k, v in peaks.items()})
    assert peaks["text", "large"] - peaks["text", "small"] > 100, peaks  # four times the bound above


# --------------------------------------------------------------------------- corpus statistics
def _tiny_checkpoint(folder: Path, name: str, vocab: Vocab, seed: int, **kw):
    from vizlm.modeling.checkpoint import load_checkpoint, save_checkpoint

    torch.manual_seed(seed)
    model = build_model(name, vocab_size=len(vocab), emb_dim=6, hidden_dim=5, **kw)
    if name == "amsrn":  # W_pr starts at zero; give the read path weight
        torch.nn.init.uniform_(model.read_proj.weight, -0.3, 0.3)
    save_checkpoint(folder / f"{name}-{seed}", model, name, vocab)
    return load_checkpoint(folder / f"{name}-{seed}")


@pytest.mark.parametrize("context", ["sentence", "document"])
def test_corpus_statistics_in_chunks_equal_the_text(data, tmp_path, monkeypatch, context):
    from vizlm.inspect import corpus_stats as vc

    paths.set_overrides(data=data)
    monkeypatch.setenv("VIZLM_CHUNK_TOKENS", "300")  # many chunks
    vocab = Vocab.for_corpus("brown", data)
    a = _tiny_checkpoint(tmp_path, "lstm", vocab, 1)
    b = _tiny_checkpoint(tmp_path, "kvp", vocab, 2, window=3, context=context)
    c = load_corpus("brown", "valid", data)
    chunked = vc.compare_corpus(a, b, "brown", "valid", use_cache=False)
    whole = vc.compare(a, b, c.sentences, c.ids)
    assert chunked.summary.pop("resampled") == whole.summary.pop("resampled")
    assert chunked.summary == pytest.approx(whole.summary, rel=1e-9)
    assert np.allclose(chunked.table.ppl_b, whole.table.ppl_b, rtol=1e-9)
    stored = TokenSplit.open(data / "brown", "valid")
    total = vc.sentence_nll_split(b.model, stored)  # one process
    shares = [vc.sentence_nll_split(b.model, stored, r, 3) for r in range(3)]  # three ranks' shares
    assert all(np.count_nonzero(s) for s in shares) and sum(np.count_nonzero(s) for s in shares) == len(stored)
    assert np.allclose(sum(shares), total, rtol=1e-12) and np.all(total > 0)
    if context == "sentence":
        amsrn = _tiny_checkpoint(tmp_path, "amsrn", vocab, 3)
        got = vc.positions_corpus([a, amsrn, b], "brown", "valid", window=4, use_cache=False)
        want = vc.attention_by_position([a, amsrn, b], c.sentences, window=4, use_cache=False, ids=c.ids)
        assert got.skipped == want.skipped == [a.label]
        assert got.resampled == want.resampled == {amsrn.label: "documents", b.label: "documents"}
        assert np.allclose(got.frame[["mean", "lo", "hi"]].to_numpy(float), want.frame[["mean", "lo", "hi"]].to_numpy(float),
                           rtol=1e-9, atol=1e-12)
        assert got.entropy == pytest.approx(want.entropy, rel=1e-9) and got.beyond == pytest.approx(want.beyond, rel=1e-9)
        assert got.peak == pytest.approx(want.peak, rel=1e-9)
        batches = [list(vc._split_batches(stored, 16, r, 3)) for r in range(3)]
        assert all(batches) and sum(int((t != 0).sum()) for share in batches for _, t, _ in share) == stored.n_tokens
