"""mkdocs hook: the pages that are generated from the code at build time, never written by hand.

* ``reference/cli.md``: every ``afp`` command, from the argparse parser (``service.cli.build_parser``);
* ``reference/http.md`` and ``reference/openapi.json``: from the FastAPI app's OpenAPI schema
  (``service.app.create_app(Settings()).openapi()``, built as the tests build the app; no model is loaded);
* ``reference/settings.md``: the server's ``AFP_*`` settings, from the pydantic ``Settings`` fields;
* ``reference/models.md``: the bundled models (``models/*/``: config.json, mixture.json and each TRAINING.md);
* ``results.md`` and its plots: ``bench.report.render(bench/results)``, the same text as
  ``bench/results/README.md``, with each plot it names shown as an image.

mkdocs.yml names this file under ``hooks:``; ``mkdocs build --strict`` (``make docs``) runs it. The
functions return Markdown text, so a test can call them without mkdocs.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _importable() -> None:
    """bench/ is not an installed package (and mkdocs restores sys.path after loading a hook)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))

GENERATED_NOTE = "*Generated at build time by `docs/gen_pages.py` from {source}; do not edit.*"


def _cell(text: Any) -> str:
    """One Markdown table cell: no newlines, ``|`` escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


# --- the command line ---------------------------------------------------------------------------------------------

def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        name = action.metavar or action.dest
        return f"`{name}`" + (" ..." if action.nargs in ("+", "*") else "")
    shown = []
    for flag in action.option_strings:
        if action.nargs == 0:
            shown.append(f"`{flag}`")
        else:
            metavar = action.metavar or (action.dest.upper() if not action.choices else None)
            shown.append(f"`{flag} {metavar}`" if metavar else f"`{flag}`")
    return ", ".join(shown)


def _default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    if action.default is None or action.default is argparse.SUPPRESS or action.nargs == 0 and action.default is False:
        return ""
    return f"`{action.default}`"


def cli_reference() -> str:
    from service.cli import build_parser

    old_columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # usage lines wrap the same on every machine
    try:
        parser = build_parser()
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        summaries = {a.dest: a.help for a in sub._choices_actions}
        lines = ["# Command line: `afp`", "", GENERATED_NOTE.format(source="`service.cli.build_parser()`"), "",
                 parser.description or "", "",
                 "Every command prints `afp: error: ...` and exits with status 2 on bad input. "
                 "`afp COMMAND --help` prints the same as this page.", "",
                 "| command | what |", "|---|---|"]
        lines += [f"| [`afp {name}`](#afp-{name}) | {_cell(summaries.get(name, ''))} |" for name in sub.choices]
        for name, p in sub.choices.items():
            lines += ["", f"## `afp {name}` {{ #afp-{name} }}", "", summaries.get(name) or "", ""]
            if p.description:
                description = p.description if "%(prog)" in p.description else p.description.replace("%%", "%")
                lines += [description, ""]
            lines += ["```text", p.format_usage().strip(), "```", ""]
            formatter = p._get_formatter()
            for group in p._action_groups:
                actions = [a for a in group._group_actions if not isinstance(a, argparse._HelpAction)]
                if not actions:
                    continue
                title = {"positional arguments": "Arguments", "options": "Options",
                         "optional arguments": "Options"}.get(group.title, f"Options: {group.title}")
                lines += [f"**{title}**", "", "| argument | default | choices | meaning |", "|---|---|---|---|"]
                for action in actions:
                    text = formatter._expand_help(action) if action.help else ""
                    choices = ", ".join(f"`{c}`" for c in action.choices) if action.choices else ""
                    lines.append(f"| {_cell(_flags(action))} | {_cell(_default(action))} | {_cell(choices)} | "
                                 f"{_cell(text)} |")
                lines.append("")
        return "\n".join(lines).rstrip() + "\n"
    finally:
        if old_columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old_columns


# --- the HTTP API ---------------------------------------------------------------------------------------------------

def openapi_schema() -> dict[str, Any]:
    """The schema the server serves at ``/openapi.json`` (the app is built, not started: no model is loaded)."""
    from service.app import create_app
    from service.settings import Settings

    return create_app(Settings()).openapi()


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema or "oneOf" in schema:
        return " or ".join(_type(s) for s in schema.get("anyOf", schema.get("oneOf")))
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {_type(schema['additionalProperties'])}"
    bounds = [f"{word} {schema[key]}" for key, word in (("minimum", ">="), ("exclusiveMinimum", ">"),
                                                        ("maximum", "<="), ("exclusiveMaximum", "<"))
              if key in schema]
    return kind + (f" ({', '.join(bounds)})" if bounds else "")


def _properties_table(schema: dict[str, Any]) -> list[str]:
    required = set(schema.get("required", []))
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for name, prop in schema.get("properties", {}).items():
        default = "required" if name in required else (f"`{json.dumps(prop['default'])}`" if "default" in prop else "")
        rows.append(f"| `{name}` | {_cell(_type(prop))} | {_cell(default)} | {_cell(prop.get('description', ''))} |")
    return rows


def http_reference(schema: dict[str, Any] | None = None) -> str:
    schema = schema or openapi_schema()
    info = schema.get("info", {})
    lines = ["# HTTP API", "", GENERATED_NOTE.format(source="the server's OpenAPI schema (`service.app`)"), "",
             f"{info.get('description', '')} The same schema is served by a running server at `/openapi.json`, "
             "with an interactive page at `/docs`; [download it here](openapi.json).", "",
             "| method | path | what |", "|---|---|---|"]
    operations = [(path, method, op) for path, methods in schema["paths"].items() for method, op in methods.items()]
    for path, method, op in operations:
        anchor = f"{method}-{path}".lower().replace("/", "-").replace("--", "-").strip("-")
        lines.append(f"| `{method.upper()}` | [`{path}`](#{anchor}) | {_cell(op.get('summary', ''))} |")
    for path, method, op in operations:
        anchor = f"{method}-{path}".lower().replace("/", "-").replace("--", "-").strip("-")
        lines += ["", f"## `{method.upper()} {path}` {{ #{anchor} }}", "", f"**{op.get('summary', '')}**", ""]
        if op.get("description"):
            lines += [op["description"], ""]
        params = op.get("parameters", [])
        if params:
            lines += ["Query parameters (with a `text/plain` body):", "",
                      "| parameter | type | default | meaning |", "|---|---|---|---|"]
            for p in params:
                s = p.get("schema", {})
                default = f"`{json.dumps(s['default'])}`" if "default" in s else ""
                lines.append(f"| `{p['name']}` | {_cell(_type(s))} | {_cell(default)} | "
                             f"{_cell(p.get('description', s.get('description', '')))} |")
            lines.append("")
        body = op.get("requestBody")
        if body:
            lines += ["Request body:", ""]
            for media, content in body.get("content", {}).items():
                s = content.get("schema", {})
                lines.append(f"* `{media}`: {_type(s) if s else 'text'}")
            lines.append("")
        lines += ["| status | meaning | body |", "|---|---|---|"]
        for status, response in op.get("responses", {}).items():
            bodies = [_type(c.get("schema", {})) for c in response.get("content", {}).values() if c.get("schema")]
            lines.append(f"| {status} | {_cell(response.get('description', ''))} | {_cell(', '.join(bodies))} |")
    lines += ["", "## Schemas", ""]
    for name, s in schema.get("components", {}).get("schemas", {}).items():
        lines += [f"### {name} {{ #{name.lower()} }}", ""]
        if s.get("description"):
            lines += [s["description"], ""]
        if s.get("properties"):
            lines += [*_properties_table(s), ""]
        for example in s.get("examples", [])[:3]:
            lines += ["```json", json.dumps(example, indent=2), "```", ""]
    return "\n".join(lines).rstrip() + "\n"


# --- the server's settings ------------------------------------------------------------------------------------------

def _settings_notes() -> dict[str, str]:
    """What the settings module says of each field: its docstring's ``AFP_NAME   text`` lines and the comments
    beside (``# ...``) or above (``#: ...``) each field of ``Settings``."""
    import service.settings as module

    notes: dict[str, str] = {}
    current: list[str] = []
    for line in (module.__doc__ or "").splitlines():
        match = re.match(r"^  (AFP_[A-Z_]+(?:, AFP_[A-Z_]+)*)\s{2,}(.*)$", line)
        if match:
            current = [n.removeprefix("AFP_").lower() for n in match.group(1).split(", ")]
            for name in current:
                notes[name] = match.group(2).strip()
        elif current and line.startswith("    ") and line.strip():
            for name in current:
                notes[name] += " " + line.strip()
        else:
            current = []
    source = inspect.getsource(module.Settings).splitlines()
    above: list[str] = []
    for line in source:
        stripped = line.strip()
        if stripped.startswith("#:"):
            above.append(stripped[2:].strip())
            continue
        match = re.match(r"^\s+([a-z_]+)\s*:", line)
        if match:
            comment = line.split("  # ", 1)[1].strip() if "  # " in line else ""
            text = " ".join([*above, comment]).strip().replace("``", "`")
            if text and match.group(1) not in notes:
                notes[match.group(1)] = text
        above = []
    return notes


def _annotation(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or str(annotation).replace("typing.", "").replace("pathlib.", "")
    return text.replace("NoneType", "None")


def settings_reference() -> str:
    from service.settings import Settings

    notes = _settings_notes()
    lines = ["# Server settings", "", GENERATED_NOTE.format(source="the fields of `service.settings.Settings`"), "",
             "`afp serve` reads its settings from environment variables with the prefix `AFP_` "
             "(pydantic-settings; names are case-insensitive); its flags (`--model`, `--port`, `--workers`, ...) "
             "override them. An invalid value stops the server at start with a message naming the variable. "
             "See [production](../recipes/production.md) for how they are used.", "",
             "| variable | type | default | constraints | meaning |", "|---|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        if field.default_factory is not None:
            default = "the bundled default model" if name == "model_dir" else f"`{field.default_factory()!r}`"
        else:
            default = "unset" if field.default is None else f"`{field.default!r}`"
        constraints = ", ".join(
            f"{word} {getattr(m, key)}" for m in field.metadata
            for key, word in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))
            if getattr(m, key, None) is not None)
        text = (field.description or notes.get(name, "")).replace("``", "`")
        lines.append(f"| `AFP_{name.upper()}` | {_cell('`' + _annotation(field.annotation) + '`')} | {_cell(default)} | "
                     f"{_cell(constraints)} | {_cell(text)} |")
    return "\n".join(lines) + "\n"


# --- bundled models -------------------------------------------------------------------------------------------------

DEFAULT_MODEL = "conversational"


def _model_row(directory: Path) -> list[str]:
    """name, kind, rho, vocabulary, parts of one bundled model, read from its JSON files (no weights loaded)."""
    mixture = directory / "mixture.json"
    if mixture.is_file():
        parts = json.loads(mixture.read_text(encoding="utf-8"))["parts"]
        rows = [_model_row(directory / part["model"]) for part in parts]
        rho = next((r[2] for r in rows if r[2] != "-"), "-")
        vocab = next((r[3] for r in rows if r[3] != "-"), "-")
        shown = ", ".join(f"`{part['model']}/` {part['weight']:.3f} ({row[1]})" for part, row in zip(parts, rows))
        return [directory.name, "mixture", rho, vocab, shown]
    config = directory / "config.json"
    if config.is_file():
        model = json.loads(config.read_text(encoding="utf-8"))["model"]
        kind = (f"AFP-{model['rho']} {model['cell']} {model['layers']}x{model['hidden']}" if model.get("mode") == "afp"
                else f"{model.get('arch', 'rnn')} {model.get('cell', '')}".strip())
        return [directory.name, kind, str(model.get("rho", "-")), f"{model['vocab_size']:,}", ""]
    return [directory.name, "n-gram", "-", "-", ""]


def models_page(models: Path | None = None) -> str:
    models = models or REPO / "models"
    directories = sorted((d for d in models.iterdir() if d.is_dir() and (d / "TRAINING.md").is_file()),
                         key=lambda d: (d.name != DEFAULT_MODEL, d.name))
    lines = ["# Bundled models", "", GENERATED_NOTE.format(source="`models/*/` (config.json, mixture.json, TRAINING.md)"),
             "", f"Without `--model` every command and the server use `models/{DEFAULT_MODEL}/` (or `$AFP_MODEL_DIR`). "
             "A model is a directory: `model.safetensors` and `config.json` (an AFP or other neural model), an n-gram "
             "store, or `mixture.json` naming its parts and their weights. `afp info --model DIR` describes one.", "",
             "| model | kind | rho | vocabulary | parts and weights |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(_cell(c) for c in [f"`models/{r[0]}/`", *r[1:]]) + " |"
              for r in (_model_row(d) for d in directories)]
    for directory in directories:
        texts = [(directory, 2)] + [(part, 3) for part in sorted(directory.iterdir())
                                     if part.is_dir() and (part / "TRAINING.md").is_file()]
        for folder, level in texts:
            text = (folder / "TRAINING.md").read_text(encoding="utf-8")
            anchor = "-".join(folder.relative_to(models).parts)
            demoted = [("#" * (level - 1) + line if line.startswith("#") else line) for line in text.splitlines()]
            if demoted and demoted[0].startswith("#"):
                demoted[0] += f" {{ #{anchor} }}"
            lines += ["", *demoted]
    return "\n".join(lines).rstrip() + "\n"


# --- benchmark results ----------------------------------------------------------------------------------------------

PLOT = re.compile(r"[Pp]lot `([^`]+\.png)`")


def results_page() -> tuple[str, list[str]]:
    """The results page (``bench.report.render``'s text) and the plots it shows, paths relative to bench/results."""
    _importable()
    from bench.common import RESULTS
    from bench.report import render

    text = render(RESULTS)
    body = text.split("\n", 1)[1]  # the report's own title; this page has its own
    lines = ["# Results", "",
             GENERATED_NOTE.format(source="`bench/results/*.json` by `bench.report.render` "
                                          "(the same text as `bench/results/README.md`)"), "",
             "Every number below was measured by the command named in its section; "
             "[benchmarks](benchmarks.md) lists them. Timings are of the machine named in each section.", ""]
    plots: list[str] = []
    for line in body.splitlines():
        lines.append(line)
        for name in PLOT.findall(line):
            if (RESULTS / name).is_file() and not line.startswith("|"):
                plots.append(name)
                lines += ["", f"![{name}](results/{name})", ""]
    return "\n".join(lines).rstrip() + "\n", plots


# --- the mkdocs hook ------------------------------------------------------------------------------------------------

def on_files(files, config):  # noqa: ANN001 (mkdocs' Files and MkDocsConfig)
    from mkdocs.structure.files import File

    _importable()
    from bench.common import RESULTS

    schema = openapi_schema()
    results, plots = results_page()
    pages = {"reference/cli.md": cli_reference(), "reference/http.md": http_reference(schema),
             "reference/settings.md": settings_reference(), "reference/models.md": models_page(), "results.md": results,
             "reference/openapi.json": json.dumps(schema, indent=2) + "\n"}
    for uri, content in pages.items():
        files.append(File.generated(config, uri, content=content))
    for name in plots:
        files.append(File.generated(config, f"results/{name}", abs_src_path=str(RESULTS / name)))
    return files
