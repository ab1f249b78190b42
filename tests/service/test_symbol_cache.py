"""A ``words.txt`` is parsed once and shared: by the server across requests, by a batch job across
its input files (per-lattice work must not grow with the table)."""

from __future__ import annotations

import pytest

from service import engine
from service.batch import iter_lattices
from service.cli import _read_symbols
from service.errors import APIError

WORDS_TXT = "".join(f"{w} {i}\n" for i, w in enumerate(["<eps>", "the", "cat", "sat", *(f"w{i}" for i in range(500))]))
ARCHIVE = "{key}\n0 1 1 1,10,\n1 2 2 1,10,\n2 3 3 1,10,\n3 0,0,\n\n"  # word ids: "the cat sat"


def test_the_server_parses_each_distinct_table_once():
    first = engine._symbols(WORDS_TXT)
    again = engine._symbols(WORDS_TXT.encode().decode())  # an equal text in a new string object
    assert again is first and isinstance(first, tuple) and first[:4] == ("<eps>", "the", "cat", "sat")
    with pytest.raises(APIError, match="id 0 of the symbol table must be <eps>"):
        engine._symbols("the 0\n")


def test_a_batch_job_shares_one_table_across_its_inputs(tmp_path):
    path = tmp_path / "words.txt"
    path.write_text(WORDS_TXT)
    table = _read_symbols(str(path))
    assert isinstance(table, tuple)
    inputs = []
    for name in ("a", "b"):
        (tmp_path / f"{name}.int").write_text(ARCHIVE.format(key=name))
        inputs.append(str(tmp_path / f"{name}.int"))
    lattices = list(iter_lattices(inputs, "kaldi", table))
    assert [lattice.key for lattice in lattices] == ["a", "b"]
    assert all(lattice.symbols is table for lattice in lattices)
