"""Smoke run of ``python -m svmuon.bench entropy-monitor``: it runs, writes its JSON, and the monitor reads
nothing back to the host off its grid and once per record (one device)."""

from __future__ import annotations

import json

import pytest

from svmuon.bench import entropy_monitor


@pytest.mark.slow  # builds and trains the smoke GPT; the first Muon and AdamW in a process import torch._dynamo (~5-15 s)
def test_bench_entropy_monitor_smoke(tmp_path):
    out = tmp_path / "e.json"
    assert entropy_monitor.main(["--smoke", "--steps", "6", "--every", "3", "--output", str(out)]) == 0
    data = json.loads(out.read_text())
    r = data["results"]
    assert r["records"] == 2 and r["matrices"] == 6 and 0 < r["overhead"]
    assert r["host_reads_off_grid"] == 0 and r["host_reads_per_record"] == 1
    assert {"date", "processor"} <= set(data["hardware"])


def test_every_beyond_the_steps_is_refused(capsys, tmp_path):
    with pytest.raises(SystemExit):
        entropy_monitor.main(["--every", "10", "--steps", "5", "--output", str(tmp_path / "e.json")])
    assert "--every" in capsys.readouterr().err
