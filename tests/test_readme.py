"""The README's two commands are the ones CI runs, and they do the whole set-up."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _ci_extract(kind: str) -> str:
    """Run the same extraction .ci/run uses (its `readme_command` function) and return its output."""
    script = (ROOT / ".ci" / "run").read_text()
    func = re.search(r"readme_command\(\) \{.*?\n\}", script, re.S).group(0)
    out = subprocess.run(["bash", "-c", f"{func}\nreadme_command {kind}"], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_readme_has_exactly_two_ci_commands():
    assert README.count("<!-- ci:build -->") == 1
    assert README.count("<!-- ci:test -->") == 1


def test_ci_runs_the_readme_commands():
    build, test = _ci_extract("build"), _ci_extract("test")
    for cmd in (build, test):
        assert "python3 -m venv .venv" in cmd and "pip install -r requirements.txt" in cmd
        assert f"```bash\n{cmd}\n```" in README
    assert "jupyter-book build . -W -n --keep-going" in build
    assert "pytest" in test
    script = (ROOT / ".ci" / "run").read_text()
    assert "set -euo pipefail" in script and "rm -rf .venv _build" in script


def test_requirements_pins():
    req = (ROOT / "requirements.txt").read_text().splitlines()
    assert "torch==2.13.0" in req
    assert "jupyter-book==1.0.4.post1" in req
    assert "-e ." in req
    unpinned = [r for r in req if r and not r.startswith(("#", "-e")) and "==" not in r]
    assert unpinned == []
