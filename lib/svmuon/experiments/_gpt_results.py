"""Reading the ``gpt`` experiment's recorded results into pandas frames (re-exported by ``gpt``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from svmuon.experiments._gpt_model import ATTENTION, KINDS
from svmuon.experiments._gpt_train import ARMS

MEASURES = ("H_q1_p1", "H_q2_p1", "H_q1_p2", "H_q2_p2")  # Shannon and Rényi-2 of p ∝ σ and p ∝ σ²


def load(size: str | None = None, root: str | Path | None = None) -> tuple[str, dict[str, dict[str, Any]]]:
    """``(size, {arm: results document})`` of the recorded runs (:func:`svmuon.results.read`).

    Args:
        size: ``"cpu"`` (the study), ``"pilot"``, ``"gpu"``; ``None`` takes ``cpu`` when a file of every arm
            exists for it, else ``pilot``.
        root: the repository folder holding ``experiments/results`` (default: the book's repository).

    Raises:
        FileNotFoundError: an arm's file is missing for the chosen size (the message gives the command).
    """
    from svmuon import results

    have = set(results.names("experiments", root=root))
    name = lambda s, arm: f"gpt-{s}-{arm}"  # noqa: E731
    if size is None:
        size = "cpu" if all(name("cpu", arm) in have for arm in ARMS) else "pilot"
    missing = [arm for arm in ARMS if name(size, arm) not in have]
    if missing:
        raise FileNotFoundError(f"no recorded gpt results of size {size!r} for the arms {missing}: run "
                                f"python -m svmuon.experiments gpt --size {size} --arms {' '.join(missing)}")
    return size, {arm: results.read("experiments", name(size, arm), root=root) for arm in ARMS}


def _spec(doc: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    return {"arm": r["arm"], "lr": r["lr"], "seed": r["seed"], "delta": r["delta"], "scope": r["scope"],
            "tuned": r["lr"] == doc.get("lr")}


def runs_frame(docs: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """One row per run: its settings, ``tuned`` (at the arm's chosen rate), final losses, timings (seconds),
    the optimizer's share of the training time, and the monitor's time as a share of it."""
    rows = []
    for doc in docs.values():
        for r in doc["runs"]:
            t = r["time"]
            opt = sum(v for k, v in t.items() if k.startswith("optimizer_") and k != "optimizer_share")
            rows.append(dict(_spec(doc, r), val_loss=r["val_loss"], test_loss=r["test_loss"], diverged=r["diverged"],
                             steps=r["steps"], train_s=t["train_s"], forward_backward_s=t["forward_backward"],
                             optimizer_s=opt, optimizer_share=t["optimizer_share"],
                             monitor_share=t["monitor_s"] / t["train_s"], max_entropy_error=r.get("max_entropy_error"),
                             max_stiefel_defect=r.get("max_stiefel_defect")))
    return pd.DataFrame(rows)


def curves_frame(docs: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """The learning curves, long: one row per (run, evaluation) with ``step``, ``time_s`` (training seconds,
    evaluations and the monitor excluded) and ``val_loss``."""
    parts = []
    for doc in docs.values():
        for r in doc["runs"]:
            c = pd.DataFrame(r["curve"])
            parts.append(c.assign(**_spec(doc, r)))
    return pd.concat(parts, ignore_index=True)


def entropy_frame(docs: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """The monitored entropies, long: one row per (run, step, matrix), with ``layer``, ``kind`` (q, k, v, o,
    mlp_in, mlp_out), ``log_k``, the four measures and, per measure, ``gauss_<measure>`` (the large-n value)
    and ``gauss_mc_<measure>`` (the Monte Carlo mean at the exact shape) from the file's baselines."""
    parts = []
    for doc in docs.values():
        base = doc["baselines"]
        for r in doc["runs"]:
            e = pd.DataFrame(r["entropy"])
            e["layer"] = e["name"].str.split(".").str[0].astype(int)
            e["kind"] = e["name"].str.split(".", n=1).str[1]
            e["log_k"] = [math.log(min(base[k]["m"], base[k]["n"])) for k in e["kind"]]
            for m in MEASURES:
                s = m[2:]
                e[f"gauss_{m}"] = e["kind"].map({k: v[f"gauss_{s}"] for k, v in base.items()})
                e[f"gauss_mc_{m}"] = e["kind"].map({k: v.get(f"gauss_mc_{s}", np.nan) for k, v in base.items()})
            parts.append(e.assign(**_spec(doc, r)))
    return pd.concat(parts, ignore_index=True)


def final_entropy_by_kind(docs: dict[str, dict[str, Any]], measure: str = "H_q1_p1") -> pd.DataFrame:
    """Per run at its arm's tuned rate, scope ``all``: ``H - log k`` at the last recorded step, averaged over
    the layers of each kind; columns ``arm, seed, delta`` and one per kind."""
    e = entropy_frame(docs)
    e = e[e["tuned"] & (e["scope"] == "all") & (e["status"] == "ok")]
    last = e[e["step"] == e.groupby(["arm", "seed", "delta"])["step"].transform("max")]
    gap = last.assign(gap=last[measure] - last["log_k"])
    out = gap.pivot_table(index=["arm", "seed", "delta"], columns="kind", values="gap", aggfunc="mean")
    return out[list(KINDS)].reset_index()


def mean_se(values: Any) -> tuple[float, float, int]:
    """Mean, standard error (``std(ddof=1)/√n``; NaN for one value) and count of the finite ``values``."""
    a = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    se = float(a.std(ddof=1) / math.sqrt(len(a))) if len(a) > 1 else math.nan
    return (float(a.mean()) if len(a) else math.nan), se, int(len(a))


def is_attention(kind: str) -> bool:
    return kind in ATTENTION
