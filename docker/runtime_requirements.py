"""The serving requirements of an image: pyproject.toml's dependencies less the named ones.

    python runtime_requirements.py pyproject.toml --without torch lhotse > requirements.txt

Used by the Dockerfiles' build stages (standard library only: it runs on the bare base image).
torch is installed on its own (a CPU build from its index, or the CUDA base image's), and lhotse
is left out of the runtime: only the manifest readers of batch jobs import it (lazily), never
the server. The project itself is then installed with ``--no-deps``.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path


def name_of(requirement: str) -> str:
    """The normalised project name of a PEP 508 requirement (``Pydantic_Settings>=2`` -> ``pydantic-settings``)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def runtime_requirements(pyproject: Path, without: list[str]) -> list[str]:
    """pyproject's ``[project] dependencies`` in order, less those named in ``without`` (each must be one)."""
    dependencies = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    names = {name_of(d) for d in dependencies}
    unknown = sorted({name_of(w) for w in without} - names)
    if unknown:
        raise SystemExit(f"{pyproject}: no dependency named {', '.join(unknown)}")
    left_out = {name_of(w) for w in without}
    return [d for d in dependencies if name_of(d) not in left_out]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pyproject", type=Path)
    parser.add_argument("--without", nargs="*", default=[], metavar="NAME", help="dependencies to leave out")
    args = parser.parse_args(argv)
    sys.stdout.write("".join(f"{r}\n" for r in runtime_requirements(args.pyproject, args.without)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
