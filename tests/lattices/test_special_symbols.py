"""Unknown words, sentence markers and disambiguation symbols: one definition, every scorer.

Each lattice is a single path; its expected LM score is the sentence score of its words
(``lm.scorer.score_sentences``, what ``afp score`` prints), computed with the same model.
"""

from __future__ import annotations

import time

import pytest
import torch

from lattices.formats import read_lattices
from lattices.rescore import RescoreOptions, rescore
from lm.checkpoint import load_checkpoint
from lm.scorer import LMScorer, score_sentences
from afp.batching import BatchingScorer
from tests.factories import replacing_options, saved_model, tiny_vocab


@pytest.fixture(scope="module")
def scorer(tmp_path_factory) -> LMScorer:
    path = saved_model(tmp_path_factory.mktemp("model"), cell="gru", mode="afp", rho=2)
    return LMScorer(load_checkpoint(path))


def kaldi_chain(*words: str) -> str:
    """A one-path Kaldi text lattice over ``words`` (graph cost 1, acoustic cost 2 per arc)."""
    arcs = "".join(f"{i} {i + 1} {w} 1,2,\n" for i, w in enumerate(words))
    return f"utt\n{arcs}{len(words)}\n\n"


def htk_chain(*words: str) -> str:
    """A one-path HTK SLF lattice over ``words`` (words on nodes 1..n, node 0 !NULL)."""
    nodes = "".join(f"I={i + 1} W={w}\n" for i, w in enumerate(words))
    links = "".join(f"J={i} S={i} E={i + 1} a=-2.0 l=-1.0\n" for i in range(len(words)))
    return f"VERSION=1.0\nUTTERANCE=utt\nN={len(words) + 1} L={len(words)}\nI=0 W=!NULL\n{nodes}{links}"


def best(text: str, fmt: str, scorer, **options) -> dict:
    lattice = read_lattices(text, fmt, source="test")[0]
    return rescore(lattice, scorer, replacing_options(**options))[0].best.to_json()


def sentence_score(scorer: LMScorer, words: list[str]) -> float:
    return float(score_sentences(scorer, [words])[0].sum())


@pytest.mark.parametrize("wrap", ["plain", "batcher", "batcher-deadline", "serial-batcher"])
def test_a_literal_unk_is_an_unknown_word_through_every_scorer_wrapper(scorer, wrap):
    """The bug: the batching scorer did not forward ``unk_id``, so ``<unk>`` counted as known
    there and the unk penalty was lost (``afp rescore --workers 2`` and HTTP differed from
    ``afp rescore``)."""
    wrapped = {"plain": lambda: scorer, "batcher": lambda: BatchingScorer(scorer),
               "batcher-deadline": lambda: BatchingScorer(scorer).until(time.monotonic() + 600),
               "serial-batcher": lambda: BatchingScorer(scorer, enabled=False)}[wrap]()
    text = kaldi_chain("the", "<unk>", "cat", "zzz")
    plain = best(text, "kaldi", scorer, unk_penalty=-5.0)
    got = best(text, "kaldi", wrapped, unk_penalty=-5.0)
    assert plain["unk"] == 2  # the literal <unk> and the out-of-vocabulary zzz
    assert got["unk"] == plain["unk"]
    assert got["score"] == pytest.approx(plain["score"], abs=1e-6)
    no_penalty = best(text, "kaldi", wrapped)
    assert got["score"] == pytest.approx(no_penalty["score"] - 5.0 * 2, abs=1e-6)


def test_unknown_is_defined_once_for_vocabulary_scorer_and_ppl(scorer):
    vocab = tiny_vocab()
    words = ["the", "<unk>", "zzz", "cat"]
    assert [vocab.is_known(w) for w in words] == [True, False, False, True]
    assert scorer.known(words).tolist() == [True, False, False, True]
    assert vocab.count_oov(words) == 2


def test_htk_sentence_markers_are_boundaries_not_words(scorer):
    got = best(htk_chain("!SENT_START", "the", "cat", "!SENT_END"), "htk", scorer)
    assert got["words"] == ["the", "cat"] and got["unk"] == 0
    assert got["lm_logprob"] == pytest.approx(sentence_score(scorer, ["the", "cat"]), abs=1e-5)


@pytest.mark.parametrize("symbol", ["#0", "#1", "#17"])
def test_disambiguation_symbols_are_skipped_like_epsilons(scorer, symbol):
    got = best(kaldi_chain("the", symbol, "cat"), "kaldi", scorer)
    assert got["words"] == ["the", "cat"] and got["unk"] == 0
    assert got["lm_logprob"] == pytest.approx(sentence_score(scorer, ["the", "cat"]), abs=1e-5)
    # the arcs' first-pass scores still count: 3 arcs of graph cost 1 and acoustic cost 2
    assert got["old_lm"] == pytest.approx(-3.0) and got["acoustic"] == pytest.approx(-6.0)


def test_a_hash_word_that_is_not_a_disambiguation_symbol_is_still_a_word(scorer):
    got = best(kaldi_chain("the", "#hashtag"), "kaldi", scorer)
    assert got["words"] == ["the", "#hashtag"] and got["unk"] == 1
    assert torch.isfinite(torch.tensor(got["lm_logprob"]))
