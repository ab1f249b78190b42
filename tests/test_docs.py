"""The documentation runs: every fenced block marked ``<!-- runnable -->`` in README.md and docs/
is executed as written, and where the page shows what it prints (a ``<!-- output -->`` block right
after it) it prints that; the generated reference pages hold every command, flag, path and field of
the code they describe, checked against the parser and the app themselves; and the site builds in
strict mode (when mkdocs is installed: ``make docs`` installs it)."""

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
RUNNABLE = re.compile(r"^<!-- runnable -->[ \t]*\n```(bash|python)[ \t]*\n(.*?)^```[ \t]*(?:\n|\Z)"
                      r"(?:\n*<!-- output -->[ \t]*\n```text[ \t]*\n(.*?)^```)?", re.M | re.S)
OUTPUT_MARKER = re.compile(r"^<!-- output -->[ \t]*$", re.M)
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]

sys.path.insert(0, str(REPO / "docs"))
import gen_pages  # noqa: E402  (docs/gen_pages.py, the mkdocs hook)


def runnable_blocks() -> list[tuple[str, str, str, str | None]]:
    """(``page:line``, language, code, the output the page shows or None) of every runnable block."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in RUNNABLE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{page.relative_to(REPO)}:{line}", match.group(1), match.group(2), match.group(3)))
    return found


BLOCKS = runnable_blocks()


def shown_output_matches(shown: str, printed: str) -> bool:
    """Whether ``printed`` (the block's standard output) is what the page shows: the same text, line
    for line (trailing blanks aside), where ``...`` stands for any text, across lines too (doctest's
    ELLIPSIS), so that a page can leave out what varies (timings, paths, long numbers)."""
    def lines(text: str) -> str:
        return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())

    pattern = ".*?".join(re.escape(part) for part in lines(shown).split("..."))
    return re.fullmatch(pattern, lines(printed), re.S) is not None


def test_shown_output_matching_is_strict_but_for_the_ellipses():
    printed = '{"ppl": 15.58, "tokens": 71}\nlat.1.gz\nsummary.json  \n'
    assert shown_output_matches('{"ppl": ..., "tokens": 71}\nlat.1.gz\nsummary.json', printed)
    assert shown_output_matches("...\nsummary.json", printed)
    assert not shown_output_matches('{"ppl": ..., "tokens": 72}\n...', printed)  # a number that differs
    assert not shown_output_matches('{"ppl": ..., "tokens": 71}\nlat.1.gz', printed)  # a line left out
    assert not shown_output_matches("lat.1.gz\n...", printed)  # not where the output starts


def test_every_marker_is_on_a_bash_or_python_block():
    markers = sum(len(MARKER.findall(page.read_text(encoding="utf-8"))) for page in PAGES)
    assert markers == len(BLOCKS), "a <!-- runnable --> comment must stand right before a ```bash or ```python block"
    outputs = sum(len(OUTPUT_MARKER.findall(page.read_text(encoding="utf-8"))) for page in PAGES)
    assert outputs == sum(shown is not None for *_, shown in BLOCKS), \
        "an <!-- output --> comment must stand right before a ```text block that follows a runnable block"
    assert outputs >= 2
    readme = [(where, lang, code) for where, lang, code, _ in BLOCKS if where.startswith("README.md")]
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

    process, url = start_server(REPO / "models" / "conversational", "--processes", "1", "--no-access-log")
    try:
        yield url
    finally:
        process.terminate()
        process.wait(30)


@pytest.mark.parametrize(("where", "language", "code", "shown"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_runnable_block(where, language, code, shown, request):
    """Each block as a user runs it (``make test``'s workers run them side by side)."""
    url = request.getfixturevalue("server_url") if "AFP_URL" in code else None
    done = run_block(language, code, url)
    assert done.returncode == 0, f"{where} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert done.stdout.strip(), f"{where} printed nothing"
    if shown is not None:
        assert shown_output_matches(shown, done.stdout), \
            f"{where} shows output it does not print; it prints:\n{done.stdout[-3000:]}"


def sections(page: str, heading: str) -> dict[str, str]:
    """The page's ``## `...` `` sections by their heading's code text (``afp rescore``, ``POST /v1/rescore``),
    or its ``### NAME`` sections, each up to the next heading of its level or above."""
    pattern = r"^## `([^`]+)`.*$" if heading == "##" else r"^### (\S+).*$"
    found = list(re.finditer(pattern, page, re.M))
    out = {}
    for match, following in zip(found, [*found[1:], None]):
        end = following.start() if following else len(page)
        out[match.group(1)] = re.split(r"^#{1,%d} " % len(heading), page[match.end():end], maxsplit=1, flags=re.M)[0]
    return out


def test_cli_reference_has_every_command_flag_argument_choice_and_help_text():
    """Read against the parser (``afp COMMAND --help`` is what a user sees), not against the
    generator: every command has a section, and each section names every flag and argument of
    its command (as a whole flag: ``--nbest`` is not found in ``--nbest-text``), every choice,
    and every help text."""
    import argparse

    from service.cli import build_parser

    page = gen_pages.cli_reference()
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    by_command = sections(page, "##")
    assert set(by_command) == {f"afp {name}" for name in sub.choices}
    for name, command in sub.choices.items():
        section = " ".join(by_command[f"afp {name}"].split())
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            names = action.option_strings or [action.metavar or action.dest]
            for flag in names:
                assert re.search(rf"`{re.escape(flag)}[` ]", section), f"afp {name}: {flag} is not on the CLI page"
            for choice in action.choices or ():
                assert f"`{choice}`" in section, f"afp {name} {names[0]}: choice {choice!r} is not on the CLI page"
            if action.help and "%(" not in action.help:
                text = " ".join(action.help.replace("%%", "%").split()).replace("|", "\\|")
                assert text in section, f"afp {name} {names[0]}: its help is not on the CLI page: {text!r}"


def test_http_and_settings_references_cover_the_schema_and_every_field():
    """Read against the app's own OpenAPI schema (built here, as the server serves it at
    /openapi.json): every operation has a section naming its query parameters, request body types
    and response statuses, and every schema a section naming each of its fields; the page has no
    operation or schema the app lacks."""
    from service.app import create_app
    from service.settings import Settings

    schema = create_app(Settings()).openapi()
    page = gen_pages.http_reference()
    operations = sections(page, "##")
    assert set(operations) == {f"{method.upper()} {path}" for path, methods in schema["paths"].items()
                               for method in methods}
    for path, methods in schema["paths"].items():
        for method, op in methods.items():
            section = operations[f"{method.upper()} {path}"]
            for parameter in op.get("parameters", []):
                assert f"| `{parameter['name']}` |" in section, (method, path, parameter["name"])
            for media in op.get("requestBody", {}).get("content", {}):
                assert f"`{media}`" in section, (method, path, media)
            for status in op["responses"]:
                assert f"\n| {status} |" in section, (method, path, status)
    schemas = schema["components"]["schemas"]
    documented = sections(page.split("\n## Schemas\n", 1)[1], "###")
    assert set(documented) == set(schemas)
    for name, body in schemas.items():
        for field in body.get("properties", {}):
            assert f"| `{field}` |" in documented[name], f"{name}.{field} is not on the HTTP page"
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
