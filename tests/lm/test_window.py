"""Acausal window models (``future = K``): each word scored from exactly ``R`` words before and ``K``
after it, itself masked; windows computed in parallel, by a direct pass or by AFP iterations."""

from __future__ import annotations

import random

import pytest
import torch

from lm.config import ModelConfig
from lm.corpus import encode
from lm.evaluate import score_corpus
from lm.window import PAD, build_windows, score_each_window_once, sentence_tokens, sorted_unique_rows
from tests.factories import CELL_CONFIGS, random_sentences, tiny_vocab, make_model


def window_model(rho: int = 2, future: int = 2, seed: int = 0, **fields):
    return make_model(tiny_vocab(), seed=seed, mode="afp", rho=rho, future=future, **fields)


def by_hand(model, ids: list[int], rho: int, future: int) -> list[float]:
    """Each term of a sentence by running the cell over its explicit window (``context_features``
    of the right-aligned window ``[left.., MASK, right..]``) and the full softmax."""
    vocab_bos, vocab_eos = model.bos_id_for_test, model.eos_id_for_test
    tokens = [vocab_bos, *ids, vocab_eos]
    out = []
    for i in range(1, len(tokens)):
        window = [*tokens[max(0, i - rho): i], model.mask_id, *tokens[i + 1: i + 1 + future]]
        contexts = torch.tensor([window])
        features = model.context_features(contexts, torch.tensor([len(window)]))
        out.append(float(model.log_probs(features)[0, tokens[i]].detach()))
    return out


@pytest.fixture()
def vocab():
    return tiny_vocab()


@pytest.mark.parametrize("cell", list(CELL_CONFIGS))
def test_direct_pass_and_afp_iterations_give_the_same_features(cell):
    model = window_model(rho=3, future=2, **CELL_CONFIGS[cell])
    vocab = tiny_vocab()
    sentences = [vocab.encode(s) for s in random_sentences(6, seed=1, max_len=7)]
    tokens, lengths = sentence_tokens(sentences, vocab.bos_id, vocab.eos_id)
    windows, valid, _, _ = build_windows(tokens, lengths, 3, 2, model.mask_id)
    assert not bool(valid.all())  # some windows reach past the sentence edges
    with torch.no_grad():
        direct = model.window_features(windows, valid, "direct")
        afp = model.window_features(windows, valid, "afp")
    assert torch.allclose(direct, afp, atol=1e-5)


@pytest.mark.parametrize("rho,future", [(1, 1), (2, 3), (4, 1)])
def test_each_term_is_the_explicit_window(vocab, rho, future):
    model = window_model(rho=rho, future=future, seed=rho + future)
    model.bos_id_for_test, model.eos_id_for_test = vocab.bos_id, vocab.eos_id
    sentences = random_sentences(5, seed=rho, max_len=8)
    corpus = encode(sentences, vocab)
    scored = score_corpus(model, corpus)
    for words, terms in zip(sentences, scored.token_logprobs):
        expected = by_hand(model, vocab.encode(words), rho, future)
        assert terms.tolist() == pytest.approx(expected, abs=1e-4)
        assert len(expected) == len(words) + 1  # the words and </s>


def test_a_term_depends_on_exactly_its_window(vocab):
    """Changing a word changes the terms of the words within R after or K before it, and no other;
    the masked word itself only through the probability picked."""
    rho, future = 2, 1
    model = window_model(rho=rho, future=future, seed=3)
    rng = random.Random(0)
    words = random_sentences(1, seed=5, min_len=8, max_len=8)[0]
    base = score_corpus(model, encode([words], vocab)).token_logprobs[0]
    for position in range(len(words)):
        changed = list(words)
        changed[position] = rng.choice([w for w in vocab.words[4:] if w != words[position]])
        terms = score_corpus(model, encode([changed], vocab)).token_logprobs[0]
        differ = {i for i in range(len(terms)) if abs(float(terms[i] - base[i])) > 1e-6}
        # term i predicts token i+1 of [<s>, w..], reading tokens i+1-R .. i+1+K: word `position` is token
        # position+1
        reach = {i for i in range(len(terms)) if -rho <= (position + 1) - (i + 1) <= future}
        assert differ <= reach and differ - {position} == reach - {position}


def test_score_windows_equals_the_training_computation(vocab):
    model = window_model(rho=2, future=2, softmax="adaptive", cutoffs=(4,), seed=2)
    sentences = [vocab.encode(s) for s in random_sentences(7, seed=4)]
    tokens, lengths = sentence_tokens(sentences, vocab.bos_id, vocab.eos_id)
    windows, valid, targets, where = build_windows(tokens, lengths, 2, 2, model.mask_id)
    for precision in ("fp32", "bf16"):
        scored = model.score_windows(windows, valid, targets, max_elements=64, precision=precision)
        with torch.no_grad():
            trained = model.token_logprobs(tokens[:, :-1], tokens[:, 1:], lengths - 1)
        assert scored.tolist() == pytest.approx(trained[where[:, 0], where[:, 1] - 1].tolist(),
                                                abs=1e-3 if precision == "bf16" else 1e-5)


def test_the_configuration_names_what_a_window_model_needs():
    with pytest.raises(ValueError, match="future: a window model is an afp-mode rnn"):
        ModelConfig(vocab_size=10, mode="exact", future=2)
    with pytest.raises(ValueError, match="future: must be an integer >= 0"):
        ModelConfig(vocab_size=10, mode="afp", rho=2, future=-1)
    config = ModelConfig(vocab_size=10, mode="afp", rho=3, future=2, cell="gru")
    assert config.describe() == "window 3+2 (AFP-3) gru 1x100" and config.input_vocab_size == 11
    with pytest.raises(ValueError, match="only a window model"):
        make_model(tiny_vocab(), mode="afp", rho=2).mask_id


def test_the_command_line_trains_scores_and_describes_a_window_model(tmp_path, capsys):
    """``afp train --future 2`` trains a window model; ``afp ppl`` reports its pseudo-perplexity
    (the validation number of training: one computation), ``afp score`` its terms (each the
    explicit window's), ``afp info`` its future; rescoring with it as the LM is refused."""
    import json

    from lm.checkpoint import load_checkpoint
    from service.cli import main
    from tests.factories import patterned_sentences, write_text

    train = write_text(tmp_path / "train.txt", patterned_sentences(200, seed=1))
    valid = write_text(tmp_path / "valid.txt", patterned_sentences(30, seed=2))
    model = tmp_path / "window"
    assert main(["train", "--train", str(train), "--valid", str(valid), "--out", str(model), "--hidden", "16",
                 "--rho", "2", "--future", "2", "--epochs", "2", "--batch-size", "16", "--softmax", "full"]) == 0
    closing = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert main(["ppl", "--model", str(model), "--text", str(valid), "--json"]) == 0
    ppl = json.loads(capsys.readouterr().out)
    assert ppl["pseudo"] is True and "pseudo-perplexity" in ppl["note"]
    assert ppl["ppl"] == pytest.approx(closing["best_valid_ppl"], rel=1e-4)
    assert main(["score", "--model", str(model), "--text", str(valid), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    loaded = load_checkpoint(model)
    loaded.model.bos_id_for_test, loaded.model.eos_id_for_test = loaded.vocab.bos_id, loaded.vocab.eos_id
    for row in rows[:5]:
        expected = by_hand(loaded.model, loaded.vocab.encode(row["words"]), 2, 2)
        assert row["token_logprobs"] == pytest.approx(expected, abs=1e-4)
    assert main(["info", "--model", str(model), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["future"] == 2 and info["scores"].startswith("acausal")
    lattice = tmp_path / "lat.txt"
    lattice.write_text("u\n0 1 the 1,1,\n1 2 cat 1,1,\n2\n\n")
    assert main(["rescore", "--model", str(model), str(lattice)]) == 2
    assert "is an acausal window model" in capsys.readouterr().err


def test_a_window_read_once_serves_every_target(vocab):
    """``target_window``: several targets of one window give what one window per target gives."""
    model = window_model(rho=2, future=1, softmax="adaptive", cutoffs=(4,), seed=5)
    sentences = [vocab.encode(s) for s in random_sentences(5, seed=6)]
    tokens, lengths = sentence_tokens(sentences, vocab.bos_id, vocab.eos_id)
    windows, valid, _, _ = build_windows(tokens, lengths, 2, 1, model.mask_id)
    rng = random.Random(0)
    targets = torch.tensor([rng.randrange(4, vocab.size) for _ in range(3 * windows.shape[0])])
    target_window = torch.arange(windows.shape[0]).repeat(3)[torch.randperm(3 * windows.shape[0])]
    shared = model.score_windows(windows, valid, targets, target_window, max_elements=40)
    one_each = model.score_windows(windows[target_window], valid[target_window], targets, max_elements=40)
    assert shared.tolist() == pytest.approx(one_each.tolist(), abs=1e-5)


class RecordingWindows:
    """A window scorer (``score_windows`` and the ids :func:`lm.scorer.window_values` reads) over
    ``model`` that keeps the windows and (window, target) pairs it is asked to score."""

    def __init__(self, model, vocab) -> None:
        self.model, self.calls = model, []
        self.rho, self.future, self.mask_id = model.config.rho, model.config.future, model.mask_id
        self.bos_id, self.eos_id = vocab.bos_id, vocab.eos_id

    def score_windows(self, windows, valid, targets, target_window):
        self.calls.append((windows, valid, targets, target_window))
        return self.model.score_windows(windows, valid, targets, target_window, max_elements=40)


def one_by_one(model, windows, targets) -> list[float]:
    """Each row's target scored in its own window, a model call per row."""
    return [float(model.score_windows(w[None].clamp(min=0), w[None] != PAD, t[None])[0])
            for w, t in zip(windows, targets)]


@pytest.mark.parametrize("unique", ["sorted", "hash"])
def test_each_distinct_window_and_pair_is_scored_once(vocab, unique):
    """:func:`score_each_window_once` (with either row de-duplication: ``afp score``'s sorted one
    or the lattice engine's hashed one) reads each distinct window once and scores each distinct
    (window, word) once, and gives every row what scoring that row alone gives."""
    from lattices.ops import unique_rows

    model = window_model(rho=2, future=1, seed=8)
    recorder = RecordingWindows(model, vocab)
    sentences = [vocab.encode(s) for s in random_sentences(6, seed=9, max_len=6)]
    tokens, lengths = sentence_tokens(sentences + sentences[:3], vocab.bos_id, vocab.eos_id)  # repeated sentences
    windows, valid, targets, _ = build_windows(tokens, lengths, 2, 1, model.mask_id)
    windows = torch.where(valid, windows, PAD)
    other = (targets + 1) % vocab.size  # the same windows with other words: new pairs, no new windows
    windows, targets = torch.cat([windows, windows[:5], windows]), torch.cat([targets, other[:5], targets])
    order = torch.randperm(windows.shape[0], generator=torch.Generator().manual_seed(0))
    windows, targets = windows[order], targets[order]
    values, distinct = score_each_window_once(recorder.score_windows, windows, targets,
                                              sorted_unique_rows if unique == "sorted" else unique_rows)
    rows = [tuple(w) for w in windows.tolist()]
    assert len(recorder.calls) == 1
    read, read_valid, pair_targets, pair_window = recorder.calls[0]
    assert distinct == read.shape[0] == len(set(rows)) < len(rows)
    assert {tuple(w) for w in torch.where(read_valid, read, PAD).tolist()} == set(rows)
    assert bool((read[~read_valid] == 0).all())  # PAD slots are read as 0, marked invalid
    assert pair_targets.shape[0] == len(set(zip(rows, targets.tolist()))) < len(rows)
    assert values.dtype == torch.float64 and values.shape == targets.shape
    assert values.tolist() == pytest.approx(one_by_one(model, windows, targets), abs=1e-5)


def test_window_values_of_repeated_sentences_are_each_sentence_alone(vocab):
    """:func:`lm.scorer.window_values` (``afp score`` of a window model) of a batch with repeated
    sentences and shared n-grams gives each sentence's terms as scoring it alone does, in order."""
    from lm.scorer import window_values

    model = window_model(rho=1, future=2, seed=4)
    sentences = [vocab.encode(s) for s in random_sentences(5, seed=2, max_len=7)]
    batch = [*sentences, sentences[1], [], sentences[0]]
    recorder = RecordingWindows(model, vocab)
    together = window_values(recorder, batch)
    alone = torch.cat([window_values(RecordingWindows(model, vocab), [s]) for s in batch])
    assert together.shape == (sum(len(s) + 1 for s in batch),)
    assert together.tolist() == pytest.approx(alone.tolist(), abs=1e-5)
    read = recorder.calls[0][0]
    assert read.shape[0] == len({tuple(w) for w in read.tolist()}) < together.shape[0]
