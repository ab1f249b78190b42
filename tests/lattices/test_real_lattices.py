"""Exactness on the real ASR lattices of ../shared/data (skipped cleanly when it is absent)."""

from __future__ import annotations

import pytest
import torch

from lattices.expand import DEFAULT_SKIP
from lattices.formats import read_lattice_file
from lattices.rescore import RescoreOptions, rescore
from lm.checkpoint import LoadedModel
from lm.corpus import encode
from lm.scorer import LMScorer
from lm.vocab import Vocabulary
from tests.factories import collate, require_shared, replacing_options, SHARED_DATA, make_model

LATTICES = SHARED_DATA / "lattices"
FILES = {
    "ami-htk": sorted((LATTICES / "ami-htk").glob("*.lat.gz")),
    "ami-kaldi": [LATTICES / "ami-kaldi" / "1.lat"],
    "theanolm-slf": [LATTICES / "theanolm" / "lattice.slf"],
}


def lattices_of(name):
    require_shared(*FILES[name])
    assert FILES[name], name
    return [lattice for f in FILES[name] for lattice in read_lattice_file(f)]


def model_for(lattices, rho, cell):
    """A random AFP model whose vocabulary holds most lattice words (some left out: OOV)."""
    words = sorted({w for lat in lattices for w in lat.symbols if w not in DEFAULT_SKIP})
    vocab = Vocabulary.from_sentences([words[::3] + words[1::3]])  # a third of the words are OOV
    model = make_model(vocab, cell=cell, mode="afp", rho=rho, hidden=16, init_range=0.3)
    return model, LMScorer(LoadedModel(model.config, vocab, model))


@torch.no_grad()
def sentence_logprobs(model, vocab, sentences):
    corpus = encode(sentences, vocab)
    batch = collate(corpus.ids)
    return model.token_logprobs(batch.inputs, batch.targets, batch.lengths).sum(dim=1).tolist()


@pytest.mark.parametrize("name, rho, cell", [("ami-htk", 1, "elman"), ("ami-htk", 2, "lstm"),
                                             ("ami-kaldi", 2, "gru"), ("ami-kaldi", 3, "elman"),
                                             ("theanolm-slf", 3, "lstm")])
def test_nbest_lm_scores_equal_sentence_scores(name, rho, cell):
    lattices = lattices_of(name)
    model, scorer = model_for(lattices, rho, cell)
    checked = 0
    for lattice in lattices:
        result = rescore(lattice, scorer, replacing_options(nbest=20))[0]
        words = [h.words for h in result.nbest]
        assert len({tuple(w) for w in words}) == len(words)  # distinct word sequences
        assert [h.score for h in result.nbest] == sorted((h.score for h in result.nbest), reverse=True)
        expected = sentence_logprobs(model, scorer.loaded.vocab, words)
        for hyp, lp in zip(result.nbest, expected):
            assert hyp.lm_logprob == pytest.approx(lp, abs=1e-4), (lattice.key, hyp.words)
        checked += len(words)
        # every arc of the (trimmed) input lies on a path, so it is expanded at least once
        assert result.stats["expanded_arcs"] >= result.stats["lattice_arcs"] > 0
        vocab = scorer.loaded.vocab
        assert min(result.stats["oov"], 50) == len(result.stats["oov_words"])  # the first 50 are listed
        assert all(w not in vocab for w in result.stats["oov_words"])
    assert checked >= len(lattices)


def test_best_path_of_small_real_lattice_is_brute_force_best():
    from tests.factories import all_paths

    (lattice,) = lattices_of("theanolm-slf")
    model, scorer = model_for([lattice], 2, "elman")
    result = rescore(lattice, scorer, replacing_options())[0]
    paths = all_paths(lattice)
    assert len(paths) > 1
    sentences = [[w for w in (lattice.symbols[int(lattice.words[a])] for a in arcs) if w not in DEFAULT_SKIP]
                 for arcs, _ in paths]
    lm = sentence_logprobs(model, scorer.loaded.vocab, sentences)
    totals = [result.acoustic_scale * float(lattice.acoustic[arcs].sum() + lattice.final_acoustic[f]) + l
              + result.word_penalty * len(s) for (arcs, f), l, s in zip(paths, lm, sentences)]
    best = max(range(len(paths)), key=totals.__getitem__)
    assert result.best.words == sentences[best]
    assert result.best.score == pytest.approx(totals[best], abs=1e-4)
    assert result.acoustic_scale == pytest.approx(1 / 12.3) and result.word_penalty == pytest.approx(0.7 / 12.3)


def test_rescored_real_lattices_write_back_in_their_format(tmp_path):
    from lattices.formats import read_lattices, write_lattices

    for name, fmt in (("ami-kaldi", "kaldi"), ("theanolm-slf", "htk")):
        lattices = lattices_of(name)[:3]
        _, scorer = model_for(lattices, 2, "elman")
        rescored = [rescore(lat, scorer, replacing_options(return_lattice=True))[0] for lat in lattices]
        again = []
        for result in rescored:
            again += read_lattices(write_lattices([result.lattice], fmt), fmt, symbols=result.lattice.symbols)
        for result, back in zip(rescored, again):
            assert back.key == result.key
            if fmt == "kaldi":
                assert back.num_arcs == result.lattice.num_arcs
                assert torch.allclose(back.graph, result.lattice.graph, atol=1e-9)
            else:  # HTK has no final weights: the </s> scores move onto arcs into one extra !NULL node
                assert back.num_arcs == result.lattice.num_arcs + len(result.lattice.finals)
            # the rescored lattice's own best path is the engine's best hypothesis
            best = rescore(back, _ZeroScorer(scorer), replacing_options(
                acoustic_scale=result.acoustic_scale, old_lm_weight=1.0, word_penalty=result.word_penalty))[0]
            assert best.best.words == result.best.words
            assert best.best.score == pytest.approx(result.best.score, abs=1e-6)


class _ZeroScorer:
    """A scorer that gives every word log-probability 0 (to search a lattice by its own scores)."""

    def __init__(self, inner):
        self.context_size, self.bos_id, self.eos_id, self.unk_id = 1, inner.bos_id, inner.eos_id, inner.unk_id
        self.word_ids, self.known = inner.word_ids, inner.known

    def score(self, contexts, lengths, targets, target_context):
        return torch.zeros(targets.shape[0])
