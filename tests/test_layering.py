"""The house's layering (DESIGN.md): the core imports only torch, numpy and safetensors; the
library (``afp``: batch jobs, tuning, WER, the Python API) imports no HTTP framework and nothing of
``service``; the HTTP engine does not depend on the batch-job modules. Checked in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SERVING_ONLY = ("fastapi", "uvicorn", "pydantic", "lhotse", "matplotlib", "starlette")


#: run in a fresh interpreter: torch and numpy (which every layer imports) once, then each statement
#: in a child forked from it, which prints the modules it then holds
_FORKING = """
import json, os, sys
import numpy, torch
for statement in json.loads(sys.argv[1]):
    pid = os.fork()
    if pid == 0:
        exec(statement, {})
        print(json.dumps(sorted(sys.modules)), flush=True)
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0, statement
"""


def imported_after(*statements: str) -> list[set[str]]:
    """The modules a fresh interpreter holds after each of ``statements`` (each on its own: see
    :data:`_FORKING`; torch and numpy are imported before any)."""
    done = subprocess.run([sys.executable, "-c", _FORKING, json.dumps(statements)], cwd=REPO, capture_output=True,
                          text=True, check=True)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == len(statements), done.stderr
    return [set(json.loads(line)) for line in lines]


def modules_of(*packages: str) -> list[str]:
    return sorted(".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
                  for package in packages for p in (REPO / package).rglob("*.py"))


def core_modules() -> list[str]:
    return modules_of("lm", "lattices")


def importing(modules: list[str]) -> str:
    return "\n".join(f"import {name}" for name in modules)


#: what each check imports, by name
STATEMENTS = {"core": importing(core_modules()), "service.engine": "import service.engine",
              "service.app": "import service.app", "afp": importing(modules_of("afp")),
              "lattices": importing(modules_of("lattices")), "json": "import json", "fastapi": "import fastapi"}


@pytest.fixture(scope="module")
def loaded() -> dict[str, set[str]]:
    """The modules held after each of :data:`STATEMENTS`, each in a fresh interpreter's fork."""
    return dict(zip(STATEMENTS, imported_after(*STATEMENTS.values())))


def test_the_core_imports_no_serving_library(loaded):
    assert len(core_modules()) > 10
    assert set(core_modules()) <= loaded["core"]
    assert {name.split(".")[0] for name in loaded["core"]} & set(SERVING_ONLY) == set()


@pytest.mark.parametrize("module", ["service.engine", "service.app"])
def test_the_http_engine_does_not_import_the_batch_job_modules(loaded, module):
    assert module in loaded[module]
    assert {"afp.jobs", "afp.outputs", "afp.tune", "afp.cuts", "service.cli", "numba"} & loaded[module] == set()


def test_the_library_imports_neither_the_server_nor_the_cli(loaded):
    modules = modules_of("afp")
    assert {"afp.jobs", "afp.tune", "afp.wer", "afp.cuts", "afp.outputs", "afp.batching"} <= set(modules)
    assert set(modules) <= loaded["afp"]
    assert {name for name in loaded["afp"] if name.split(".")[0] == "service"} == set()
    assert {name.split(".")[0] for name in loaded["afp"]} & {"fastapi", "uvicorn", "starlette"} == set()


def test_the_lattice_engine_imports_nothing_of_the_lm_package(loaded):
    """DESIGN.md: ``lattices/`` knows an LM only through its protocol (``lattices.scorer``)."""
    assert set(modules_of("lattices")) <= loaded["lattices"]
    assert {name for name in loaded["lattices"] if name.split(".")[0] == "lm"} == set()


def test_a_check_sees_what_its_statement_imports(loaded):
    """The forked children report their own imports, not their parent's or their siblings'."""
    json_only, fastapi_too = loaded["json"], loaded["fastapi"]
    assert "torch" in json_only and "fastapi" not in json_only and "fastapi" in fastapi_too


def imports_of(module: str, top_level: bool = False) -> set[str]:
    """Every module ``module``'s source imports, at any depth of its code (lazy imports in
    functions too; ``top_level``: the module body's only), read with :mod:`ast`; relative imports
    resolved."""
    import ast

    path = REPO / (module.replace(".", "/") + ".py")
    if not path.is_file():
        path = REPO / module.replace(".", "/") / "__init__.py"
    out: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [n for stmt in tree.body for n in ast.walk(stmt) if not isinstance(stmt, (ast.FunctionDef, ast.ClassDef))] \
        if top_level else ast.walk(tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")[: -node.level] if path.name != "__init__.py" else module.split(".")[
                    : len(module.split(".")) - node.level + 1]
                base = ".".join([*parts, base]) if base else ".".join(parts)
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return out


def test_the_core_imports_only_torch_numpy_safetensors_and_never_the_layers_above():
    """DESIGN.md, checked on the source (lazy imports included): lm/ and lattices/ import the
    standard library, torch, numpy, safetensors (and kaldialign) and each other, nothing else, at
    import time; lhotse only inside the function that reads a lhotse manifest, numba only inside
    lattices.compiled, which compiles a kernel at its first call (issue 48: the compiled kernels
    that pay, measured, are in the core; importing it does not import numba,
    test_importing_the_core_compiles_nothing)."""
    allowed = {"torch", "numpy", "safetensors", "lm", "lattices", *sys.stdlib_module_names,
               "kaldialign", "tqdm"}  # small libraries allowed: MBR edit distances (lattices.mbr), training progress
    for module in core_modules():
        roots = {name.split(".")[0] for name in imports_of(module, top_level=True)} - {""}
        assert roots <= allowed, (module, roots - allowed)
        anywhere = {name.split(".")[0] for name in imports_of(module)} - {""}
        assert anywhere <= allowed | {"lhotse"} | ({"numba"} if module == "lattices.compiled" else set()), \
            (module, anywhere - allowed)
        assert not anywhere & {"afp", "service", "bench", "tests"}, module


def test_importing_the_core_compiles_nothing(loaded):
    """numba (about 0.3 s to import) comes only with the first call of a compiled kernel."""
    assert "lattices.compiled" in loaded["core"] and "numba" not in loaded["core"]


@pytest.mark.parametrize("package, expected", [
    ("lm.ngram", {"lm.ngram.arpa", "lm.ngram.keys", "lm.ngram.store", "lm.ngram.kneser_ney", "lm.ngram.prune"}),
    ("lattices.formats", {"lattices.formats.htk", "lattices.formats.pocketsphinx", "lattices.formats.kaldi",
                          "lattices.formats._text"}),
])
def test_a_package_has_no_import_cycle(package, expected):
    """Modules import their siblings, never in a circle (htk -> pocketsphinx -> htk was one:
    the dispatcher hands PocketSphinx files over, not the HTK reader)."""
    root = package.split(".")[0]
    modules = [m for m in modules_of(root) if m.startswith(package)]
    assert expected <= set(modules)
    graph = {m: {i for i in imports_of(m) if i in modules and i != m} for m in modules if m != package}
    for m in graph:  # the package __init__ re-exports; modules import siblings, never the package
        graph[m].discard(package)
    done: set[str] = set()

    def visit(m: str, path: tuple[str, ...]) -> None:
        assert m not in path, f"import cycle: {' -> '.join((*path, m))}"
        if m in done:
            return
        for dep in graph.get(m, ()):
            visit(dep, (*path, m))
        done.add(m)

    for m in graph:
        visit(m, ())


def test_no_module_imports_another_modules_private_names():
    """A name with a leading underscore is its module's own: what two modules share is public (the
    PocketSphinx reader once took ``_Reader`` and ``_key_from_source`` from the HTK reader)."""
    import ast

    ours = ("lm", "lattices", "afp", "service")
    found = []
    for package in ("lattices", "afp", "service"):
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ours:
                    found += [f"{path.relative_to(REPO)}:{node.lineno} {node.module}.{alias.name}"
                              for alias in node.names if alias.name.startswith("_")]
    assert found == []
    from lattices.formats.htk import SlfReader, key_from_source

    assert key_from_source("/x/utt7.lat.gz") == "utt7" and SlfReader("f.slf").error("bad", 3).line == 3


def test_compile_kernels_compiles_every_kernel_of_the_core():
    """Every compiled kernel in lm/ and lattices/ has its dispatcher after compile_kernels (which
    the server runs before it takes requests), in a fresh interpreter: a new kernel that rescoring
    calls must be warmed there too, or a request would wait on the compiler."""
    code = """
import importlib, json, sys
from lattices.compiled import compile_kernels
compile_kernels()
found = {}
for name in json.loads(sys.argv[1]):
    module = importlib.import_module(name)
    for attr, value in vars(module).items():
        if hasattr(value, "kernel") and hasattr(value, "dispatcher") and value.__module__ == name:
            found[f"{name}.{attr}"] = value.dispatcher is not None
print(json.dumps(found))
"""
    done = subprocess.run([sys.executable, "-c", code, json.dumps(core_modules())], cwd=REPO, capture_output=True,
                          text=True, check=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(found) >= 7 and all(found.values()), found
