"""The fixed-entropy experiment: the parametrisation holds H = h after every step; the smoke run and resuming."""

from __future__ import annotations

import json
import math

import pytest
import torch

from svmuon import singular_value_entropy
from svmuon.experiments import fixed_entropy as fe


@pytest.mark.parametrize("arm,power", [  # 1.4 s of CPU each (one thread, the shared 2-core machine): one is fast
    ("level_set", 1), pytest.param("shape", 1, marks=pytest.mark.slow),
    pytest.param("level_set", 2, marks=pytest.mark.slow), pytest.param("shape", 2, marks=pytest.mark.slow)])
def test_entropy_stays_exactly_h_after_every_step(arm, power):
    """Float64 network, ManifoldMuon on U and V plus Adam on the rest: after every one of 15 steps the SVD
    of each hidden W has entropy h to 1e-6 (the issue's bound; measured ~1e-12 in float64)."""
    torch.manual_seed(0)
    delta = 1.2
    net = fe.Net((12, 24, 8, 3), seed=0, arm=arm, delta=delta, power=power, dtype=torch.float64)
    opts = fe.make_optimizers(net, "manifold", 0.05)
    z0 = [m.z.detach().clone() for m in net.hidden]
    X, y = torch.randn(64, 12, dtype=torch.float64), torch.randint(0, 3, (64,))
    for _ in range(15):
        for o in opts:
            o.zero_grad()
        torch.nn.functional.cross_entropy(net(X), y).backward()
        for o in opts:
            o.step()
        for W, m in zip(net.weights(), net.hidden):
            h = math.log(min(W.shape)) - delta
            # the experiment's bound (docstring); exact to ~1e-12 in float64
            assert abs(float(singular_value_entropy(W.detach(), power=power)) - h) < 1e-6
            for Q in (m.U, m.V):
                # float64 points after 15 Björck-corrected steps: ~1e-15; a float32 step would leave ~1e-7
                assert (Q.T @ Q - torch.eye(Q.shape[1], dtype=torch.float64)).abs().max() < 1e-10
    moved = [not torch.equal(m.z, z) for m, z in zip(net.hidden, z0)]
    assert all(moved) if arm == "level_set" else not any(moved)  # only the level-set arm learns its spectrum


def test_text_corpus_is_the_standard_library_offline():
    tokens, info = fe.text_corpus(5000)
    assert len(tokens) == 5000 and tokens.min() >= 0 and tokens.max() <= 96
    assert info["files"] >= 1 and info["first"].endswith(".py")


@pytest.mark.slow  # two smoke runs of the digits task: ~15 s on the busy 2-core machine
def test_smoke_runs_write_results_and_a_second_replaces_the_first(tmp_path):
    """Issue 19: two ``--smoke`` runs on one --output-dir (seeds 0 and 1) both exit 0 and the file keeps only
    seed 1's runs (a smoke run starts afresh: it is a test of the script, not a resumable sweep)."""
    torch.set_num_threads(1)
    assert fe.main(["--smoke", "--tasks", "digits", "--seeds", "0", "--output-dir", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "fixed-entropy-digits.json").read_text())
    methods = sorted(r["method"] for r in doc["runs"])
    assert methods == ["adamw", "level_set", "muon", "orthogonal", "shape"]
    for r in doc["runs"]:
        assert 0 < r["test_loss"] < 10 and 0 <= r["test_acc"] <= 1
        if r["method"] in ("shape", "level_set"):
            assert r["max_entropy_error"] < 1e-5  # float32 weights: σ exact, U and V orthonormal to ~1e-6
    assert {"date", "torch", "cpu_count"} <= set(doc["environment"])
    assert fe.main(["--smoke", "--tasks", "digits", "--seeds", "1", "--output-dir", str(tmp_path)]) == 0
    doc2 = json.loads((tmp_path / "fixed-entropy-digits.json").read_text())
    assert sorted(r["method"] for r in doc2["runs"]) == methods and {r["seed"] for r in doc2["runs"]} == {1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fixed-entropy-digits.json"]  # no lock or temporary file


@pytest.mark.slow  # two interpreters (torch imports) and two smoke runs, one after the other: ~40 s
def test_concurrent_smoke_runs_are_serialised_by_the_lock(tmp_path):
    """The second run starts while the first holds the file's lock: it waits (and says so), then replaces the
    file; both exit 0 and the file holds seed 1's runs only."""
    import fcntl
    import os
    import subprocess
    import sys
    import time

    cmd = [sys.executable, "-m", "svmuon.experiments", "fixed-entropy", "--smoke", "--tasks", "digits",
           "--output-dir", str(tmp_path), "--seeds"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen([*cmd, "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lock = tmp_path / "fixed-entropy-digits.json.lock"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait until the first run holds the lock
        if lock.exists():
            with open(lock) as f:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    fcntl.flock(f, fcntl.LOCK_UN)
                except BlockingIOError:
                    break
        time.sleep(0.05)
    else:
        first.kill()
        pytest.fail("the first run never took the lock")
    second = subprocess.run([*cmd, "1"], capture_output=True, text=True, env=env, timeout=600)
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-2000:]
    assert second.returncode == 0, second.stderr[-2000:]
    assert "another run is writing it" in second.stderr
    doc = json.loads((tmp_path / "fixed-entropy-digits.json").read_text())
    assert {r["seed"] for r in doc["runs"]} == {1} and len(doc["runs"]) == 5


def test_smoke_never_overwrites_a_full_sweep(tmp_path, capsys):
    path = tmp_path / "fixed-entropy-digits.json"
    full = {"experiment": fe.NAME, "task": "digits", "config": fe.TASKS["digits"], "grids": fe.GRIDS,
            "other_lr": fe.OTHER_LR, "settings": {"epochs": None, "steps_per_epoch": None, "tune": True,
                                                   "chars": fe.TEXT_CHARS}, "runs": []}
    path.write_text(json.dumps(full))
    with pytest.raises(SystemExit) as info:
        fe.main(["--smoke", "--tasks", "digits", "--output-dir", str(tmp_path)])
    assert info.value.code == 2 and "settings" in capsys.readouterr().err
    assert path.read_text() == json.dumps(full)  # untouched


def test_smoke_refuses_to_overwrite_recorded_results(capsys):
    with pytest.raises(SystemExit):
        fe.main(["--smoke"])
    assert "--output-dir" in capsys.readouterr().err


@pytest.mark.slow  # both tasks (the text corpus build and a few text steps), ~10 s
def test_smoke_both_tasks(tmp_path):
    assert fe.main(["--smoke", "--output-dir", str(tmp_path)]) == 0
    for task in ("digits", "text"):
        doc = json.loads((tmp_path / f"fixed-entropy-{task}.json").read_text())
        assert len(doc["runs"]) == 5 and doc["task"] == task


# ------------------------------------------------------------------ review fixes: resuming and bad δ

def test_resume_refuses_a_file_of_other_settings(tmp_path, monkeypatch):
    """A 1-epoch smoke file must not be taken as finished full runs (keys are method, δ, r, seed only), nor a
    file of another task or grid; a file from before the settings record is resumed by a default run."""
    monkeypatch.setattr(fe, "load_task", lambda task, chars=fe.TEXT_CHARS: {"info": {}})
    path = tmp_path / "fixed-entropy-digits.json"
    base = {"experiment": fe.NAME, "task": "digits", "config": fe.TASKS["digits"], "grids": fe.GRIDS,
            "other_lr": fe.OTHER_LR, "data": {}, "tuning": [], "runs": [], "lr": {"manifold": 1, "muon": 1, "adamw": 1}}
    smoke = dict(base, settings={"epochs": 1, "steps_per_epoch": 20, "tune": False, "chars": 20_000})
    path.write_text(json.dumps(smoke))
    with pytest.raises(ValueError, match="settings"):
        fe.run_task("digits", path, seeds=[0], deltas=(), powers=[], square_seeds=0)
    path.write_text(json.dumps(dict(base, grids={"manifold": [1.0]})))
    with pytest.raises(ValueError, match="grids"):
        fe.run_task("digits", path, seeds=[0], deltas=(), powers=[], square_seeds=0)
    path.write_text(json.dumps(dict(base, task="text")))
    with pytest.raises(ValueError, match="task"):
        fe.run_task("digits", path, seeds=[0], deltas=(), powers=[], square_seeds=0)
    # legacy file (no "settings"): resumed by a default run, refused by a smoke-like run
    done = [{"method": m, "delta": 0.0, "power": 1, "seed": 0} for m in ("orthogonal", "muon", "adamw")]
    path.write_text(json.dumps(dict(base, runs=done)))
    with pytest.raises(ValueError, match="settings"):
        fe.run_task("digits", path, seeds=[0], deltas=(), powers=[], square_seeds=0, epochs=1, tune=False)
    doc = fe.run_task("digits", path, seeds=[0, 0], deltas=(), powers=[], square_seeds=0)  # nothing left to run
    assert len(doc["runs"]) == 3 and doc["settings"]["epochs"] is None
    assert not (tmp_path / "fixed-entropy-digits.json.tmp").exists()


def test_repeated_seeds_run_each_point_once(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(fe, "load_task", lambda task, chars=fe.TEXT_CHARS: {"info": {}})
    monkeypatch.setattr(fe, "train", lambda task, data, method, lr, seed, **kw: calls.append((method, seed)) or
                        {"method": method, "delta": kw.get("delta", 0.0), "power": kw.get("power", 1), "seed": seed,
                         "val_loss": 1.0,
                         "val_acc": 0.5, "lr": lr, "seconds": 0.0})
    doc = fe.run_task("digits", tmp_path / "f.json", seeds=[0, 0], deltas=(0.5, 0.5), powers=[1, 1.0],
                      square_seeds=1, tune=False)
    keys = [fe._key(r) for r in doc["runs"]]
    assert len(keys) == len(set(keys)) == 5


def test_tuning_never_picks_a_diverged_learning_rate(tmp_path, monkeypatch):
    """min() keeps a NaN first element (NaN < x is False): the smallest rate of each grid diverges here and
    must lose to the finite ones (val loss = lr, so the second rate wins)."""
    group = {"orthogonal": "manifold", "muon": "muon", "adamw": "adamw"}
    monkeypatch.setattr(fe, "load_task", lambda task, chars=fe.TEXT_CHARS: {"info": {}})
    monkeypatch.setattr(fe, "train", lambda task, data, method, lr, seed, **kw: {
        "method": method, "lr": lr, "val_loss": float("nan") if lr == fe.GRIDS[group[method]][0] else lr,
        "val_acc": 0.0, "seconds": 0.0})
    doc = fe.run_task("digits", tmp_path / "f.json", seeds=[], deltas=(), powers=[], square_seeds=0)
    assert doc["lr"] == {g: fe.GRIDS[g][1] for g in ("manifold", "muon", "adamw")}


@pytest.mark.parametrize("delta", [-0.1, math.log(8), 5.0, float("nan")])
def test_layer_refuses_an_unreachable_delta(delta):
    with pytest.raises(ValueError, match="delta"):
        fe.FixedEntropyLinear(8, 12, delta, 1, True, torch.Generator().manual_seed(0), torch.float64)


def test_cli_refuses_an_unreachable_delta(capsys, tmp_path, monkeypatch):
    def never(*a, **k):
        raise AssertionError("run_task must not start (hours of tuning before the bad δ)")

    monkeypatch.setattr(fe, "run_task", never)
    with pytest.raises(SystemExit):
        fe.main(["--deltas", "5.0", "--output-dir", str(tmp_path)])
    assert "--deltas" in capsys.readouterr().err


def test_deeper_net_holds_every_hidden_matrix_at_its_own_target():
    """digits-deep's shape: three hidden matrices, each at log k_i - δ with its own k_i (here 12, 16, 8)."""
    net = fe.Net((12, 24, 16, 8, 3), seed=1, arm="level_set", delta=0.5, dtype=torch.float64)
    assert len(net.hidden) == 3
    for W in net.weights():
        # level-set root to 1e-10 (test_level_set.EXACT) plus the float64 SVD's rounding
        assert abs(float(singular_value_entropy(W.detach())) - (math.log(min(W.shape)) - 0.5)) < 1e-9
    assert net(torch.randn(4, 12, dtype=torch.float64)).shape == (4, 3)


def _recorded(task):
    from svmuon._paths import results_dir

    return json.loads((results_dir("experiments") / f"fixed-entropy-{task}.json").read_text())


def _loss_stats(runs, method, power, delta):
    """Mean and standard error over seeds of the test loss at one point (the orthogonal limit is δ = 0)."""
    vals = [r["test_loss"] for r in runs
            if r["method"] == method and (method == "orthogonal" or (r["power"] == power and r["delta"] == delta))]
    n = len(vals)
    mean = sum(vals) / n
    return mean, math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1) / n)


@pytest.mark.parametrize("task", ["digits", "text"])
def test_recorded_results_support_the_chapter_claims(task):
    """Issue 20 erratum 3: the claims of "Holding the entropy fixed" ("What it supports") about the means,
    recomputed from the recorded results with plain Python (the chapter glues its numbers from pandas and asserts
    the same). Which differences are resolved is read with small-sample t-tests, paired over the seeds, in
    tests/test_fixed_entropy_claims.py (test_low_targets_against_the_best_target), not by a 2-s.e. rule. A
    re-recorded experiment that breaks one fails here and in the chapter: then rewrite the prose."""
    doc = _recorded(task)
    runs = doc["runs"]
    for method in ("shape", "level_set"):
        for power in (1, 2):
            curve = {0.0: _loss_stats(runs, "orthogonal", 1, 0.0)}
            deltas = {r["delta"] for r in runs if r["method"] == method}
            curve.update({d: _loss_stats(runs, method, power, d) for d in deltas})
            best = min(curve, key=lambda d: curve[d][0])
            # low targets above the best in the mean: every one on digits, from δ = 2 on text (where δ = 1.2 is
            # among the close targets near the best, or the best); on digits with p ∝ σ the orthogonal limit best
            low = (1.2, 2.0, 3.0) if task == "digits" else (2.0, 3.0)
            assert all(curve[d][0] > curve[best][0] for d in low), (task, method, power)
            assert task != "digits" or power == 2 or best == 0.0
    if task == "digits":
        assert doc["data"]["train"] == 1077  # sklearn's 1797 digits, 20 % test, then 25 % of the rest validation
    else:  # the free runs' matrices end 0.06-0.15 nats below log k with p ∝ σ (the chapter's triangles)
        for method, (lo, hi) in (("muon", (0.04, 0.09)), ("adamw", (0.12, 0.2))):
            ends = [math.log(64) - sum(r["entropy_p1"]) / len(r["entropy_p1"]) for r in runs if r["method"] == method]
            assert lo < sum(ends) / len(ends) < hi


# ------------------------------------------------------------------ the initial-scale check (digits-unit, ...)

def test_start_check_tasks_run_the_constrained_arms_only(tmp_path):
    """``text-unit``: the fixed-entropy layers start at ‖W‖_F² = k, only the manifold rate is tuned, and the plan
    has no baseline runs (the baselines have no fixed-entropy layers: the plain task's are the same runs)."""
    assert fe.TASKS["text-unit"]["start"] == "unit" and fe.TASKS["digits-he"]["start"] == "he"
    assert {d["method"] for d in fe.plan([0, 1], (0.42,), [1], 2, baselines=False)} == {"orthogonal", "shape", "level_set"}
    assert {"muon", "adamw"} <= {d["method"] for d in fe.plan([0], (0.42,), [1], 1)}
    assert fe.main(["--smoke", "--tasks", "text-unit", "--output-dir", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "fixed-entropy-text-unit.json").read_text())
    assert set(doc["lr"]) == {"manifold"} and {t["method"] for t in doc["tuning"]} == {"orthogonal"}
    assert {r["method"] for r in doc["runs"]} == {"orthogonal", "shape", "level_set"}
    assert doc["config"]["start"] == "unit"


def test_recorded_start_check_supports_the_chapter_claims():
    """"Does the initial scale matter?" recomputed with plain Python from the four recorded files: from either
    start the orthogonal limit is the best point on digits and every arm at log k - 0.42 beats it on text (and
    trails it on digits) (the chapter asserts the same; whether a point moves between the starts is read with a
    paired t-test in tests/test_fixed_entropy_claims.py::test_start_check_signs_per_seed_and_no_shift)."""
    for task in ("digits", "text"):
        stats = {}
        for start in ("he", "unit"):
            runs = _recorded(f"{task}-{start}")["runs"]
            points = {("orthogonal", 0.0)} | {(r["method"], r["delta"]) for r in runs if r["method"] != "orthogonal"}
            stats[start] = {(m, d): _loss_stats(runs, m, 1, d) for m, d in points}
            best = min(stats[start], key=lambda k: stats[start][k][0])
            orth = stats[start]["orthogonal", 0.0][0]
            for arm in ("shape", "level_set"):  # every arm at δ = 0.42 on the side the main sweep found
                assert (stats[start][arm, 0.42][0] > orth) == (task == "digits"), (task, start, arm)
            assert (best == ("orthogonal", 0.0)) == (task == "digits")
        assert set(stats["unit"]) == set(stats["he"]), task  # the same points from both starts
