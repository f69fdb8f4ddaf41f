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


def test_fast_run_in_readme_and_slow_and_browser_runs_in_ci():
    assert '-m "not slow"' in _ci_extract("test")
    script = (ROOT / ".ci" / "run").read_text()
    build_at = script.index('bash -c "$build_cmd"')
    slow_at = script.index("pytest -m slow")
    assert build_at < slow_at  # the browser test needs the built book
    assert "BOOK_BROWSER_REQUIRED=1" in script and "BOOK_HTML=_build/html" in script
    assert "command -v chromium" in script and "apt-get install" in script


def test_ci_builds_the_readme_pdf_command_with_the_readme_packages():
    # the PDF is its own CI step after the HTML build (it reuses the executed notebooks), before the slow
    # tests, which check it (test_pdf.py); the Debian packages CI installs are the ones the README lists
    pdf = _ci_extract("pdf")
    assert f"```bash\n{pdf}\n```" in README and "--builder pdflatex" in pdf and "_build/html/" in pdf
    script = (ROOT / ".ci" / "run").read_text()
    assert script.index('bash -c "$build_cmd"') < script.index('bash -c "$pdf_cmd"') < script.index("pytest -m slow")
    assert "BOOK_PDF_REQUIRED=1" in script
    packages = re.search(r'TEX_PACKAGES="([^"]+)"', script).group(1).split()
    readme_install = " ".join(README.split("<!-- ci:pdf -->")[0].rsplit("apt-get install", 1)[1].split("`")[0].split())
    assert sorted(packages) == sorted(p for p in readme_install.split() if not p.startswith("-"))


def _code_blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, re.S)


def test_no_bare_python_in_commands():
    # a bare `python` fails outside the virtual environment: commands use .venv/bin/python (or python3 -m venv)
    for block in _code_blocks("bash"):
        for line in block.splitlines():
            assert not re.search(r"(^|[\s;&|(])python\s", line), line


def test_library_snippet_runs_and_uses_its_imports():
    (snippet,) = _code_blocks("python")
    imported = re.search(r"from svmuon import (.+)", snippet).group(1).replace(" ", "").split(",")
    body = snippet.split(re.search(r"from svmuon import .+", snippet).group(0), 1)[1]
    for name in imported:
        assert re.search(rf"\b{name}\(", body), f"the README snippet imports {name} but never calls it"
    exec(compile(snippet, "README.md", "exec"), {})  # noqa: S102 - the README's own example


def test_every_cli_option_has_help():
    # `python -m svmuon.bench NAME --help` and `... experiments NAME --help` explain every option
    import contextlib
    import io

    import svmuon.bench
    import svmuon.experiments
    from svmuon._cli import available, dispatch

    for package, kind in ((svmuon.bench, "benchmark"), (svmuon.experiments, "experiment")):
        for name in available(package):
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
                dispatch(package, kind, [name, "--help"])
            options = out.getvalue().split("options:", 1)[1]
            # an option without help is a line holding only the flag (and its metavar)
            bare = [line for line in options.splitlines() if re.fullmatch(r"\s+-[-\w]+(\s+[A-Z_\[\]. ]+)?(, -[-\w]+.*)?", line)
                    and not re.search(r"\s{2,}\S", line.strip())]
            undocumented = [line.strip() for line in bare if not _has_help_below(options, line)]
            assert not undocumented, f"{kind} {name}: options without help: {undocumented}"


def _has_help_below(options: str, line: str) -> bool:
    """argparse puts a long option's help on the next, more indented line."""
    lines = options.splitlines()
    i = lines.index(line)
    return i + 1 < len(lines) and len(lines[i + 1]) - len(lines[i + 1].lstrip()) > len(line) - len(line.lstrip()) + 2
