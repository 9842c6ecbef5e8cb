"""Seed-aware intervals, Holm's adjustment and three-part verdicts (vizlm.reproduce.verdicts), on inputs whose
answers are known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vizlm.reproduce import verdicts
from vizlm.reproduce.verdicts import NO_PRIOR, Prior, SeedPair, SeedSpread, claim_interval, holm, seed_variance, verdict

# Bootstrap quantiles are estimates: with N_BOOT replicates their relative error is a few percent.
QUANTILE_TOLERANCE = 0.05
T_975 = {2: 4.302653, 3: 3.182446, 4: 2.776445, 8: 2.306004}  # Student t's 97.5% quantiles by degrees of freedom (tables)
NONE = [SeedSpread(0.0, 0, "none")]


def known(var: float) -> list[SeedSpread]:
    """A claim's arms whose seed variances sum to ``var``, known exactly (infinite degrees of freedom)."""
    return [SeedSpread(var, math.inf, "known"), SeedSpread(0.0, 0, "none")]


def _pair(diff_per_sentence, tokens, documents=None, base=3.0):
    tokens = np.asarray(tokens, float)
    nll_against = base * tokens
    return SeedPair(nll_against + np.asarray(diff_per_sentence, float), nll_against, tokens, documents)


def test_the_ratio_is_the_mean_over_seeds_of_the_log_ratios():
    tok = np.full(20, 10.0)
    pairs = [_pair(np.full(20, 10 * d), tok, [4] * 5) for d in (0.01, 0.03)]
    iv = claim_interval(pairs, NONE)
    assert iv.per_seed == pytest.approx([math.exp(0.01), math.exp(0.03)], rel=1e-12)
    assert iv.ratio == pytest.approx(math.exp(0.02), rel=1e-12) and iv.seeds == 2


def test_documents_are_resampled_whole_sentences_only_for_a_split_of_one_document():
    """Sentences of +x and -x inside each document: a document bootstrap sees no spread at all, a
    sentence bootstrap does."""
    tok = np.full(40, 10.0)
    diff = np.tile([5.0, -5.0], 20)
    by_doc = claim_interval([_pair(diff, tok, [2] * 20)], NONE)
    assert by_doc.resampled == "documents" and by_doc.low == pytest.approx(1.0, abs=1e-12) == by_doc.high
    by_sentence = claim_interval([_pair(diff, tok, [40])], NONE)
    assert by_sentence.resampled == "sentences" and by_sentence.high - by_sentence.low > 0.05


def test_the_seed_spread_widens_the_interval_by_its_known_size():
    """No document noise (every document the same): the interval is exp(mu +- 1.96 s / sqrt(K))."""
    tok = np.full(30, 10.0)
    mu, s = -0.02, 0.01
    for K in (1, 5):
        pairs = [_pair(np.full(30, 10 * mu), tok, [3] * 10) for _ in range(K)]
        iv = claim_interval(pairs, known(s**2))
        half = 1.959964 * s / math.sqrt(K)
        assert math.log(iv.high) - mu == pytest.approx(half, rel=QUANTILE_TOLERANCE)
        assert mu - math.log(iv.low) == pytest.approx(half, rel=QUANTILE_TOLERANCE)


def test_a_seed_spread_known_from_few_seeds_widens_the_interval_as_student_t():
    """The same, the spread estimated on d degrees of freedom: exp(mu +- t_d s / sqrt(K)); two arms with equal
    spreads on 2 df each give Behrens-Fisher's (the sum of two scaled t_2, drawn here with numpy's t)."""
    tok = np.full(30, 10.0)
    mu, s, K = 0.01, 0.01, 3
    pairs = [_pair(np.full(30, 10 * mu), tok, [3] * 10) for _ in range(K)]
    for df in (2, 4):
        iv = claim_interval(pairs, [SeedSpread(s**2, df, "own seeds"), NONE[0]], n_boot=100_000)
        assert math.log(iv.high) - mu == pytest.approx(T_975[df] * s / math.sqrt(K), rel=0.03)
        assert iv.seed_sd == pytest.approx(s, rel=1e-12)
    iv = claim_interval(pairs, [SeedSpread(s**2 / 2, 2, "own seeds")] * 2, n_boot=100_000)
    t = np.random.default_rng(5).standard_t(2, size=(2, 400_000))  # each arm its own t_2, summed
    behrens_fisher = np.quantile((t[0] + t[1]) / math.sqrt(2), 0.975)
    assert math.log(iv.high) - mu == pytest.approx(behrens_fisher * s / math.sqrt(K), rel=0.03)


def test_the_interval_from_estimated_spreads_still_covers_the_truth():
    """As below, the seed spread estimated from the world's own 3 seeds (2 df) and drawn as such: the interval
    still covers mu in about 95% of 200 worlds. The spread's sampling is what the draw of its variance is for."""
    rng = np.random.default_rng(11)
    mu, s, docs, per_doc = 0.01, 0.01, 30, 4
    covered = plugged_in = 0
    for world in range(200):
        tok = rng.integers(5, 30, size=docs * per_doc).astype(float)
        doc_effect = np.repeat(rng.normal(0, 0.005, docs), per_doc)
        seeds = [mu + rng.normal(0, s) for _ in range(3)]
        pairs = [_pair(tok * (x + doc_effect) + rng.normal(0, 0.2, size=tok.shape), tok, [per_doc] * docs)
                 for x in seeds]
        spread = seed_variance(seeds)
        iv = claim_interval(pairs, [spread, NONE[0]], n_boot=1000, seed=world)
        covered += iv.low <= math.exp(mu) <= iv.high
        plugged = claim_interval(pairs, known(spread.var), n_boot=1000, seed=world)  # its variance taken as known
        plugged_in += plugged.low <= math.exp(mu) <= plugged.high
    assert 0.90 <= covered / 200 <= 0.99
    assert plugged_in / 200 < 0.90  # what the draw mends: a variance from 2 df taken as known covers too seldom


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
        iv = claim_interval(pairs, known(s**2), n_boot=1000, seed=world)  # the variance of one pair's log ratio
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
    differ, on documents all alike, get Student t bounds: mean +- t_(K-1) sd / sqrt(K)."""
    rng = np.random.default_rng(1)
    count = rng.integers(1, 50, (20, 4)).astype(float)
    total = count * rng.uniform(0, 0.3, (20, 4))
    one, two = verdicts.mass_interval([total], [count], 2), verdicts.mass_interval([total, total], [count, count], 2)
    assert (two.low, two.value, two.high) == pytest.approx((one.low, one.value, one.high), rel=1e-12)
    count = np.full((10, 3), 100.0)
    shares = [0.50, 0.56, 0.53, 0.47, 0.54]  # the first two offsets' weight, every document alike within a seed
    got = verdicts.mass_interval([count * np.array([x / 2, x / 2, 1 - x]) for x in shares], [count] * 5, 2)
    assert got.per_seed == pytest.approx(shares, rel=1e-12) and got.value == pytest.approx(np.mean(shares), rel=1e-12)
    half = T_975[4] * np.std(shares, ddof=1) / math.sqrt(5)
    assert got.high - got.value == pytest.approx(half, rel=QUANTILE_TOLERANCE)
    assert got.value - got.low == pytest.approx(half, rel=QUANTILE_TOLERANCE)
    with pytest.raises(ValueError, match="same test units"):
        verdicts.mass_interval([count, count[:5]], [count, count[:5]], 2)


def test_devices_agree_when_their_means_differ_by_no_more_than_seed_noise():
    """Seeds within each device vary by sd 0.01; the devices' means differ by 0.005 (within t_3 sd
    sqrt(1/3 + 1/2): the pooled spread on 3 df) or by 0.05 (beyond it). With no spread within the devices (one
    seed each) the protocol's prior is used, and with none known the check says so."""
    cpu = [0.99, 1.00, 1.01]
    spread_within = np.std(cpu, ddof=1)
    for shift, agree in [(0.005, True), (0.05, False)]:
        cuda = [4 + 1.00 + shift - 0.00707, 4 + 1.00 + shift + 0.00707]
        (check,) = verdicts.device_check({"cpu": [x + 4 for x in cpu], "cuda": cuda}, NO_PRIOR)
        assert check.diff == pytest.approx(shift, abs=1e-12) and check.agree is agree
        pooled = math.sqrt((2 * spread_within**2 + 2 * 0.00707**2) / 3)
        assert check.bound == pytest.approx(T_975[3] * pooled * math.sqrt(1 / 3 + 1 / 2), rel=0.02)
        assert list(check.means) == ["cpu", "cuda"] and check.seeds == {"cpu": 3, "cuda": 2}
    # the prior alone, on the protocol's 8 df (its infinite d0 capped there)
    (check,) = verdicts.device_check({"cpu": [4.0], "cuda": [4.04]}, Prior(0.01**2, math.inf, 3, 8))
    assert check.bound == pytest.approx(T_975[8] * 0.01 * math.sqrt(2), rel=0.02) and check.agree is False
    (check,) = verdicts.device_check({"cpu": [4.0], "cuda": [4.02]}, NO_PRIOR)
    assert check.agree is None and "unchecked" in check.describe()


def test_pairs_must_score_the_same_sentences():
    with pytest.raises(ValueError, match="same sentences"):
        claim_interval([_pair([1.0, 2.0], [3, 4], [1, 1]), _pair([1.0, 2.0], [3, 5], [1, 1])], NONE)


def test_trigamma_inverse_inverts_trigamma():
    for x in (1e-3, 0.05, 0.5, 2.0, 40.0):
        y = verdicts.trigamma_inverse(x)
        assert float(verdicts._polygamma(1, y)) == pytest.approx(x, rel=1e-7)


def test_the_prior_recovers_a_known_spread_of_variances():
    """Setup variances drawn as limma's model has them (sigma^2 = d0 s0^2 / chi2_d0, then s^2 = sigma^2 chi2_d / d,
    d = 4: five seeds): the fit recovers s0^2 and d0; where every setup has one variance, d0 is infinite (or huge)
    and s0^2 that variance."""
    rng = np.random.default_rng(3)
    s0, d0, d, n = 0.007**2, 8.0, 4, 20_000
    sigma2 = d0 * s0 / rng.chisquare(d0, n)
    prior = verdicts.fit_prior([SeedSpread(v, d, "own seeds") for v in sigma2 * rng.chisquare(d, n) / d])
    assert prior.var == pytest.approx(s0, rel=0.03) and prior.df == pytest.approx(d0, rel=0.15)
    assert prior.setups == n and prior.total_df == n * d
    same = verdicts.fit_prior([SeedSpread(v, d, "own seeds") for v in s0 * rng.chisquare(d, n) / d])
    assert same.var == pytest.approx(s0, rel=0.03) and same.df > 200
    alike = [SeedSpread(v, df, "own seeds") for v, df in [(1.0e-4, 4), (1.1e-4, 4), (0.9e-4, 2)]]
    pooled = verdicts.fit_prior(alike)  # closer than their seeds allow: one variance, pooled
    assert math.isinf(pooled.df) and pooled.var == pytest.approx((4e-4 + 4.4e-4 + 1.8e-4) / 10, rel=1e-12)


def test_a_setup_s_spread_is_moderated_toward_its_protocol_s_prior():
    prior = Prior(4e-5, 6.0, 5, 16)
    own = seed_variance([4.80, 4.81, 4.83])  # 2 df
    got = verdicts.moderated(own, prior)
    assert got.var == pytest.approx((6 * 4e-5 + 2 * own.var) / 8, rel=1e-12) and got.df == 8 and got.how == "moderated"
    assert verdicts.moderated(None, prior) == SeedSpread(4e-5, 6.0, "the protocol's prior")  # one seed: the prior
    exact = Prior(4e-5, math.inf, 5, 16)  # setups alike: every one takes the prior, on all the protocol's df
    assert verdicts.moderated(own, exact) == SeedSpread(4e-5, 16, "moderated")
    assert verdicts.moderated(None, exact).df == 16
    alone = verdicts.fit_prior([own])  # a protocol's only setup with seeds is its own prior, left as it is
    assert verdicts.moderated(own, alone) is own and verdicts.moderated(None, alone).var == own.var
    assert verdicts.moderated(own, NO_PRIOR) is own and verdicts.moderated(None, NO_PRIOR).var == 0
    assert verdicts.fit_prior([]) == NO_PRIOR and verdicts.fit_prior([SeedSpread(0.0, 2, "own seeds")]) == NO_PRIOR
    assert seed_variance([4.8]) is None and own.df == 2 and own.how == "own seeds"
    assert own.var == pytest.approx(np.var([4.80, 4.81, 4.83], ddof=1))


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


def test_a_change_that_rounds_to_zero_keeps_the_side_it_lies_on():
    assert [verdicts.pct(r) for r in (1.014, 0.982, 1.0, 0.9996, 1.0001)] == ["+1.4%", "-1.8%", "+0.0%", "-0.04%",
                                                                                "+0.01%"]
