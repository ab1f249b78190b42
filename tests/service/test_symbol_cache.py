"""A ``words.txt`` is parsed once and shared: by the server across requests, by a batch job across
its input files (per-lattice work must not grow with the table)."""

from __future__ import annotations

import pytest

from afp.jobs import iter_lattices
from afp.rescore_job import RescoreSetup
from afp.symbols import SymbolTableError, words_table


def _read_symbols(path: str) -> tuple[str, ...] | None:
    """``--words`` as ``afp rescore``, ``afp tune`` and ``afp rescore-cuts`` read it."""
    return RescoreSetup(words=path).symbols()


WORDS_TXT = "".join(f"{w} {i}\n" for i, w in enumerate(["<eps>", "the", "cat", "sat", *(f"w{i}" for i in range(500))]))
ARCHIVE = "{key}\n0 1 1 1,10,\n1 2 2 1,10,\n2 3 3 1,10,\n3 0,0,\n\n"  # word ids: "the cat sat"


def test_the_server_parses_each_distinct_table_once():
    first = words_table(WORDS_TXT, source="words")
    again = words_table(WORDS_TXT.encode().decode(), source="words")  # an equal text in a new string object
    assert again is first and isinstance(first, tuple) and first[:4] == ("<eps>", "the", "cat", "sat")
    with pytest.raises(SymbolTableError, match="words: id 0 of the symbol table must be <eps>"):
        words_table("the 0\n", source="words")


def test_the_server_and_the_cli_read_a_table_with_one_loader(tmp_path, client):
    path = tmp_path / "words.txt"
    path.write_text("the 0\n")
    with pytest.raises(SymbolTableError, match=f"{path}: id 0 of the symbol table must be <eps>, got 'the'"):
        _read_symbols(str(path))
    r = client.post("/v1/rescore", json={"lattice": ARCHIVE.format(key="a"), "words": "the 0\n"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "words"
    assert r.json()["error"]["message"] == "words: id 0 of the symbol table must be <eps>, got 'the'"


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
