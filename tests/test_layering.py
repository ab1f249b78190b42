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


def imported_after(statement: str) -> set[str]:
    """The top-level and ``service.*`` modules a fresh interpreter holds after ``statement``."""
    code = f"import sys, json\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def modules_of(*packages: str) -> list[str]:
    return sorted(".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
                  for package in packages for p in (REPO / package).rglob("*.py"))


def core_modules() -> list[str]:
    return modules_of("lm", "lattices")


def test_the_core_imports_no_serving_library():
    statement = "\n".join(f"import {name}" for name in core_modules())
    loaded = imported_after(statement)
    assert len(core_modules()) > 10
    assert {name.split(".")[0] for name in loaded} & set(SERVING_ONLY) == set()


@pytest.mark.parametrize("module", ["service.engine", "service.app"])
def test_the_http_engine_does_not_import_the_batch_job_modules(module):
    loaded = imported_after(f"import {module}")
    assert module in loaded
    assert {"afp.jobs", "afp.outputs", "afp.tune", "afp.cuts", "service.cli"} & loaded == set()


def test_the_library_imports_neither_the_server_nor_the_cli():
    modules = modules_of("afp")
    assert {"afp.jobs", "afp.tune", "afp.wer", "afp.cuts", "afp.outputs", "afp.batching"} <= set(modules)
    loaded = imported_after("\n".join(f"import {name}" for name in modules))
    assert {name for name in loaded if name.split(".")[0] == "service"} == set()
    assert {name.split(".")[0] for name in loaded} & {"fastapi", "uvicorn", "starlette"} == set()


def test_the_lattice_engine_imports_nothing_of_the_lm_package():
    """DESIGN.md: ``lattices/`` knows an LM only through its protocol (``lattices.scorer``)."""
    modules = modules_of("lattices")
    loaded = imported_after("\n".join(f"import {name}" for name in modules))
    assert set(modules) <= loaded
    assert {name for name in loaded if name.split(".")[0] == "lm"} == set()
