"""Every batcher is one computation (vizlm/data/batches.py): the in-memory batches equal those built
from lists, as the batchers did before they read a chunk's arrays."""

from __future__ import annotations

import random

import pytest
import torch

from vizlm.data.batches import collate, document_batches, document_tokens, iter_batches, plan_batches
from vizlm.data.vocab import Vocab


def _sentences(n: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(4, 50) for _ in range(rng.choice([0, 1, 2, 3, 7, 12]))] for _ in range(n)]


def _collate_lists(seqs):
    """Sentences -> (inputs, targets) padded with 0, built from the lists: ``<s> w_1..w_n`` -> ``w_1..w_n </s>``."""
    T = max(len(s) for s in seqs) + 1
    inputs, targets = torch.zeros(len(seqs), T, dtype=torch.long), torch.zeros(len(seqs), T, dtype=torch.long)
    for b, s in enumerate(seqs):
        inputs[b, : len(s) + 1] = torch.tensor([Vocab.bos_id, *s])
        targets[b, : len(s) + 1] = torch.tensor([*s, Vocab.eos_id])
    return inputs, targets


@pytest.mark.parametrize("shuffle, max_tokens", [(False, None), (True, None), (False, 20)])
def test_sentence_batches_equal_the_lists_collated(shuffle, max_tokens):
    seqs = _sentences(40, 1)
    batches = list(iter_batches(seqs, 6, shuffle=shuffle, seed=3, max_tokens=max_tokens))
    assert [b[0] for b in batches] == plan_batches([len(s) for s in seqs], 6, shuffle, 3, max_tokens)
    for idx, inputs, targets in batches:
        want = _collate_lists([seqs[i] for i in idx])
        assert torch.equal(inputs, want[0]) and torch.equal(targets, want[1])
        assert inputs.dtype == targets.dtype == torch.long
    assert all(torch.equal(a, b) for a, b in zip(collate(seqs), _collate_lists(seqs)))


@pytest.mark.parametrize("streams, bptt, balance", [(3, 4, False), (2, 5, True)])
def test_document_segments_read_the_running_text(streams, bptt, balance):
    """Each segment's inputs and targets are the documents' running text (``<s> s_1 </s> s_2 </s> ...``) at
    its positions: targets all but the first token, inputs all but the last, 0 at padding."""
    seqs = _sentences(30, 2)
    docs = [seqs[0:4], [], seqs[4:5], seqs[5:17], seqs[17:30]]
    running = [document_tokens(d) for d in docs]
    assert running[1] == [Vocab.bos_id] and running[2] == [Vocab.bos_id, *seqs[4], Vocab.eos_id]
    flat_in = torch.tensor([t for r in running for t in r[:-1]])
    flat_out = torch.tensor([t for r in running for t in r[1:]])
    seen = 0
    for seg in document_batches(docs, streams, bptt, shuffle=True, seed=5, balance=balance):
        real = seg.positions >= 0
        assert torch.equal(seg.targets[real], flat_out[seg.positions[real]])
        assert torch.equal(seg.inputs[real], flat_in[seg.positions[real]])
        assert not seg.targets[~real].any() and not seg.inputs[~real].any()
        assert seg.inputs.dtype == seg.targets.dtype == torch.long
        seen += int(real.sum())
    assert seen == len(flat_out)
