"""The documentation runs: every fenced block marked ``<!-- runnable -->`` in README.md and docs/
is executed as written, the generated reference pages cover the code they describe, and the site
builds in strict mode (when mkdocs is installed: ``make docs`` installs it)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the venv's bin: afp, python, mkdocs
MARKER = re.compile(r"^<!-- runnable -->[ \t]*$", re.M)
RUNNABLE = re.compile(r"^<!-- runnable -->[ \t]*\n```(bash|python)[ \t]*\n(.*?)^```", re.M | re.S)
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]

sys.path.insert(0, str(REPO / "docs"))
import gen_pages  # noqa: E402  (docs/gen_pages.py, the mkdocs hook)


def runnable_blocks() -> list[tuple[str, str, str]]:
    """(``page:line``, language, code) of every runnable block."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in RUNNABLE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{page.relative_to(REPO)}:{line}", match.group(1), match.group(2)))
    return found


BLOCKS = runnable_blocks()


def test_every_marker_is_on_a_bash_or_python_block():
    markers = sum(len(MARKER.findall(page.read_text(encoding="utf-8"))) for page in PAGES)
    assert markers == len(BLOCKS), "a <!-- runnable --> comment must stand right before a ```bash or ```python block"
    readme = [(where, lang, code) for where, lang, code in BLOCKS if where.startswith("README.md")]
    assert {lang for _, lang, _ in readme} == {"bash", "python"}, "the README has a CLI, an HTTP and a Python example"
    assert any("curl" in code for _, _, code in readme)


def run_block(language: str, code: str, url: str | None) -> subprocess.CompletedProcess:
    """One block as a user runs it: bash in the repository root with the venv's bin first on the PATH, or the
    venv's Python; ``$AFP_URL`` names the test's server."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(REPO),
           "OMP_NUM_THREADS": "1", **({"AFP_URL": url} if url else {})}
    command = ["bash", "-e", "-o", "pipefail", "-c", code] if language == "bash" else [sys.executable, "-c", code]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def server_url():
    """A real ``afp serve`` of the bundled default model on a free port, for the blocks that use
    ``$AFP_URL`` (started once per module and worker, on first use)."""
    from tests.service.test_server_process import start_server

    process, url = start_server(REPO / "models" / "conversational", "--no-access-log")
    try:
        yield url
    finally:
        process.terminate()
        process.wait(30)


@pytest.mark.parametrize(("where", "language", "code"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_runnable_block(where, language, code, request):
    """Each block as a user runs it (``make test``'s workers run them side by side)."""
    url = request.getfixturevalue("server_url") if "AFP_URL" in code else None
    done = run_block(language, code, url)
    assert done.returncode == 0, f"{where} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert done.stdout.strip(), f"{where} printed nothing"


def test_cli_reference_has_every_command_and_option():
    from service.cli import build_parser

    page = gen_pages.cli_reference()
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    for name, p in sub.choices.items():
        assert f"## `afp {name}`" in page
        for action in p._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in page, f"afp {name} {flag} is missing from the CLI reference"


def test_http_and_settings_references_cover_the_schema_and_every_field():
    from service.settings import Settings

    schema = gen_pages.openapi_schema()
    page = gen_pages.http_reference(schema)
    for path, methods in schema["paths"].items():
        for method in methods:
            assert f"## `{method.upper()} {path}`" in page
    for name in schema["components"]["schemas"]:
        assert f"### {name} {{ #{name.lower()} }}" in page
    settings = gen_pages.settings_reference()
    for name in Settings.model_fields:
        assert f"`AFP_{name.upper()}`" in settings


def test_models_page_has_every_bundled_model_and_its_training_notes():
    page = gen_pages.models_page()
    for training in (REPO / "models").rglob("TRAINING.md"):
        folder = training.parent.relative_to(REPO / "models")
        assert f"{{ #{'-'.join(folder.parts)} }}" in page, f"models/{folder}/TRAINING.md is missing"
        assert training.read_text(encoding="utf-8").splitlines()[2] in page


def test_results_page_is_the_report_with_its_plots():
    from bench.common import RESULTS
    from bench.report import render

    page, plots = gen_pages.results_page()
    body = render(RESULTS).split("\n", 1)[1]
    assert all(line in page for line in body.splitlines() if line.startswith("| "))  # every table row, as rendered
    assert plots and all((RESULTS / name).is_file() and f"](results/{name})" in page for name in plots)


def test_the_site_builds_strict(tmp_path):
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python"):
        if importlib.util.find_spec(module.split(".")[0]) is None or importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (make docs installs the docs extra)")
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=REPO,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "afp rescore" in (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "/v1/rescore" in (site / "reference" / "http" / "index.html").read_text(encoding="utf-8")
    assert "AFP_MAX_BODY_BYTES" in (site / "reference" / "settings" / "index.html").read_text(encoding="utf-8")
    assert "load_model" in (site / "reference" / "python" / "index.html").read_text(encoding="utf-8")
    results = (site / "results" / "index.html").read_text(encoding="utf-8")
    _, plots = gen_pages.results_page()
    assert all((site / "results" / name).is_file() for name in plots) and "<img" in results
