"""lm.ngram.sphinx: PocketSphinx's binary trie LM read into arrays and written as ARPA (the trie
itself is written by PocketSphinx, so that test is skipped without the pocketsphinx package)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lm.ngram.arpa import LOG10
from lm.ngram.sphinx import read_sphinx_trie, write_trie_arpa
from lm.ngram.store import read_arpa_store

TINY_ARPA = """\\data\\
ngram 1=6
ngram 2=5
ngram 3=3

\\1-grams:
-99.0\t<s>\t-0.30
-0.70\t</s>
-0.80\ta\t-0.25
-0.90\tb\t-0.20
-1.00\tc\t-0.15
-1.20\td

\\2-grams:
-0.40\t<s> a\t-0.10
-0.50\ta b\t-0.05
-0.35\ta c
-0.30\tb c\t-0.12
-0.60\tc </s>

\\3-grams:
-0.20\t<s> a b
-0.25\ta b c
-0.15\tb c d

\\end\\
"""


def tiny_trie(tmp_path: Path) -> Path:
    """:data:`TINY_ARPA` as PocketSphinx's binary trie, written by PocketSphinx (in a child process:
    its LM code crashes on some input); skipped without the pocketsphinx package."""
    pytest.importorskip("pocketsphinx")
    arpa, lm_bin = tmp_path / "tiny.arpa", tmp_path / "tiny.lm.bin"
    arpa.write_text(TINY_ARPA, encoding="utf-8")
    subprocess.run([sys.executable, "-c", "import sys, pocketsphinx as p; m = p.NGramModel.readfile(sys.argv[1]); "
                    "m.write(sys.argv[2], p.NGramModel.str_to_type('bin'))", str(arpa), str(lm_bin)], check=True,
                   capture_output=True)
    return lm_bin


def test_trie_lm_to_arpa(tmp_path: Path) -> None:
    out = tmp_path / "back.arpa.gz"
    trie = read_sphinx_trie(tiny_trie(tmp_path))
    assert trie.words == ("<s>", "</s>", "a", "b", "c", "d")
    listed = {tuple(trie.words[i] for i in row): (p, b) for grams, probs, backoffs in
              zip(trie.grams, trie.log10_probs, trie.log10_backoffs) for row, p, b in zip(grams, probs, backoffs)}
    assert listed[("a", "b")] == (pytest.approx(-0.5, abs=1e-4), pytest.approx(-0.05, abs=1e-4))
    assert listed[("b", "c", "d")][0] == pytest.approx(-0.15, abs=1e-4)
    # the trie holds "c d" too, so that "b c d" is reachable from "d" (its probability quantized)
    assert ("c", "d") in listed and len(trie.grams[1]) == 6
    write_trie_arpa(trie, out)
    store = read_arpa_store(out, dtype=np.float64)
    assert store.counts == (6, 6, 3)
    for n, (grams, probs) in enumerate(zip(trie.grams, trie.log10_probs), 1):  # every n-gram, as read
        ids = np.array([[store.id(trie.words[i]) for i in row] for row in grams])
        assert np.allclose(store.score(ids[:, :-1], np.full(len(ids), n - 1), ids[:, -1]) / LOG10, probs)


def test_bad_trie_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "x.lm.bin"
    path.write_bytes(b"Darpa Trigram LM\0")
    with pytest.raises(ValueError, match="not a PocketSphinx trie"):
        read_sphinx_trie(path)
