"""Seed-aware intervals, Holm's adjustment and three-part verdicts (vizlm.reproduce.verdicts), on inputs whose
answers are known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vizlm.reproduce import verdicts
from vizlm.reproduce.verdicts import SeedPair, claim_interval, holm, protocol_median, seed_variance, verdict

# Bootstrap quantiles are estimates: with N_BOOT replicates their relative error is a few percent.
QUANTILE_TOLERANCE = 0.05


def _pair(diff_per_sentence, tokens, documents=None, base=3.0):
    tokens = np.asarray(tokens, float)
    nll_against = base * tokens
    return SeedPair(nll_against + np.asarray(diff_per_sentence, float), nll_against, tokens, documents)


def test_the_ratio_is_the_mean_over_seeds_of_the_log_ratios():
    tok = np.full(20, 10.0)
    pairs = [_pair(np.full(20, 10 * d), tok, [4] * 5) for d in (0.01, 0.03)]
    iv = claim_interval(pairs, 0.0)
    assert iv.per_seed == pytest.approx([math.exp(0.01), math.exp(0.03)], rel=1e-12)
    assert iv.ratio == pytest.approx(math.exp(0.02), rel=1e-12) and iv.seeds == 2


def test_documents_are_resampled_whole_sentences_only_for_a_split_of_one_document():
    """Sentences of +x and -x inside each document: a document bootstrap sees no spread at all, a
    sentence bootstrap does."""
    tok = np.full(40, 10.0)
    diff = np.tile([5.0, -5.0], 20)
    by_doc = claim_interval([_pair(diff, tok, [2] * 20)], 0.0)
    assert by_doc.resampled == "documents" and by_doc.low == pytest.approx(1.0, abs=1e-12) == by_doc.high
    by_sentence = claim_interval([_pair(diff, tok, [40])], 0.0)
    assert by_sentence.resampled == "sentences" and by_sentence.high - by_sentence.low > 0.05


def test_the_seed_spread_widens_the_interval_by_its_known_size():
    """No document noise (every document the same): the interval is exp(mu +- 1.96 s / sqrt(K))."""
    tok = np.full(30, 10.0)
    mu, s = -0.02, 0.01
    for K in (1, 5):
        pairs = [_pair(np.full(30, 10 * mu), tok, [3] * 10) for _ in range(K)]
        iv = claim_interval(pairs, s**2)
        half = 1.959964 * s / math.sqrt(K)
        assert math.log(iv.high) - mu == pytest.approx(half, rel=QUANTILE_TOLERANCE)
        assert mu - math.log(iv.low) == pytest.approx(half, rel=QUANTILE_TOLERANCE)


def test_the_interval_covers_the_truth_about_95_percent_of_the_time():
    """A simulated world with both noises: each seed pair's log ratio = mu + seed effect (sd s), each
    document's NLL difference noisy around it. The interval from 5 seeds (s known) covers mu in
    about 95% of 200 worlds (binomial sd 1.5%: 0.90 to 0.99 allowed)."""
    rng = np.random.default_rng(7)
    mu, s, docs, per_doc = 0.01, 0.006, 30, 4
    covered = 0
    for world in range(200):
        tok = rng.integers(5, 30, size=docs * per_doc).astype(float)
        doc_effect = np.repeat(rng.normal(0, 0.02, docs), per_doc)  # the test set's own draw, shared by the seeds
        pairs = []
        for _ in range(5):
            seed_effect = rng.normal(0, s)
            diff = tok * (mu + seed_effect + doc_effect) + rng.normal(0, 0.5, size=tok.shape)
            pairs.append(_pair(diff, tok, [per_doc] * docs))
        iv = claim_interval(pairs, s**2, n_boot=1000, seed=world)  # the variance of one pair's log ratio
        covered += iv.low <= math.exp(mu) <= iv.high
    assert 0.90 <= covered / 200 <= 0.99


def test_the_share_on_recent_slots_is_the_sum_of_the_nearest_means():
    """One seed: the weight on the k most recent slots is the sum of the mean weights at offsets 1..k, each a
    ratio of per-document sums, with an interval over the documents (none from a single document)."""
    rng = np.random.default_rng(0)
    count = rng.integers(1, 50, (20, 6)).astype(float)
    total = count * rng.uniform(0, 0.3, (20, 6))
    got = verdicts.mass_interval([total], [count], 3)
    assert got.value == pytest.approx(sum(total[:, k].sum() / count[:, k].sum() for k in range(3)), rel=1e-12)
    assert got.low < got.value < got.high and got.units == 20 and got.seeds == 1 and got.seed_sd == 0
    assert math.isnan(verdicts.mass_interval([total[:1]], [count[:1]], 3).low)  # one unit: nothing to resample


def test_the_share_shares_the_documents_across_seeds_and_adds_their_spread():
    """Two identical seeds resample the same documents, so their interval is one seed's; seeds whose shares
    differ, on documents all alike, get normal bounds: mean +- 1.96 sd / sqrt(K)."""
    rng = np.random.default_rng(1)
    count = rng.integers(1, 50, (20, 4)).astype(float)
    total = count * rng.uniform(0, 0.3, (20, 4))
    one, two = verdicts.mass_interval([total], [count], 2), verdicts.mass_interval([total, total], [count, count], 2)
    assert (two.low, two.value, two.high) == pytest.approx((one.low, one.value, one.high), rel=1e-12)
    count = np.full((10, 3), 100.0)
    shares = [0.50, 0.56, 0.53, 0.47, 0.54]  # the first two offsets' weight, every document alike within a seed
    got = verdicts.mass_interval([count * np.array([x / 2, x / 2, 1 - x]) for x in shares], [count] * 5, 2)
    assert got.per_seed == pytest.approx(shares, rel=1e-12) and got.value == pytest.approx(np.mean(shares), rel=1e-12)
    half = 1.959964 * np.std(shares, ddof=1) / math.sqrt(5)
    assert got.high - got.value == pytest.approx(half, rel=QUANTILE_TOLERANCE)
    assert got.value - got.low == pytest.approx(half, rel=QUANTILE_TOLERANCE)
    with pytest.raises(ValueError, match="same test units"):
        verdicts.mass_interval([count, count[:5]], [count, count[:5]], 2)


def test_devices_agree_when_their_means_differ_by_no_more_than_seed_noise():
    """Seeds within each device vary by sd 0.01; the devices' means differ by 0.005 (within 1.96 * 0.01 *
    sqrt(1/3 + 1/2)) or by 0.05 (beyond it). With no spread within the devices (one seed each) the protocol's
    median is used, and with none known the check says so."""
    cpu = [0.99, 1.00, 1.01]
    spread_within = np.std(cpu, ddof=1)
    for shift, agree in [(0.005, True), (0.05, False)]:
        cuda = [4 + 1.00 + shift - 0.00707, 4 + 1.00 + shift + 0.00707]
        (check,) = verdicts.device_check({"cpu": [x + 4 for x in cpu], "cuda": cuda},
                                         verdicts.SeedSpread(1.0, 10, "a huge median, not used"))
        assert check.diff == pytest.approx(shift, abs=1e-12) and check.agree is agree
        pooled = math.sqrt((2 * spread_within**2 + 2 * 0.00707**2) / 3)
        assert check.bound == pytest.approx(1.959964 * pooled * math.sqrt(1 / 3 + 1 / 2), rel=1e-9)
        assert list(check.means) == ["cpu", "cuda"] and check.seeds == {"cpu": 3, "cuda": 2}
    (check,) = verdicts.device_check({"cpu": [4.0], "cuda": [4.03]}, verdicts.SeedSpread(0.01**2, 8, "median"))
    assert check.bound == pytest.approx(1.959964 * 0.01 * math.sqrt(2), rel=1e-9) and check.agree is False
    (check,) = verdicts.device_check({"cpu": [4.0], "cuda": [4.02]}, verdicts.SeedSpread(0.0, 0, "none"))
    assert check.agree is None and "unchecked" in check.describe()


def test_pairs_must_score_the_same_sentences():
    with pytest.raises(ValueError, match="same sentences"):
        claim_interval([_pair([1.0, 2.0], [3, 4], [1, 1]), _pair([1.0, 2.0], [3, 5], [1, 1])], 0.0)


def test_seed_variance_and_the_protocol_median():
    assert seed_variance([4.8]) is None
    v = seed_variance([4.80, 4.81, 4.83])
    assert v.var == pytest.approx(np.var([4.80, 4.81, 4.83], ddof=1)) and v.df == 2 and v.how == "own seeds"
    m = protocol_median([verdicts.SeedSpread(1e-4, 2, "own seeds"), verdicts.SeedSpread(4e-4, 2, "own seeds"),
                         verdicts.SeedSpread(1e-2, 2, "own seeds")])
    assert m.var == 4e-4 and m.df == 6  # one unstable setup does not set everyone's spread
    assert protocol_median([]).var == 0.0
    # two seeds (one degree of freedom) never narrow an interval below the protocol's median; three may
    two, three = seed_variance([4.80, 4.8001]), seed_variance([4.80, 4.8001, 4.8002])
    assert verdicts.trusted(two, m).var == m.var and "from 2 seeds is smaller" in verdicts.trusted(two, m).how
    assert verdicts.trusted(three, m) is three and verdicts.trusted(None, m) is m
    wide = seed_variance([4.80, 4.90])
    assert verdicts.trusted(wide, m) is wide  # a wider own spread from two seeds is kept


def test_holm_step_down():
    got = holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005})
    assert {k: round(v["p_adjusted"], 10) for k, v in got.items()} == {"d": 0.02, "a": 0.03, "c": 0.06, "b": 0.06}
    assert got["d"]["level"] == pytest.approx(1 - 0.05 / 4) and got["b"]["level"] == pytest.approx(0.95)
    assert all(v["tested"] == 4 for v in got.values())


@pytest.mark.parametrize("kind,low,high,paper,summary,direction", [
    ("better", 0.94, 0.97, 0.95, "reproduced", "better"),
    ("better", 0.995, 0.999, 0.93, "reproduced in direction; a smaller effect", "better"),
    ("better", 0.90, 0.92, 0.95, "reproduced in direction; a larger effect", "better"),
    ("better", 1.01, 1.03, 0.95, "not reproduced: the opposite", "worse"),
    ("better", 0.94, 1.01, 0.95, "inconclusive: too few runs to tell (no difference and the paper's effect both inside)",
     "no clear difference"),
    ("better", 0.99, 1.01, 0.95, "not reproduced: no difference, the paper's effect ruled out", "no clear difference"),
    ("better", 0.99, 1.01, None, "not reproduced: no difference", "no clear difference"),
    ("better", 0.97, 0.99, None, "reproduced", "better"),
    ("equal", 0.99, 1.01, 0.999, "reproduced", "no clear difference"),
    ("equal", 0.90, 0.95, 0.999, "not reproduced", "better"),
    ("equal", 0.97, 1.01, 0.999, "inconclusive: too few runs to tell", "no clear difference"),
])
def test_three_part_verdicts(kind, low, high, paper, summary, direction):
    v = verdict(kind, low, high, paper, tolerance=0.02)
    assert v["summary"] == summary and v["direction"] == direction
    assert (v["equivalence"] is None) == (kind != "equal")
