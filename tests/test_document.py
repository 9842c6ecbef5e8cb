"""Document context: segments read with a carried state == one pass over the document
== a step-by-step reference; no prediction sees a later token, also across a segment
boundary; states reset at document starts; document batching and scoring."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from conftest import ATTENTION_MODELS, all_variants, tiny_model
from reference import reference_document

from vizlm.data.batches import document_batches, document_plan, document_tokens, split_documents
from vizlm.data.folder import document_sizes
from vizlm.data.vocab import SPECIALS, Vocab
from vizlm.modeling.evaluate import score, score_documents, score_sentences
from vizlm.models import REGISTRY, build_model, make_config
from vizlm.models.base import slot_mask
from vizlm.modeling.train import lm_loss

# every configuration of conftest, plus memories shorter than the document for AMSRN and Salton
VARIANTS = all_variants() + [
    pytest.param("amsrn", {"selection": "shared", "memory": 4}, id="amsrn-memory=4"),
    pytest.param("amsrn", {"selection": "independent", "memory": 1}, id="amsrn-memory=1"),
    pytest.param("salton", {"score": "combined", "memory": 3}, id="salton-memory=3"),
    pytest.param("salton", {"score": "single", "memory": 6}, id="salton-single-memory=6"),
    pytest.param("amsrn", {"selection": "shared", "memory": 4, "start_slot": False}, id="amsrn-memory=4-no-start"),
]
ATTENTION_VARIANTS = [p for p in VARIANTS if p.values[0] in ATTENTION_MODELS]
CUTS = (5, 12, 13, 21)  # segment boundaries inside a 23-token document: segments of 5, 7, 1, 8, 2


def doc_model(name: str, kw: dict):
    return tiny_model(name, context="document", **kw)


@pytest.fixture
def document() -> torch.Tensor:
    """Two streams of running text, 23 inputs each, <s> first."""
    g = torch.Generator().manual_seed(2)
    x = torch.randint(4, 40, (2, 23), generator=g)
    x[:, 0] = 1
    x[:, 9] = 2  # a </s> inside: sentence boundaries are ordinary tokens in document context
    return x


def read_in_segments(model, x: torch.Tensor, cuts=CUTS) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Segment by segment with the carried state; attention mapped to document slots (B, T, T)."""
    B, T = x.shape
    state = model.initial_state(B)
    M = model.memory_size()
    logits, att = [], torch.zeros(B, T, T, dtype=torch.float64)
    bounds = [0, *cuts, T]
    for p, q in itertools.pairwise(bounds):
        out = model(x[:, p:q], state)
        state = out.state
        logits.append(out.logits)
        if out.attention is None:
            continue
        assert out.attention.shape == (B, q - p, M + q - p - 1)  # [carried memory; own outputs]
        # slot s is document slot s + p - M + 1 (carried slot M - 1 holds h_p); the slots before
        # document slot 0 are padding and never attended
        pad = max(0, M - 1 - p)
        assert (out.attention[:, :, :pad] == 0).all()
        att[:, p:q, pad + p - M + 1 : q] = out.attention[:, :, pad:]
    return torch.cat(logits, 1), (att if model.has_attention else None)


# --------------------------------------------------------------------------- equality
@pytest.mark.parametrize("name,kw", VARIANTS)
def test_segments_equal_one_pass(name, kw, document):
    model = doc_model(name, kw)
    with torch.no_grad():
        whole = model(document)  # one pass: the document as a single sequence from a zero state
        logits, att = read_in_segments(model, document)
    torch.testing.assert_close(logits, whole.logits, atol=1e-5, rtol=1e-5)
    if model.has_attention:
        torch.testing.assert_close(att, whole.attention, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name,kw", VARIANTS)
def test_segments_equal_step_by_step_reference(name, kw, document):
    model = doc_model(name, kw)
    with torch.no_grad():
        logits, att = read_in_segments(model, document)
        ref_logits, ref_att = reference_document(model, document)
    torch.testing.assert_close(logits, ref_logits, atol=1e-5, rtol=1e-5)
    if model.has_attention:
        torch.testing.assert_close(att, ref_att, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name,kw", VARIANTS)
def test_no_prediction_sees_a_later_token_across_segments(name, kw, document):
    model = doc_model(name, kw)
    T = document.shape[1]
    with torch.no_grad():
        base_logits, base_att = read_in_segments(model, document)
        for p in range(1, T):
            changed = document.clone()
            changed[:, p] = (changed[:, p] + 7) % 36 + 4
            logits, att = read_in_segments(model, changed)
            # rows 0..p-1 read inputs 0..p-1 only, in this segment or an earlier one
            torch.testing.assert_close(logits[:, :p], base_logits[:, :p], atol=0, rtol=0)
            if att is not None:
                torch.testing.assert_close(att[:, :p], base_att[:, :p], atol=0, rtol=0)
            assert not torch.equal(logits[:, p:], base_logits[:, p:])


@pytest.mark.parametrize("name,kw", ATTENTION_VARIANTS)
def test_attention_rows_in_document_context(name, kw, document):
    """Rows sum to 1 over the window of memory slots, carried ones included, and nothing else."""
    model = doc_model(name, kw)
    with torch.no_grad():
        _, att = read_in_segments(model, document)
    T = document.shape[1]
    allowed = slot_mask(T, model.window_size())
    start = getattr(model.config, "start_slot", True)
    if not start:
        allowed[:, 0] = False  # no h_0: the first row of a document has nothing to attend to
    assert (att[:, ~allowed] == 0).all() and (att >= 0).all()
    torch.testing.assert_close(att.sum(-1), allowed.any(-1).to(att.dtype).expand(att.shape[:2]))
    torch.testing.assert_close(att[:, 0, 0], torch.full((2,), float(start), dtype=att.dtype))  # only h_0 at the start


@pytest.mark.parametrize("name,kw", ATTENTION_VARIANTS)
def test_padding_slots_of_the_carried_memory_are_masked(name, kw, document):
    """Slots older than the stream's document start (``valid``) never count, whatever they hold."""
    model = doc_model(name, kw)
    state = model.initial_state(2)
    dirty = model.initial_state(2)
    dirty.memory[:, :-1] = torch.randn_like(dirty.memory[:, :-1]) * 5  # all but h_0 are padding
    with torch.no_grad():
        clean, noisy = model(document[:, :7], state), model(document[:, :7], dirty)
    torch.testing.assert_close(noisy.logits, clean.logits, atol=0, rtol=0)
    torch.testing.assert_close(noisy.attention, clean.attention, atol=0, rtol=0)


@pytest.mark.parametrize("name,kw", VARIANTS)
def test_state_resets_at_a_document_start(name, kw, document):
    """A stream that starts a new document after reading another equals that document read alone."""
    model = doc_model(name, kw)
    with torch.no_grad():
        state = model(document[:, :11], model.initial_state(2)).state  # stream 0 reads doc A, stream 1 doc B
        state = state.reset(torch.tensor([True, False]))  # stream 0 starts doc C, stream 1 goes on with B
        out = model(document[:, 11:], state)
        alone = model(document[:1, 11:])  # doc C read alone, one pass from a zero state
        both = model(document[1:])  # doc B in one pass
    torch.testing.assert_close(out.logits[0], alone.logits[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.logits[1], both.logits[0, 11:], atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------- batching and scoring
def random_docs(seed: int, n_docs: int = 7) -> list[list[list[int]]]:
    g = torch.Generator().manual_seed(seed)
    return [
        [[int(t) for t in torch.randint(4, 40, (int(n),), generator=g)]
         for n in torch.randint(0, 9, (int(k),), generator=g)]
        for k in torch.randint(1, 6, (n_docs,), generator=g)
    ]


def test_document_sizes_and_tokens():
    ids = ["ca01:0", "ca01:1", "ca02:0", "wsj_0001:0", "wsj_0001:1", "line0", "line1", "ca01:0"]
    assert document_sizes(ids) == [2, 1, 2, 1, 1, 1]
    assert split_documents(list("abcdefgh"), [2, 1, 2, 1, 1, 1]) == [["a", "b"], ["c"], ["d", "e"], ["f"], ["g"], ["h"]]
    assert split_documents(list("ab"), None) == [["a"], ["b"]]
    with pytest.raises(ValueError, match="hold 2 sentences but there are 3"):
        split_documents(list("abc"), [2])
    assert document_tokens([[5, 6], [], [7]]) == [1, 5, 6, 2, 2, 7, 2]


@pytest.mark.parametrize("streams,bptt,shuffle", [(3, 4, False), (2, 1, True), (64, 20, True), (1, 50, False)])
def test_document_batches_cover_every_target_once(streams, bptt, shuffle):
    docs = random_docs(0)
    flat = [(t[:-1], t[1:]) for t in map(document_tokens, docs)]
    inputs = [w for i, _ in flat for w in i]
    targets = [w for _, t in flat for w in t]
    starts = {sum(len(t) for _, t in flat[:d]) for d in range(len(docs))}  # first target of each document
    seen = []
    B = None
    for seg in document_batches(docs, streams, bptt, shuffle=shuffle, seed=3):
        assert seg.inputs.shape[1] == bptt and (B is None or seg.inputs.shape[0] <= B)  # streams only drop out
        B = seg.inputs.shape[0]
        real = seg.positions >= 0
        for b in range(B):
            pos = seg.positions[b][real[b]].tolist()
            assert real[b].tolist() == sorted(real[b].tolist(), reverse=True)  # padding only at the end
            assert bool(seg.starts[b]) == (bool(pos) and pos[0] in starts)  # reset exactly at document starts
            assert pos == list(range(pos[0], pos[0] + len(pos))) if pos else True
            assert seg.inputs[b][real[b]].tolist() == [inputs[i] for i in pos]
            assert seg.targets[b][real[b]].tolist() == [targets[i] for i in pos]
            assert (seg.targets[b][~real[b]] == 0).all()
            seen += pos
    assert sorted(seen) == list(range(len(targets)))


@pytest.mark.parametrize("streams,bptt,shuffle", [(3, 4, False), (2, 1, True), (64, 20, True), (5, 3, True)])
def test_balanced_plan_keeps_every_stream_busy(streams, bptt, shuffle):
    """Training's layout: the segments cut into equal runs, every target read once and in order
    within a stream; a reset at each document start and at each stream's start, nowhere else;
    every step but the last ones reads every stream."""
    docs = random_docs(0)
    sizes = [len(document_tokens(d)) - 1 for d in docs]
    first = [sum(sizes[:d]) for d in range(len(docs))]
    plan = document_plan(sizes, streams, bptt, shuffle, seed=3, balance=True)
    whole = document_plan(sizes, streams, bptt, shuffle, seed=3)
    n_segments = int((whole.length > 0).sum())
    assert len(plan) == -(-n_segments // plan.start.shape[1])  # the fewest steps the segments fit in
    assert len(plan) <= len(whole)
    assert set(plan.active) <= {plan.start.shape[1], plan.start.shape[1] - 1}  # only the last stream ends early
    seen = []
    for b in range(plan.start.shape[1]):
        for k in range(len(plan)):
            n = int(plan.length[k, b])
            if not n:
                assert not plan.length[k:, b].any()  # a stream only stops at its end
                break
            s0 = int(plan.start[k, b])
            continues = k > 0 and int(plan.start[k - 1, b] + plan.length[k - 1, b]) == s0 and s0 not in first
            assert bool(plan.starts[k, b]) == (not continues)  # reset unless the stream reads on in its document
            seen += range(s0, s0 + n)
    assert sorted(seen) == list(range(sum(sizes)))
    cut = int(plan.starts.sum()) - sum(1 for n in sizes if n)
    assert 0 <= cut < plan.start.shape[1]  # at most one cut document per stream boundary
    assert plan.start.shape[1] <= min(streams, len(docs))  # no more streams than documents


@pytest.mark.parametrize("name,kw", VARIANTS)
def test_score_documents_equals_each_document_read_alone(name, kw):
    """Per-sentence NLL over parallel streams (documents starting mid-batch) == one pass per document."""
    model = doc_model(name, kw)
    docs = random_docs(1)
    brute_nll, brute_tokens = [], []
    for doc in docs:
        toks = document_tokens(doc)
        with torch.no_grad():
            logp = model(torch.tensor([toks[:-1]])).logits[0].log_softmax(-1)  # (T, V)
        tok_nll = [-float(logp[i, t]) for i, t in enumerate(toks[1:])]
        at = 0
        for s in doc:  # a sentence is charged for its words and its </s>
            brute_nll.append(sum(tok_nll[at : at + len(s) + 1]))
            brute_tokens.append(len(s) + 1)
            at += len(s) + 1
    for streams, segment in ((2, 3), (3, 7), (64, 100)):
        scores = score_documents(model, docs, streams=streams, segment=segment)
        assert scores.tokens == brute_tokens
        for got, want in zip(scores.nll, brute_nll):
            assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9)


def test_score_follows_the_context_of_the_model():
    docs = random_docs(2)
    seqs = [s for d in docs for s in d]
    sizes = [len(d) for d in docs]
    sentence_model, document_model = tiny_model("kvp", window=3), tiny_model("kvp", window=3, context="document")
    # a sentence model reads every sentence alone, whatever the documents
    assert score(sentence_model, seqs, sizes).nll == score_sentences(sentence_model, seqs).nll
    # a document model reads the documents as running text ...
    assert score(document_model, seqs, sizes).nll == score_documents(document_model, docs).nll
    # ... and, without documents, every sentence as a document of its own: the sentence reading
    alone = score(document_model, seqs, None)
    for a, b in zip(alone.nll, score_sentences(document_model, seqs).nll):
        assert math.isclose(a, b, rel_tol=1e-9)
    assert alone.tokens == score(document_model, seqs, sizes).tokens


# --------------------------------------------------------------------------- config and loss
def test_context_config():
    assert make_config("lstm").context == "sentence"
    assert make_config("amsrn").memory is None  # the whole sentence, as before
    assert make_config("amsrn", context="document").memory == 100
    assert make_config("salton", context="document", memory=7).memory == 7
    with pytest.raises(ValueError, match="valid: sentence, document"):
        make_config("kvp", context="paragraph")
    with pytest.raises(ValueError, match="memory must be >= 1"):
        make_config("amsrn", memory=0)
    with pytest.raises(ValueError, match="finite memory"):
        tiny_model("amsrn").initial_state(2)


def test_old_checkpoints_load_in_sentence_context(tmp_path):
    """A config.json written before contexts existed has no "context": it loads as sentence."""
    import json

    from vizlm.modeling.checkpoint import load_checkpoint, save_checkpoint

    vocab = Vocab(list(SPECIALS) + [f"w{i}" for i in range(36)])
    save_checkpoint(tmp_path, tiny_model("amsrn").float(), "amsrn", vocab)
    meta = json.loads((tmp_path / "config.json").read_text())
    del meta["config"]["context"], meta["config"]["memory"]
    (tmp_path / "config.json").write_text(json.dumps(meta))
    config = load_checkpoint(tmp_path).model.config
    assert config.context == "sentence" and config.memory is None
    save_checkpoint(tmp_path, tiny_model("amsrn", context="document").float(), "amsrn", vocab)
    config = load_checkpoint(tmp_path).model.config
    assert config.context == "document" and config.memory == 100


def test_entropy_regulariser_with_a_carried_state(document):
    model = doc_model("amsrn", {"memory": 4})
    model.config.entropy_weight = 0.5
    targets = torch.roll(document, -1, 1)
    state = model(document[:, :8], model.initial_state(2)).state
    loss, nll, _ = lm_loss(model, document[:, 8:], targets[:, 8:], state)
    model.config.entropy_weight = 0.0
    loss0, nll0, _ = lm_loss(model, document[:, 8:], targets[:, 8:], state)
    assert torch.isfinite(loss) and loss > loss0 and torch.equal(nll, nll0)


# --------------------------------------------------------------------------- what a state carries
def test_a_state_without_start_slot_counts_states_only(document):
    """AMSRN without h_0 starts a document with no valid slot (reset too); narrow, detach and the
    state after a segment keep that, so a later reset still drops the start slot."""
    model = doc_model("amsrn", {"memory": 4, "start_slot": False})
    state = model.initial_state(2)
    assert state.start_slots == 0 and state.valid.tolist() == [0, 0]
    with torch.no_grad():
        after = model(document[:, :2], state).state
    assert after.valid.tolist() == [2, 2] and after.start_slots == 0
    for kept in (after.detach(), after.narrow(1), after.reset(torch.tensor([True, False]))):
        assert kept.start_slots == 0
    assert after.reset(torch.tensor([True, False])).valid.tolist() == [0, 2]
    assert doc_model("amsrn", {"memory": 4}).initial_state(2).reset(torch.tensor([True, True])).valid.tolist() == [1, 1]


@pytest.mark.parametrize("name,kw", [("rm", {"window": 4}), ("amsrn", {"memory": 5, "start_slot": False}),
                                     ("kvp", {"window": 3})])
def test_carried_state_survives_a_resume(name, kw, document):
    """Training's resume keeps every stream's carried state (vizlm.modeling.resume.gather_carried / scatter_carried):
    RM's memory of word embeddings (2d wide) and a state without a start slot come back as they were,
    and reading on from them equals reading on without the resume."""
    from vizlm.core.distributed import SINGLE
    from vizlm.modeling.resume import gather_carried as _gather_carried
    from vizlm.modeling.resume import scatter_carried as _scatter_carried

    model = doc_model(name, kw)
    with torch.no_grad():
        state = model(document[:, :9], model.initial_state(2)).state
        saved = _gather_carried(state, SINGLE)
        back = _scatter_carried(saved, SINGLE, torch.device("cpu"), model.start_slots())
        assert back.memory.shape == state.memory.shape == (2, model.memory_size(), model.slot_size())
        assert back.start_slots == state.start_slots == model.start_slots()
        torch.testing.assert_close(model(document[:, 9:], back).logits, model(document[:, 9:], state).logits,
                                   atol=0, rtol=0)
        fresh = back.reset(torch.tensor([True, True]))
        torch.testing.assert_close(model(document[:, 9:], fresh).logits, model(document[:, 9:]).logits)


def test_checkpoints_keep_the_start_slot_setting(tmp_path):
    """start_slot is stored in config.json; a config.json written before it existed loads with the slot."""
    import json

    from vizlm.modeling.checkpoint import load_checkpoint, save_checkpoint

    vocab = Vocab(list(SPECIALS) + [f"w{i}" for i in range(36)])
    save_checkpoint(tmp_path, tiny_model("amsrn", start_slot=False).float(), "amsrn", vocab)
    meta = json.loads((tmp_path / "config.json").read_text())
    assert meta["config"]["start_slot"] is False
    assert load_checkpoint(tmp_path).model.start_slots() == 0
    del meta["config"]["start_slot"]
    (tmp_path / "config.json").write_text(json.dumps(meta))
    assert load_checkpoint(tmp_path).model.config.start_slot is True


def test_a_text_file_is_one_document_per_blank_line_block(tmp_path, capsys):
    """``vizlm eval --text-file``: blank lines separate documents; a document model reads each
    block as running text (== score_documents over the blocks), not the file as one."""
    import json

    from vizlm.modeling.checkpoint import save_checkpoint
    from vizlm.cli import main
    from vizlm.data.registry import read_text_file

    text = tmp_path / "docs.txt"
    text.write_text("The dog barked . It was loud .\nThe owner came .\n\n  \n\nA new story starts . It ends .\n\n",
                    encoding="utf-8")
    sizes: list[int] = []
    sents = read_text_file(text, documents=sizes)
    assert sizes == [3, 2] and len(sents) == 5  # whitespace-only lines are blank too; no empty document
    words = sorted({w for s in sents for w in s})
    vocab = Vocab([*SPECIALS, *words])
    torch.manual_seed(0)
    model = build_model("kvp", vocab_size=len(vocab), emb_dim=6, hidden_dim=5, window=3, context="document",
                        init_range=1.0).eval()  # large weights: the context visibly changes the predictions
    save_checkpoint(tmp_path / "ck", model, "kvp", vocab)
    assert main(["eval", "--checkpoint", str(tmp_path / "ck"), "--text-file", str(text), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    seqs = [vocab.encode(s) for s in sents]
    want = score_documents(model, [seqs[:3], seqs[3:]])
    whole = score_documents(model, [seqs])
    assert got["documents"] == 2 and got["sentences"] == 5
    assert math.isclose(got["nll"], sum(want.nll) / sum(want.tokens), rel_tol=1e-6)
    assert not math.isclose(got["nll"], sum(whole.nll) / sum(whole.tokens), rel_tol=1e-3)


@pytest.mark.parametrize("name,kw", [(name, {}) for name in REGISTRY if name != "transformer"]  # no recurrent layer
                         + [("lstm", {"rnn": "gru"})])
def test_a_stacked_model_is_handed_a_contiguous_state_when_streams_end(name, kw):
    """cuDNN refuses a non-contiguous ``hx`` ('rnn: hx is not contiguous'); the CPU does not, so
    this checks what CUDA would reject: with 2 layers, the state of (layers, B, d) narrowed to the
    streams that still have a document (State.narrow) reaches the recurrent layer contiguous."""
    model = doc_model(name, {"layers": 2, **kw})
    seen = []

    def check(_module, args):
        if len(args) > 1 and args[1] is not None:
            hx = args[1] if isinstance(args[1], tuple) else (args[1],)
            seen.append(all(t.is_contiguous() for t in hx))

    model.rnn.register_forward_pre_hook(check)
    docs = random_docs(3, n_docs=5)  # documents of different lengths: streams end at different times
    score_documents(model, docs, streams=3, segment=4)
    assert seen and all(seen), f"{seen.count(False)} of {len(seen)} states were not contiguous"
