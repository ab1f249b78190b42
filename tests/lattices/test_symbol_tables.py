"""Symbol tables: per-lattice work reads only the symbols a lattice uses; a table shared by many
lattices is indexed once; a word the model never predicts is a clear error, not an IndexError."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from lattices.expand import DEFAULT_SKIP, PAD, lattice_word_map, word_map
from lattices.formats import read_lattices
from lattices.formats import _text
from lattices.formats.k2 import read_k2, write_k2
from lattices.lattice import LatticeFormatError
from lattices.rescore import RescoreOptions, rescore
from lm.checkpoint import LoadedModel
from lm.scorer import LMScorer
from lm.vocab import Vocabulary
from tests.factories import replacing_options, WORDS, make_model, tiny_vocab

SMALL = ("<eps>", "the", "cat", "!SIL", "sat")

# "the cat sat" vs "the !SIL sat" (costs: graph,acoustic,)
ARCHIVE = """utt1
0 1 the 1.0,10,
1 2 cat 0.5,8,
1 2 !SIL 0.5,9,
2 3 sat 0.5,9,
3 0,0,

"""


class CountingTable(Sequence[str]):
    """A symbol table of ``size`` entries that counts every entry read; past ``words`` the
    entries are made up (``w123``), so a million of them cost no memory."""

    def __init__(self, words: Sequence[str], size: int) -> None:
        self.words, self.size, self.reads = tuple(words), size, 0

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.size))]
        index = index + self.size if index < 0 else index
        if not 0 <= index < self.size:
            raise IndexError(index)
        self.reads += 1
        return self.words[index] if index < len(self.words) else f"w{index}"


def lm_scorer(vocab: Vocabulary | None = None) -> LMScorer:
    vocab = vocab or tiny_vocab()
    model = make_model(vocab, cell="gru", mode="afp", rho=2)
    return LMScorer(LoadedModel(model.config, vocab, model))


@pytest.mark.parametrize("options", [replacing_options(nbest=2), replacing_options(prune_beam=5.0, posteriors=True)])
def test_rescoring_reads_only_the_symbols_a_lattice_uses(options):
    (lattice,) = read_lattices(ARCHIVE, "kaldi", SMALL)
    table = CountingTable(SMALL, 1_000_000)
    huge = lattice.replace(symbols=table)  # same word ids, a million-entry table
    scorer = lm_scorer()
    (expected,) = rescore(lattice, scorer, options)
    (result,) = rescore(huge, scorer, options)
    assert result.best.words == expected.best.words and expected.best.words in (["the", "cat", "sat"], ["the", "sat"])
    assert result.best.score == expected.best.score
    assert [h.words for h in result.nbest] == [h.words for h in expected.nbest]
    assert table.reads < 100, f"rescoring a 4-symbol lattice read {table.reads} entries of the symbol table"


def test_lattice_word_map_is_word_map_on_the_used_symbols():
    (lattice,) = read_lattices(ARCHIVE, "kaldi", (*SMALL, "dog", "#0"))
    mapping = lattice_word_map(lattice)
    full = word_map(lattice.symbols, torch.arange(len(lattice.symbols)), DEFAULT_SKIP)
    used = torch.unique(lattice.words)
    assert torch.equal(mapping[used], full[used]) and mapping[used].tolist() == [1, 2, PAD, 4]
    assert mapping.tolist() == [PAD, 1, 2, PAD, 4, PAD, PAD]  # "dog" is an LM word, but unused: PAD


def test_readers_share_one_table_and_index_it_once(monkeypatch):
    monkeypatch.setattr(_text, "_index_cache", {})
    table = (*SMALL, *(f"w{i}" for i in range(1000)))
    first = read_lattices(ARCHIVE, "kaldi", table)
    second = read_lattices(ARCHIVE.replace("utt1", "utt2"), "kaldi", table)
    assert first[0].symbols is table and second[0].symbols is table  # no copy per archive
    assert list(_text._index_cache.values()) == [(table, _text.symbol_index(table))]  # indexed once
    (more,) = read_lattices(ARCHIVE.replace("cat", "dog"), "kaldi", table)  # an unseen word is appended
    assert more.symbols == (*table, "dog") and more.word(1) == "dog"
    (k2,) = read_k2(write_k2([first[0]]), symbols=table)
    assert k2.symbols is table


def test_a_disambiguation_symbol_is_skipped_whatever_the_skip_list():
    vocab = Vocabulary(("<eps>", "<s>", "</s>", "<unk>", "#0", "#1", *WORDS))
    (lattice,) = read_lattices(ARCHIVE.replace("!SIL", "#1"), "kaldi")
    for skip in (DEFAULT_SKIP, frozenset()):
        (result,) = rescore(lattice, lm_scorer(vocab), replacing_options(skip_words=skip))
        assert "#1" not in result.best.words and result.best.unk == 0


@pytest.mark.parametrize("word, skip, kind", [
    ("<s>", DEFAULT_SKIP - {"<s>"}, "the sentence-start symbol"),
])
def test_a_word_the_model_never_predicts_is_named(word, skip, kind):
    """Every path through a blocked word is -inf: that used to end in an IndexError."""
    vocab = Vocabulary(("<eps>", "<s>", "</s>", "<unk>", "#0", "#1", *WORDS))
    (lattice,) = read_lattices(ARCHIVE.replace("!SIL", word), "kaldi")
    with pytest.raises(LatticeFormatError) as info:
        rescore(lattice, lm_scorer(vocab), replacing_options(skip_words=skip))
    err = info.value
    assert (err.key, err.field) == ("utt1", "words")
    assert f"word {word!r} on arc 2 (state 1 -> 2) is {kind}" in str(err) and "never predicts" in str(err)
    (fine,) = rescore(lattice, lm_scorer(vocab), replacing_options(skip_words=skip | {word}))
    assert fine.best.words in (["the", "cat", "sat"], ["the", "sat"])  # skipped, it is no error

