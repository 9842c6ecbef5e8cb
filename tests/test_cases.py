"""Case rules on hand-built attention, the tagger, collocations, and corpus_cases on a tiny model."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from vizlm.inspect import case_chance as vc
from vizlm.inspect.analysis import SentenceAnalysis, analyze_batch, analyze_tokens
from vizlm.inspect.reading import BOUNDARY
from vizlm.inspect.case_chance import LabelChance, LabelReading, label_rates_vs_chance
from vizlm.inspect.case_gallery import CaseReport, corpus_cases, gallery_order
from vizlm.inspect.case_rules import LABELS, stem
from vizlm.inspect.cases import Case, label_cases
from vizlm.modeling.checkpoint import Checkpoint
from vizlm.data.registry import load_corpus
from vizlm.data.vocab import EOS, Vocab
from vizlm.models import build_model
from vizlm.data.resources import Collocations, collocation_rows, load_collocations
from vizlm.present.serialize import analysis_dict
from vizlm.data.tagger import Tagger, load_tagger, simplify_tag, tag_tokens, train_counts
from vizlm.inspect.highlight import Share, TopK

COLLOCATIONS = Collocations({("more", "than", 2): (166, 6.13), ("on", "the", 2): (900, 0.5), ("in", "of", 2): (3, 7.0)})


def make_sa(sentence: str, tags: str | None, focus: dict[int, int], weight: float = 0.8) -> SentenceAnalysis:
    """A SentenceAnalysis whose row ``t`` puts ``weight`` on the slot of token ``focus[t]``.

    All other weight sits on slot 0 (``<s>``), which label_cases skips, so each row
    has exactly one highlighted word.
    """
    words = sentence.split()
    n = len(words)
    T = n + 1
    attention = np.zeros((T, T))
    attention[:, 0] = 1.0
    for t, a in focus.items():
        assert 0 <= a <= t - 2, "row t can only see tokens up to t - 2"
        attention[t, a + 2] = weight
        attention[t, 0] = 1.0 - weight
    return SentenceAnalysis(
        model="hand-built",
        text=sentence,
        tokens=words,
        norms=words,
        offsets=[(0, 0)] * n,
        unk=[False] * n,
        targets=words + [EOS],
        logprobs=np.full(T, -1.0),
        top_words=[["the"]] * T,
        top_probs=np.full((T, 1), 0.5),
        attention=attention,
        gates=None,
        tags=tags.split() if tags else None,
    )


def only_case(sa: SentenceAnalysis, collocations=COLLOCATIONS) -> Case:
    cases = label_cases(sa, collocations=collocations)
    assert len(cases) == 1, cases
    return cases[0]


# --------------------------------------------------------------------------- trigger
def test_trigger_same_word_and_same_stem():
    c = only_case(make_sa("the market fell and the market rose", "at nn vbd cc at nn vbd", {5: 1}))
    assert c.word == "market" and c.attended == "market" and c.slot == 3 and c.token == 1
    assert "trigger" in c.labels and "same word" in c.evidence["trigger"]
    c = only_case(make_sa("the tax rose and new taxes", "at nn vbd cc jj nns", {5: 1}))
    assert c.labels == ["trigger"] and "stem 'tax-'" in c.evidence["trigger"]
    assert stem("studies") == stem("study") and stem("stopped") == stem("stop") and stem("taxes") != stem("tan")


def test_trigger_pronoun_refers_back():
    c = only_case(make_sa("the workers said that they", "at nns vbd cs ppss", {4: 1}))
    assert c.labels == ["trigger"] and "plural noun 'workers'" in c.evidence["trigger"]
    c = only_case(make_sa("mrs. williams had a list which she", "np np hvd at nn wdt pps", {6: 1}))
    assert "trigger" in c.labels and "williams" in c.evidence["trigger"]


def test_no_trigger_for_function_words_or_disagreeing_pronouns():
    assert only_case(make_sa("the market fell and the dog", "at nn vbd cc at nn", {4: 0})).labels == []
    assert "trigger" not in only_case(make_sa("the workers said that he", "at nns vbd cs pps", {4: 1})).labels
    assert "trigger" not in only_case(make_sa("the president said that it", "at nn vbd cs pps", {4: 1})).labels
    assert "trigger" not in only_case(make_sa("the man met the woman and she", "at nn vbd at nn cc pps", {6: 1})).labels


def test_a_bare_name_is_no_trigger_of_a_gendered_pronoun():
    """Tags do not tell a name's gender: "Peter ... she" is no trigger, nor "Peter ... he"; a title does."""
    assert "trigger" not in only_case(make_sa("peter said that she", "np vbd cs pps", {3: 0})).labels
    assert "trigger" not in only_case(make_sa("peter said that he", "np vbd cs pps", {3: 0})).labels
    c = only_case(make_sa("mr. peter jones said that he", "np np np vbd cs pps", {5: 2}))
    assert "trigger" in c.labels and "'jones'" in c.evidence["trigger"]
    assert "trigger" not in only_case(make_sa("mr. peter jones said that she", "np np np vbd cs pps", {5: 2})).labels


# --------------------------------------------------------------------------- grammar
def test_grammar_agreement_determiner_and_auxiliary():
    c = only_case(make_sa("the dogs in the yard are", "at nns in at nn ber", {5: 1}))
    assert c.labels == ["grammar"] and "plural subject 'dogs' agrees with 'are'" in c.evidence["grammar"]
    c = only_case(make_sa("the dog in the yard is", "at nn in at nn bez", {5: 1}))
    assert "singular subject 'dog'" in c.evidence["grammar"]
    c = only_case(make_sa("he saw the old red house", "pps vbd at jj jj nn", {5: 2}))
    assert c.labels == ["grammar"] and "determiner 'the'" in c.evidence["grammar"]
    c = only_case(make_sa("it has already gone", "pps hvz rb vbn", {3: 1}))
    assert "past participle 'gone'" in c.evidence["grammar"]
    c = only_case(make_sa("we could not see", "ppss md * vb", {3: 1}))
    assert "modal 'could' takes the bare verb 'see'" in c.evidence["grammar"]


def test_no_grammar_without_a_dependency():
    # a singular noun when predicting "are": number disagrees
    assert only_case(make_sa("the dog in the yard are", "at nn in at nn ber", {5: 1})).labels == []
    # a nearer subject pronoun takes the verb
    assert only_case(make_sa("the war , i think he is", "at nn , ppss vb pps bez", {6: 1})).labels == []
    # "a ... dogs": number disagrees; "the man saw dogs": a verb ends the noun phrase
    assert only_case(make_sa("he saw a big dogs", "pps vbd at jj nns", {4: 2})).labels == []
    assert only_case(make_sa("the man saw dogs", "at nn vbd nns", {3: 0})).labels == []
    # a modal and a bare verb, but a whole clause between them
    assert only_case(make_sa("we could see the dogs run", "ppss md vb at nns vb", {5: 1})).labels == []


def test_agreement_across_a_relative_clause():
    c = only_case(make_sa("the dogs that the boy feeds are", "at nns wps at nn vbz ber", {6: 1}))
    assert c.labels == ["grammar"] and "plural subject 'dogs' agrees with 'are'" in c.evidence["grammar"]
    c = only_case(make_sa("the dogs that we feed have", "at nns wps ppss vb hv", {5: 1}))
    assert "plural subject 'dogs' agrees with 'have'" in c.evidence["grammar"]
    # the head disagrees, a second finite verb ends the sentence's subject, a subject after the clause takes the verb
    assert only_case(make_sa("the dog that the boys feed are", "at nn wps at nns vb ber", {6: 1})).labels == []
    assert only_case(make_sa("the dogs that the boy feeds said are", "at nns wps at nn vbz vbd ber", {7: 1})).labels == []
    assert only_case(make_sa("the dogs that the boy feeds they are", "at nns wps at nn vbz ppss ber", {7: 1})).labels == []


# --------------------------------------------------------------------------- phrase
def test_phrase_from_collocations():
    c = only_case(make_sa("we need more time than", "ppss vb ap nn cs", {4: 2}))
    assert c.labels == ["phrase"] and "166 times" in c.evidence["phrase"] and "'more time than'" in c.evidence["phrase"]


def test_no_phrase_at_other_distance_low_pmi_or_rare_pair():
    assert only_case(make_sa("we need more of the time than", "ppss vb ap in at nn cs", {6: 2})).labels == []
    assert only_case(make_sa("he sat on a the", "pps vbd in at at", {4: 2})).labels == []  # PMI 0.5 < 4
    assert only_case(make_sa("he was in front of", "pps bedz in nn in", {4: 2})).labels == []  # seen 3 times < 5
    no_stats = Collocations({})
    assert only_case(make_sa("we need more time than", "ppss vb ap nn cs", {4: 2}), collocations=no_stats).labels == []


def test_collocation_rows_compute_pmi_and_are_sorted():
    sents = [["a", "b", "x", "c"]] * 3 + [["d", "e", "f", ","]] * 3
    rows = collocation_rows(sents)
    assert rows == sorted(rows)
    by_key = {(x, y, d): (c, float(p)) for x, y, d, c, p in rows}
    # c(a)=c(c)=3, N=24, N_2 = 6 sentences * 2 pairs = 12, c_2(a, x)=3: PMI = log2((3/12) / (3/24)^2) = 4
    assert by_key[("a", "x", 2)] == (3, 4.0)
    assert ("e", ",", 2) not in by_key  # punctuation is left out
    assert all(1 <= d <= 4 for _x, _y, d, _c, _p in rows)


def test_bundled_collocations_file():
    col = load_collocations()
    assert col is not None and len(col) > 10_000
    hit = col.get("more", "than", 2)
    assert hit.count >= 100 and hit.pmi > 5
    assert col.get("than", "more", 2) is None
    c = only_case(make_sa("we had to come to grips", "ppss hvd to vb in nns", {5: 3}), collocations=None)
    assert "phrase" in c.labels  # label_cases loads the bundled file by default


# --------------------------------------------------------------------------- causal
def test_causal_connective_between_or_attended():
    sentence = "the insects were poisonous , so the task is a challenge"
    c = only_case(make_sa(sentence, "at nns bed jj , cs at nn bez at nn", {10: 1}))
    assert c.labels == ["causal"] and "connective 'so' lies between 'insects' and 'challenge'" in c.evidence["causal"]
    c = only_case(make_sa("he left because the rain", "pps vbd cs at nn", {4: 2}))
    assert "the attended 'because'" in c.evidence["causal"]
    c = only_case(make_sa("the storm caused severe floods", "at nn vbd jj nns", {4: 1}))
    assert "cause-effect verb 'caused'" in c.evidence["causal"]


def test_no_causal_without_a_causal_connective():
    # "so" as the qualifier of "so poisonous" (tag ql) is not causal
    sa = make_sa("the insects were so poisonous that snakes", "at nns bed ql jj cs nns", {6: 1})
    assert only_case(sa).labels == []
    assert only_case(make_sa("the insects were there and the task", "at nns bed rb cc at nn", {6: 1})).labels == []
    # "since" as a preposition of time (tag in) is not causal; as a conjunction (cs) it is
    assert only_case(make_sa("he has lived here since the war", "pps hvz vbn rb in at nn", {6: 2})).labels == []
    assert only_case(make_sa("he has lived here since the war", "pps hvz vbn rb cs at nn", {6: 2})).labels == ["causal"]
    # the connective lies between, but the attended word is a function word
    assert "causal" not in only_case(make_sa("the insects , so the task", "at nns , cs at nn", {5: 0})).labels


def test_causal_links_only_the_clauses_around_the_connective():
    """Not every content pair around a connective: the clause before it (or the sentence before, when it opens
    one) and the clause after it, each CAUSAL_SPAN words at most."""
    words, tags = "the dog barked ; the insects were poisonous , so the task is a challenge", \
        "at nn vbd . at nns bed jj , cs at nn bez at nn"
    assert only_case(make_sa(words, tags, {14: 5})).labels == ["causal"]  # insects -> challenge
    assert only_case(make_sa(words, tags, {14: 1})).labels == []  # dog: a clause before the cause
    words, tags = "the insects were poisonous , so the task was hard ; the dog barked", \
        "at nns bed jj , cs at nn bedz jj . at nn vbd"
    assert only_case(make_sa(words, tags, {9: 1})).labels == ["causal"]  # insects -> hard
    assert only_case(make_sa(words, tags, {13: 1})).labels == []  # barked: a clause after the effect
    long_effect = "the insects were poisonous , so " + " ".join(["the", "old"] * 7) + " task"
    tags = "at nns bed jj , cs " + " ".join(["at", "jj"] * 7) + " nn"
    assert only_case(make_sa(long_effect, tags, {20: 1})).labels == []  # 15 words on: past the span
    # across a sentence boundary: a connective opening a sentence links it with the sentence before
    passage = f"the insects were poisonous . {BOUNDARY} therefore the task is a challenge"
    sa = make_sa(passage, f"at nns bed jj . {BOUNDARY} rb at nn bez at nn", {11: 1})
    sa.context = "document"  # running text: the model reads across the boundary
    assert only_case(sa).labels == ["causal"]


def test_a_sentence_initial_because_links_its_clause_with_the_main_clause():
    words, tags = "because it rained , the game was cancelled", "cs pps vbd , at nn bedz vbn"
    c = only_case(make_sa(words, tags, {7: 2}))  # rained -> cancelled
    assert c.labels == ["causal"] and "'because' opens" in c.evidence["causal"]
    assert only_case(make_sa(words, tags, {7: 0})).labels == ["causal"]  # the attended 'because'
    assert only_case(make_sa(words, tags, {5: 2})).labels == ["causal"]  # rained -> game
    assert only_case(make_sa("since it rained , the game was cancelled", "cs pps vbd , at nn bedz vbn",
                             {7: 2})).labels == ["causal"]
    assert only_case(make_sa("because it rained the game was cancelled", "cs pps vbd at nn bedz vbn",
                             {6: 2})).labels == []  # no comma: where the main clause starts is unknown


# --------------------------------------------------------------------------- chance
def reading(words: list[str], pairs, unit=0) -> LabelReading:
    return LabelReading(tuple(words), None, tuple(pairs), unit)


def test_chance_of_a_rule_that_fires_at_distance_one():
    """A rule that fires on every pair at distance 1 has chance rate 1 there (but for the end row, which no rule
    labels) and 0 elsewhere; the chance rate is these rates weighted by the highlights' distances."""
    rules = {"next": lambda s, t, a: "adjacent" if t - a == 1 else None}
    words = [f"w{i}" for i in range(10)]  # rows 0..10, row 10 predicts the end
    pairs = [(3, 2), (5, 4), (9, 8), (6, 3), (7, 2)]  # three at d = 1, one each at 3 and 5
    got = label_rates_vs_chance([reading(words, pairs)], rules=rules, collocations=Collocations({}))["next"]
    assert isinstance(got, LabelChance) and (got.pairs, got.count, got.observed) == (5, 3, 3 / 5)
    assert got.by_distance == ((1, 3, 9 / 10), (3, 1, 0.0), (5, 1, 0.0))  # pairs (1, 0) .. (10, 9)
    assert math.isclose(got.chance, 3 / 5 * 9 / 10) and math.isclose(got.enrichment, 1 / (9 / 10))
    assert got.chance_pairs == 10 + 8 + 6 and got.units == 1 and got.low is got.high is None  # one unit: no interval
    assert LabelChance.from_dict(json.loads(json.dumps(got.to_dict()))) == got
    # a boundary is never the attended word, in the highlights as in the chance pairs (9 pairs at d = 1, not
    # (5, 4)), and the row predicting it is labelled no more than the end row (7 of them labelled)
    words[4] = BOUNDARY
    got = label_rates_vs_chance([reading(words, [(3, 2)])], rules=rules, collocations=Collocations({}))["next"]
    assert got.by_distance == ((1, 1, 7 / 9),)
    with pytest.raises(ValueError, match="not a pair"):
        reading(words, [(6, 4)])
    with pytest.raises(ValueError, match="not a pair"):
        reading(words, [(12, 4)])


def random_readings(seed: int, planted: bool = False) -> list[LabelReading]:
    """40 documents of 2 sentences of 12 words from 4 letters, 6 highlights each: at random, or (planted) on
    repeated words where there is one."""
    rng = np.random.default_rng(seed)
    out = []
    for doc in range(40):
        for _ in range(2):
            words = list(rng.choice(list("abcd"), 12))
            pairs = []
            for _ in range(6):
                t = int(rng.integers(2, 13))
                a = int(rng.integers(0, t - 1))
                if planted:
                    a = next((j for j in range(t - 1) if t < 12 and words[j] == words[t]), a)
                pairs.append((t, a))
            out.append(reading(words, pairs, unit=f"doc{doc}"))
    return out


SAME = {"same": lambda s, t, a: "same word" if s.words[t] == s.words[a] else None}


def test_random_highlights_match_chance_and_planted_ones_do_not():
    got = label_rates_vs_chance(random_readings(0), rules=SAME, collocations=Collocations({}))["same"]
    assert (got.units, got.unit, got.pairs) == (40, "documents", 480) and 0.1 < got.chance < 0.3
    assert abs(got.enrichment - 1) < 0.25 and got.low < 0 < got.high
    planted = label_rates_vs_chance(random_readings(0, planted=True), rules=SAME, collocations=Collocations({}))["same"]
    assert planted.enrichment > 3 and planted.low > 0.3
    # the interval is a bootstrap over the 40 documents: fixed by its seed, another seed moves it a little
    again = label_rates_vs_chance(random_readings(0), rules=SAME, collocations=Collocations({}), seed=1)["same"]
    assert again.chance == got.chance and again.low != got.low and math.isclose(again.low, got.low, abs_tol=0.03)


def test_chance_pairs_are_sampled_evenly_when_there_are_many(monkeypatch):
    """Past CHANCE_MIN_PAIRS and CHANCE_PAIRS_PER_HIGHLIGHT per highlight the rules run on an evenly spaced sample:
    linear in the highlights, and close to the rate over all pairs."""
    readings = random_readings(1)
    exact = label_rates_vs_chance(readings, rules=SAME, collocations=Collocations({}))["same"]
    monkeypatch.setattr(vc, "CHANCE_MIN_PAIRS", 100)
    monkeypatch.setattr(vc, "CHANCE_PAIRS_PER_HIGHLIGHT", 2)
    sampled = label_rates_vs_chance(readings, rules=SAME, collocations=Collocations({}))["same"]
    assert sampled.chance_pairs < exact.chance_pairs / 2 and sampled.observed == exact.observed
    assert math.isclose(sampled.chance, exact.chance, abs_tol=0.03)


def test_the_shipped_rules_against_chance_on_a_reading_of_a_real_sentence():
    sa = make_sa("the dogs that the boy feeds are hungry", "at nns wps at nn vbz ber jj", {6: 1, 5: 3, 7: 2})
    got = label_rates_vs_chance([LabelReading.of(sa)], collocations=Collocations({}))
    assert set(got) == set(LABELS) and (got["grammar"].count, got["grammar"].pairs) == (1, 3)
    # at d = 5 (two highlights) one pair of four is grammar, dogs -> are; none at d = 2
    assert got["grammar"].by_distance == ((2, 1, 0.0), (5, 2, 0.25)) and math.isclose(got["grammar"].chance, 0.5 / 3)
    assert got["trigger"].count == 0 and got["trigger"].chance == 0 and got["trigger"].enrichment is None
    assert label_rates_vs_chance([LabelReading.of(make_sa("no highlight here", None, {}))]) == {}


# --------------------------------------------------------------------------- label_cases
def test_label_cases_returns_every_highlight_and_skips_start_slots():
    words = "the market fell and the market rose"
    sa = make_sa(words, "at nn vbd cc at nn vbd", {5: 1, 6: 2, 7: 1}, weight=0.6)
    cases = label_cases(sa, collocations=COLLOCATIONS)
    assert [(c.target, c.token) for c in cases] == [(5, 1), (6, 2), (7, 1)]  # <s> slots (0.4 too) skipped
    assert cases[1].labels == [] and cases[1].evidence == {}  # "rose" <- "fell": no rule
    assert cases[2].word == EOS and cases[2].labels == []  # the </s> row is never labelled
    doc = cases[0].to_dict()
    assert {"target", "word", "slot", "token", "attended", "weight", "labels", "evidence"} <= set(doc)
    assert json.loads(json.dumps(doc)) == doc and doc["weight"] == 0.6
    assert label_cases(sa, Share(0.7), collocations=COLLOCATIONS) == []
    assert [c.token for c in label_cases(sa, TopK(1), collocations=COLLOCATIONS)] == [1, 2, 1]
    targets = analysis_dict(sa)["targets"]
    assert targets[5]["cases"][0]["labels"] == ["trigger"]


def test_untagged_text_uses_the_tagger_and_penn_tags_are_retagged():
    c = only_case(make_sa("he saw the old red house", None, {5: 2}))
    assert c.labels == ["grammar"]
    c = only_case(make_sa("he saw the old red house", "PRP VBD DT JJ JJ NN", {5: 2}))
    assert c.labels == ["grammar"]


# --------------------------------------------------------------------------- tagger
def test_tagger_known_unknown_and_simplified_tags():
    assert [simplify_tag(t) for t in ("nn-tl-hl", "np$", "md*", "fw-nns", "pps+bez", "jj-nc")] == [
        "nn", "np$", "md*", "nns", "pps+bez", "jj",
    ]
    assert tag_tokens("the dogs are in the house .".split()) == ["at", "nns", "ber", "in", "at", "nn", "."]
    tags = tag_tokens("the blorfications were zintered quickly .".split())
    assert tags[1] == "nns" and tags[3] in ("vbn", "vbd") and tags[4] == "rb"  # suffix fallback
    assert tag_tokens(["N", "people"])[0] == "cd"
    assert tag_tokens(["我", "們"]) is None  # English only
    assert tag_tokens(["the"], path="/nonexistent/tagger.json") is None


def test_tagger_training_is_deterministic_and_learns_transitions():
    sents = [["the", "dog", "runs"], ["a", "run", "ends"], ["the", "run"], ["dogs", "run"]]
    tags = [["at", "nn", "vbz"], ["at", "nn", "vbz"], ["at", "nn-tl"], ["nns", "vb"]]
    doc = train_counts(sents, tags)
    again = train_counts(list(reversed(sents)), list(reversed(tags)))
    assert json.dumps(doc, sort_keys=True) == json.dumps(again, sort_keys=True)
    assert doc["lexicon"]["run"] == {"nn": 2, "vb": 1}
    tagger = Tagger(doc)
    assert tagger.tag(["the", "run"]) == ["at", "nn"] and tagger.tag(["dogs", "run"]) == ["nns", "vb"]
    with pytest.raises(ValueError, match="tags"):
        train_counts([["a", "b"]], [["at"]])


def test_bundled_tagger_accuracy_on_valid():
    tagger = load_tagger()
    valid = load_corpus("brown", "valid")
    right = total = 0
    for words, gold in zip(valid.sentences[:300], valid.tags[:300]):
        for p, g in zip(tagger.tag(words), gold):
            right += p == simplify_tag(g)
            total += 1
    assert right / total > 0.93


# --------------------------------------------------------------------------- ranking examples
def test_weight_above_uniform_is_zero_for_a_single_slot():
    """A window of 1 puts weight 1 on its one slot, so its weight chooses nothing: 0 above an even spread."""
    (spread,) = label_cases(make_sa("a b c d e f", None, {5: 1}), collocations=COLLOCATIONS)
    assert spread.slots == 6 and spread.above_uniform == pytest.approx(0.8 - 1 / 6)  # row 5: slots 0..5
    (single,) = label_cases(make_sa("a b c d e f", None, {5: 3}, weight=1.0), collocations=COLLOCATIONS)
    assert single.slots == 1 and single.weight == 1.0 and single.above_uniform == 0.0
    assert single.to_dict()["above_uniform"] == 0.0 and single.to_dict()["slots"] == 1


def test_the_gallery_lets_the_models_take_turns():
    def ex(value: float, effect: float | None = None) -> dict:
        return {"above_uniform": value, "effect": effect}

    examples = [("window1", "grammar", ex(0.0))] * 3 + [("amsrn", "trigger", ex(0.2)), ("amsrn", "grammar", ex(0.5))]
    order = gallery_order(examples, "above_uniform")
    assert [(m, e["above_uniform"]) for m, _, e in order] == [
        ("amsrn", 0.5), ("window1", 0.0), ("amsrn", 0.2), ("window1", 0.0), ("window1", 0.0)]
    effects = [("a", "trigger", ex(0, None)), ("a", "trigger", ex(0, 1.5)), ("b", "phrase", ex(0, -0.5))]
    assert [e["effect"] for _, _, e in gallery_order(effects, "effect")] == [1.5, -0.5, None]  # none computed: last


# --------------------------------------------------------------------------- corpus_cases
@pytest.fixture(scope="module")
def tiny_ckpt() -> Checkpoint:
    torch.manual_seed(0)
    vocab = Vocab.for_corpus("brown")
    model = build_model("amsrn", vocab_size=len(vocab), emb_dim=8, hidden_dim=8)
    return Checkpoint(model.eval(), vocab, "amsrn")


def test_corpus_cases_on_a_tiny_model(tiny_ckpt):
    torch.set_num_threads(1)
    report = corpus_cases(tiny_ckpt, "brown", "test", setting=Share(0.05), limit=50, examples_per_label=3)
    assert report.sentences == 50 and report.source == "brown/test"
    assert set(report.counts) == set(LABELS) and report.pairs > report.labelled > 0
    assert max(report.counts.values()) <= report.labelled <= sum(report.counts.values())
    test = load_corpus("brown", "test")
    for label, examples in report.examples.items():
        assert len(examples) == min(3, report.counts[label])
        weights = [e["weight"] for e in examples]
        assert weights == sorted(weights, reverse=True)
        for e in examples:
            assert label in e["labels"] and isinstance(e["evidence"], str) and e["evidence"]
            i = test.ids.index(e["sentence_id"])
            assert i < 50 and test.sentences[i][e["token"]] == e["attended"]
    doc = report.to_dict()
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc
    assert math.isclose(doc["shares"]["grammar"], report.counts["grammar"] / report.pairs)
    # each label against its distance-matched chance rate, the interval resampling documents
    chance = report.chance_of()
    assert set(chance) == set(LABELS) and CaseReport.from_dict(doc).chance_of() == chance
    for label, c in chance.items():
        assert (c.pairs, c.count, c.unit) == (report.pairs, report.counts[label], "documents")
        assert math.isclose(c.observed, doc["shares"][label]) and 0 <= c.chance <= 1
        assert c.units == len({i.rpartition(":")[0] for i in test.ids[:50]}) == 1 and c.low is c.high is None
    # the same numbers again (deterministic), and a higher threshold only removes pairs
    assert corpus_cases(tiny_ckpt, "brown", "test", setting=Share(0.05), limit=50, examples_per_label=3).to_dict() == doc
    assert corpus_cases(tiny_ckpt, "brown", "test", setting=Share(0.3), limit=50).pairs < report.pairs


def test_corpus_cases_agrees_with_analyze_tokens(tiny_ckpt):
    """The batched analyses give the labels of the one-sentence path, sentence by sentence."""
    test = load_corpus("brown", "test")
    expected = dict.fromkeys(LABELS, 0)
    pairs = 0
    for norms, tags in zip(test.sentences[:30], test.tags[:30]):
        sa = analyze_tokens(tiny_ckpt, norms, tags=tags)
        for case in label_cases(sa, Share(0.1)):
            pairs += 1
            for label in case.labels:
                expected[label] += 1
    report = corpus_cases(tiny_ckpt, "brown", "test", setting=Share(0.1), limit=30)
    assert report.pairs == pairs and report.counts == expected and sum(expected.values()) > 0
    batched = dict(analyze_batch(tiny_ckpt, test.sentences[:30], tags=test.tags, top_k=5))
    single = analyze_tokens(tiny_ckpt, test.sentences[7], tags=test.tags[7])
    np.testing.assert_allclose(batched[7].attention, single.attention, atol=1e-6)
    np.testing.assert_allclose(batched[7].logprobs, single.logprobs, atol=1e-4)
    assert batched[7].targets == single.targets and batched[7].tags == single.tags
    assert batched[7].top_words == single.top_words


def test_corpus_cases_on_given_sentences_and_without_attention(tiny_ckpt):
    sents = [["the", "market", "fell", "and", "the", "market", "rose", "."]]
    report = corpus_cases(tiny_ckpt, sentences=sents, ids=["line0"], setting=Share(0.0))
    assert report.source == "text" and report.pairs == sum(range(1, 8))  # rows 2..8 see 1..7 word slots
    assert report.examples["trigger"][0]["sentence_id"] == "line0"
    vocab = tiny_ckpt.vocab
    lstm = Checkpoint(build_model("lstm", vocab_size=len(vocab), emb_dim=8, hidden_dim=8).eval(), vocab, "lstm")
    report = corpus_cases(lstm, "brown", "test", limit=5)
    assert report.pairs == 0 and report.notes


def test_corpus_cases_of_a_model_without_attention(tiny_ckpt):
    lstm = Checkpoint(build_model("lstm", vocab_size=len(tiny_ckpt.vocab), emb_dim=8, hidden_dim=8).eval(), tiny_ckpt.vocab, "lstm")
    assert tiny_ckpt.has_attention and not lstm.has_attention
    report = corpus_cases(lstm, "brown", "test", limit=5)
    assert report.pairs == report.sentences == 0
    assert report.notes == ["lstm has no attention: there are no highlights to label"]


def test_phrase_needs_two_different_words_and_no_number():
    """A list or table ("N ... N", "af ... af") is not a phrase, however often Brown has it."""
    table = Collocations({("N", "N", 2): (900, 6.0), ("af", "af", 2): (50, 9.0), ("more", "than", 2): (166, 6.13)})
    assert "phrase" not in only_case(make_sa("in N and N", None, {3: 1}), table).labels
    assert "phrase" not in only_case(make_sa("the af or af", None, {3: 1}), table).labels
    assert "phrase" in only_case(make_sa("no more money than", None, {3: 1}), table).labels


def test_gallery_keeps_one_example_per_word_pair(tiny_ckpt):
    sents = [["the", "market", "fell", "and", "the", "market", "rose"]] * 6 + [["the", "city", "had", "taxes", "and", "taxes"]]
    report = corpus_cases(tiny_ckpt, sentences=sents, setting=Share(0.0), examples_per_label=5)
    for label, examples in report.examples.items():
        pairs = [(e["attended"], e["word"]) for e in examples]
        assert len(pairs) == len(set(pairs)), (label, pairs)
        weights = [e["weight"] for e in examples]
        assert weights == sorted(weights, reverse=True)
    assert report.counts["trigger"] >= 6  # every occurrence still counts; only the gallery keeps one


def test_a_corpus_report_is_cached_by_checkpoint_split_and_arguments(monkeypatch, tmp_path):
    """The Cases page's report of a split is computed once (then read from the cache, equal, under the
    name the checkpoint is loaded as); another threshold or limit is another report."""
    import vizlm.inspect.case_gallery as cases
    from vizlm.inspect.cache import checkpoint_digest

    monkeypatch.setenv("VIZLM_CACHE", str(tmp_path))
    vocab = Vocab.for_corpus("brown")
    torch.manual_seed(0)
    model = build_model("amsrn", vocab_size=len(vocab), emb_dim=8, hidden_dim=8).eval()
    torch.nn.init.uniform_(model.read_proj.weight, -0.3, 0.3)
    real, calls = cases._case_report, []
    monkeypatch.setattr(cases, "_case_report", lambda *a, **k: calls.append(1) or real(*a, **k))
    a = Checkpoint(model, vocab, "a")
    b = Checkpoint(model, vocab, "b")
    b.digest = checkpoint_digest(a)  # the same files, loaded under another name
    report = lambda ckpt, **kw: corpus_cases(ckpt, "wsj", "test", **{"limit": 30, **kw})  # noqa: E731
    first = report(a, setting=Share(0.05))
    again = report(b, setting=Share(0.05))
    assert len(calls) == 1 and first.pairs > 0
    assert again.model == "b" and {**again.to_dict(), "model": "a"} == json.loads(json.dumps(first.to_dict()))
    report(a, setting=Share(0.1))
    report(a, setting=Share(0.05), limit=31)
    report(a, setting=Share(0.05), use_cache=False)
    assert len(calls) == 4


# --------------------------------------------------------------------------- ranked by attribution
def test_ranking_by_attribution_stores_gradient_x_input_of_the_attended_word(tiny_ckpt):
    """Each example's ``attribution_bits`` is attribute(..., "gradient-x-input").bits at (target row, slot - 1):
    memory slot j holds input position j - 1. Two computations of one number (the report's batched analysis,
    a fresh one here): float32, so conftest's float32 tolerance."""
    from conftest import TOLERANCE

    from vizlm.inspect.attribution import attribute

    tolerance = {"rel": TOLERANCE[torch.float32]["rtol"], "abs": TOLERANCE[torch.float32]["atol"]}
    test = load_corpus("brown", "test")
    sents, tags = test.sentences[:20], test.tags[:20]
    report = corpus_cases(tiny_ckpt, sentences=sents, tags=tags, setting=Share(0.05), examples_per_label=5,
                          rank="attribution")
    assert report.rank == "attribution"
    examples = [e for examples in report.examples.values() for e in examples]
    assert len(examples) >= 5
    for e in examples:
        i = int(e["sentence_id"].removeprefix("s"))
        bits = attribute(tiny_ckpt, sents[i], "gradient-x-input").bits  # (T, T): predicted word, input position
        assert e["attribution_bits"] == pytest.approx(float(bits[e["target"], e["slot"] - 1]), **tolerance)
        assert bits[e["target"], e["slot"] - 1] != bits[e["target"], e["slot"]]  # the column is told apart
    for label, kept in report.examples.items():  # ranked by the signed attribution, the highest first
        values = [e["attribution_bits"] for e in kept]
        assert values == sorted(values, reverse=True), label
    assert json.loads(json.dumps(report.to_dict(), allow_nan=False)) == report.to_dict()


def test_attribution_is_computed_only_for_its_ranking(tiny_ckpt, monkeypatch):
    """The other rankings (the default, and the shipped reports) never attribute: their examples say None."""
    import vizlm.inspect.case_gallery as cases

    calls = []
    real = cases.attribute
    monkeypatch.setattr(cases, "attribute", lambda *a, **k: calls.append(1) or real(*a, **k))
    sents = [["the", "market", "fell", "and", "the", "market", "rose", "."]] * 2
    for rank in ("weight", "effect", "above_uniform"):
        report = corpus_cases(tiny_ckpt, sentences=sents, setting=Share(0.0), rank=rank)
        assert report.examples["trigger"] and all(
            e["attribution_bits"] is None for examples in report.examples.values() for e in examples)
    assert calls == []
    report = corpus_cases(tiny_ckpt, sentences=sents, setting=Share(0.0), rank="attribution")
    assert len(calls) == 2  # one per sentence with a labelled pair
    assert all(isinstance(e["attribution_bits"], float) for examples in report.examples.values() for e in examples)
    # a report stored before examples had the field (the shipped ones) reads as one without it computed
    doc = corpus_cases(tiny_ckpt, sentences=sents, setting=Share(0.0)).to_dict()
    for examples in doc["examples"].values():
        for e in examples:
            del e["attribution_bits"]
    old = cases.CaseReport.from_dict(doc)
    assert old.examples["trigger"][0]["attribution_bits"] is None
    assert cases.CaseReport.from_dict(old.to_dict()).to_dict() == old.to_dict()


def test_attribution_of_a_document_model_s_cases(tiny_ckpt):
    """A document model's case is found in the document read as running text: its example's row is
    ``reading.target`` and its slot is the passage's slot shifted by ``reading.span[0]``."""
    from vizlm.inspect.attribution import attribute

    vocab = tiny_ckpt.vocab
    torch.manual_seed(0)
    model = build_model("kvp", vocab_size=len(vocab), emb_dim=8, hidden_dim=6, context="document", window=3).eval()
    doc = Checkpoint(model, vocab, "kvp-doc")
    sents = [["the", "market", "fell", "."], ["the", "market", "rose", "."], ["taxes", "rose", "and", "taxes", "fell"]]
    report = corpus_cases(doc, sentences=sents, ids=["d:0", "d:1", "d:2"], setting=Share(0.0), examples_per_label=5,
                          rank="attribution")
    bits = attribute(doc, sents, "gradient-x-input", max_tokens=None).bits
    examples = [e for examples in report.examples.values() for e in examples]
    assert examples and any(e["reading"]["span"][0] > 0 for e in examples)
    for e in examples:
        row, slot = e["reading"]["target"], e["slot"] + e["reading"]["span"][0]
        assert e["attribution_bits"] == pytest.approx(float(bits[row, slot - 1]), rel=1e-5, abs=1e-6)  # float32's


def test_the_gallery_ranks_by_attribution():
    def ex(bits: float | None) -> dict:
        return {"weight": 0.5, "attribution_bits": bits}

    examples = [("a", "trigger", ex(None)), ("a", "trigger", ex(-0.5)), ("a", "phrase", ex(1.5)),
                ("a", "grammar", ex(0.1))]
    assert [e["attribution_bits"] for _, _, e in gallery_order(examples, "attribution")] == [1.5, 0.1, -0.5, None]


def test_cli_cases_ranked_by_attribution(capsys, tmp_path, tiny_ckpt):
    """``vizlm cases --rank attribution`` through the CLI's main: printed, and in the JSON, highest first."""
    from vizlm import cli
    from vizlm.modeling.checkpoint import save_checkpoint

    folder = tmp_path / "tiny"
    save_checkpoint(folder, tiny_ckpt.model, "amsrn", tiny_ckpt.vocab, metrics={}, corpus={"name": "brown"},
                    parameters=sum(p.numel() for p in tiny_ckpt.model.parameters()))
    text = tmp_path / "text.txt"
    text.write_text("The market fell and the market rose .\n\nThe workers said that they would pay the taxes .\n",
                    encoding="utf-8")  # two documents (a blank line between)
    argv = ["cases", "--checkpoint", str(folder), "--text-file", str(text), "--threshold", "0", "--rank", "attribution"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "trigger:" in out and " attribution " in out
    # each label against chance, the two one-sentence documents resampled
    assert "against chance" in out and "bootstrap over 2 sentences" in out
    assert all(any(line.split()[:1] == [label] and "chance" in line for line in out.splitlines()) for label in LABELS)
    assert cli.main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rank"] == "attribution" and doc["examples"]["trigger"]
    trigger = doc["chance"]["trigger"]
    assert (trigger["count"], trigger["pairs"], trigger["unit"]) == (doc["counts"]["trigger"], doc["pairs"], "sentences")
    for examples in doc["examples"].values():
        values = [e["attribution_bits"] for e in examples]
        assert None not in values and values == sorted(values, reverse=True)
