"""The claims "Both parts on a small transformer" makes about seed 0, the seed that tuned each arm's learning
rate, recomputed from the recorded JSON with plain Python (the chapter asserts the same with pandas)."""

from __future__ import annotations

import math

from helpers import gpt_study, mean_se


def _cells(doc):
    """{(scope, δ): {seed: test loss}} of the runs at the arm's chosen rate."""
    out = {}
    for r in doc["runs"]:
        if r["lr"] == doc["lr"]:
            out.setdefault((r["scope"], r["delta"]), {})[r["seed"]] = r["test_loss"]
    return out


def test_seed_zero_is_the_tuning_winner_and_one_of_three_seeds():
    for arm, doc in gpt_study().items():
        cells = _cells(doc)
        assert sorted(cells["all", 0.0]) == [0, 1, 2], arm
        tuning = {r["lr"]: r["val_loss"] for r in doc["runs"] if r["seed"] == 0 and r["scope"] == "all"
                  and r["delta"] == 0.0}
        assert min(tuning, key=tuning.get) == doc["lr"], arm  # seed 0's run at the rate won the tuning


def test_verdicts_keep_their_sign_without_seed_zero():
    docs = gpt_study()
    loss = {arm: _cells(docs[arm])["all", 0.0] for arm in ("adamw", "muon", "stiefel", "stiefel-attention")}
    for a, b in [("muon", "adamw"), ("stiefel", "muon"), ("stiefel-attention", "muon")]:
        for seeds in ((0, 1, 2), (1, 2)):
            (ma, sa), (mb, sb) = (mean_se([loss[x][s] for s in seeds]) for x in (a, b))
            d, se = ma - mb, math.hypot(sa, sb)
            assert abs(d) > 2 * se and (d < 0) == (a == "muon"), (a, b, seeds, d, se)


def test_no_winners_curse_is_resolved():
    """Seed 0 minus the mean of seeds 1 and 2, over the cells whose seed-0 run won a tuning: within two
    standard errors of zero."""
    won = []
    for doc in gpt_study().values():
        t = _cells(doc)["all", 0.0]
        won.append(t[0] - (t[1] + t[2]) / 2)
    m, se = mean_se(won)
    assert abs(m) < 2 * se, (m, se)
