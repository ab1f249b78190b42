"""Prepared shards (lm/shards.py), the batch plans that read them (lm/corpus.py), afp prepare and
afp train --data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from lm.checkpoint import load_checkpoint
from lm.config import PrepareConfig, TrainConfig
from lm.corpus import CorpusError, EncodedCorpus, batches, encode, load_corpus, plan_batches, read_sentences
from lm.shards import ShardError, open_prepared, prepare
from lm.vocab import Vocabulary
from service.cli import main
from tests.factories import patterned_sentences, random_sentences, write_text


def _prepare(tmp_path: Path, text: list[Path], name: str = "prep", **options) -> Path:
    out = tmp_path / name
    prepare(PrepareConfig(text=tuple(str(t) for t in text), out=str(out), **options))
    return out


def _assert_same_corpus(prepared, encoded: EncodedCorpus) -> None:
    assert prepared.sentences == encoded.sentences
    assert prepared.tokens == encoded.tokens
    assert prepared.oov == encoded.oov
    assert prepared.lengths().tolist() == [len(ids) - 2 for ids in encoded.ids]
    for i in range(encoded.sentences):
        assert torch.equal(prepared[i], encoded[i]), i


@pytest.fixture()
def texts(tmp_path):
    """A training text with rare words (OOV once max_vocab cuts them), a literal <unk>, marked
    boundaries and blank lines, and a validation text with words the training text lacks."""
    train = random_sentences(120, seed=1, max_len=12) + [["<unk>", "the", "zebra"], ["quokka"]]
    path = tmp_path / "train.txt"
    path.write_text("".join(" ".join(s) + "\n" for s in train[:60]) + "\n<s> " + " ".join(train[60]) + " </s>\n\n"
                    + "".join(" ".join(s) + "\n" for s in train[61:]), encoding="utf-8")
    valid = write_text(tmp_path / "valid.txt", random_sentences(20, seed=2) + [["okapi", "cat"]])
    return path, valid


@pytest.mark.parametrize("options", [{}, {"max_vocab": 9}, {"min_count": 30}])
def test_prepare_then_read_equals_encode_of_the_same_text(tmp_path, texts, options):
    train, valid = texts
    sentences = load_corpus(train)
    vocab = Vocabulary.from_sentences(sentences, max_size=options.get("max_vocab"),
                                      min_count=options.get("min_count", 1))
    data = open_prepared(_prepare(tmp_path, [train], valid=str(valid), **options))
    assert data.vocab == vocab  # built from the text exactly as training builds it
    expected = encode(sentences, vocab)
    _assert_same_corpus(data.train, expected)
    _assert_same_corpus(data.valid, encode(load_corpus(valid), vocab))
    assert data.valid.oov >= 1  # okapi
    if options:
        assert expected.oov > 0  # the options really made OOV words, and they were counted alike
    split = data.meta["splits"]["train"]
    assert (split["sentences"], split["tokens"], split["oov"]) == (expected.sentences, expected.tokens, expected.oov)
    assert data.meta["vocab"]["max_vocab"] == options.get("max_vocab")


def test_several_texts_and_a_lhotse_manifest_are_read_in_order(tmp_path):
    from lhotse import SupervisionSegment, SupervisionSet

    first = write_text(tmp_path / "a.txt", random_sentences(10, seed=3))
    sups = tmp_path / "supervisions.jsonl.gz"
    SupervisionSet.from_segments([SupervisionSegment(id=f"s{i}", recording_id="r", start=i, duration=1, text=text)
                                  for i, text in enumerate(["HELLO THERE", "", "<s> GOOD BYE </s>"])]).to_file(sups)
    sentences = load_corpus(first) + load_corpus(sups)
    assert sentences[-2:] == [["HELLO", "THERE"], ["GOOD", "BYE"]]
    data = open_prepared(_prepare(tmp_path, [first, sups]))
    vocab = Vocabulary.from_sentences(sentences)
    assert data.vocab == vocab
    _assert_same_corpus(data.train, encode(sentences, vocab))


def test_lines_end_where_read_sentences_ends_them(tmp_path):
    path = tmp_path / "odd.txt"
    path.write_bytes("a b\r\nc\rd e\x85f\u2028g\n\n  \nh".encode())
    expected = [line.split() for line in path.read_text(encoding="utf-8").splitlines() if line.split()]
    assert read_sentences(path) == expected == [["a", "b"], ["c"], ["d", "e"], ["f"], ["g"], ["h"]]
    data = open_prepared(_prepare(tmp_path, [path]))
    assert data.train.sentences == 6 and data.train.tokens == 8 + 6


def test_sharding_into_several_files_gives_the_same_corpus(tmp_path):
    sentences = random_sentences(200, seed=4, max_len=9) + [["the"] * 40] + random_sentences(5, seed=5)
    path = write_text(tmp_path / "t.txt", sentences)
    one = open_prepared(_prepare(tmp_path, [path], "one"))
    many = open_prepared(_prepare(tmp_path, [path], "many", shard_tokens=25))
    assert len(one.train.shards) == 1 and len(many.train.shards) > 40
    words = [len(shard.tokens) for shard in many.train.shards]
    assert max(words) == 40 and sorted(words)[-2] <= 25  # only the 40-word sentence overflows, in a shard alone
    _assert_same_corpus(many.train, encode(sentences, one.vocab))
    assert many.train[-1].tolist() == one.train[len(sentences) - 1].tolist()
    picked = [150, 5, 0, 203, 5]  # several shards, out of order, one twice
    ids, sizes = many.train.take(picked)
    expected = encode([sentences[i] for i in picked], one.vocab)
    assert torch.equal(ids, torch.cat(expected.ids)) and sizes.tolist() == [len(s) for s in expected.ids]
    with pytest.raises(IndexError, match="out of range"):
        many.train[len(sentences)]


def test_words_txt_vocabulary_keeps_its_ids_and_marks_oov(tmp_path):
    table = tmp_path / "words.txt"
    table.write_text("<eps> 0\n!SIL 1\n<UNK> 2\nthe 3\ncat 5\ndog 6\nsat 9\n#0 10\n", encoding="utf-8")
    sentences = random_sentences(30, seed=6)
    path = write_text(tmp_path / "t.txt", sentences)
    out = _prepare(tmp_path, [path], words_txt=str(table))
    data = open_prepared(out)
    vocab = Vocabulary.from_words_txt(table)
    assert data.vocab == vocab and data.vocab.unk == "<UNK>" and data.vocab.id("cat") == 5
    expected = encode(sentences, vocab)
    assert expected.oov > 0
    _assert_same_corpus(data.train, expected)
    assert data.meta["vocab"]["words_txt"] == str(table)
    raw = np.fromfile(out / "train-00000.tokens.int32", dtype="<i4")
    assert (raw == -1).sum() == expected.oov and (raw == vocab.unk_id).sum() == 0  # OOV stored as -1


def test_head_counts_the_prefix_across_shards(tmp_path):
    sentences = random_sentences(100, seed=7)
    vocab_text = write_text(tmp_path / "t.txt", sentences)
    data = open_prepared(_prepare(tmp_path, [vocab_text], shard_tokens=30, max_vocab=8))
    for n in (1, 37, 100, 500):
        expected = encode(sentences[:n], data.vocab)
        _assert_same_corpus(data.train.head(n), expected)
    assert data.train.head(37).oov > 0


def test_legacy_batch_size_order_is_unchanged():
    # the order the list-based batches() gave before shards (a snapshot of it): sentence i has
    # (7 i mod 11) + 1 words; batch_size 4, pools of 2 batches, seed 5
    lengths = np.array([(i * 7) % 11 + 1 for i in range(23)])
    plan = plan_batches(lengths, 4, shuffle=True, seed=5, bucket=2)
    assert [b.tolist() for b in plan] == [[0, 11, 8, 19], [22, 5, 2, 15], [13, 21, 10, 18], [16, 7, 14],
                                          [1, 6, 17, 3], [4, 12, 9, 20]]
    assert [b.tolist() for b in plan_batches(lengths, 10)] == [list(range(10)), list(range(10, 20)), [20, 21, 22]]


@pytest.mark.parametrize("max_tokens", [None, 40])
def test_rank_slices_are_disjoint_equal_and_cover_the_epoch(max_tokens):
    lengths = np.random.default_rng(0).integers(1, 15, size=301)
    full = plan_batches(lengths, 7, shuffle=True, seed=9, max_tokens=max_tokens)
    ranks = [plan_batches(lengths, 7, shuffle=True, seed=9, rank=r, world_size=3, max_tokens=max_tokens)
             for r in range(3)]
    assert len({len(p) for p in ranks}) == 1 and len(ranks[0]) == len(full) // 3
    seen = np.concatenate([b for p in ranks for b in p])
    assert len(np.unique(seen)) == len(seen)  # disjoint
    dropped = [full.order[full.bounds[g]:full.bounds[g + 1]] for g in full.schedule[len(full) - len(full) % 3:]]
    covered = np.concatenate([seen, *dropped]) if dropped else seen
    assert sorted(covered.tolist()) == list(range(len(lengths)))  # every sentence: some rank's, or dropped
    assert [b.tolist() for b in ranks[1]] == [b.tolist() for b in full][1::3][: len(ranks[1])]  # one shared plan
    with pytest.raises(ValueError, match="rank"):
        plan_batches(lengths, 7, rank=3, world_size=3)


def test_token_budget_batches_stay_within_it_and_cover_every_sentence_once():
    lengths = np.random.default_rng(1).integers(1, 30, size=500)
    budget = 64
    for seed in (0, 1):
        plan = plan_batches(lengths, 20, shuffle=True, seed=seed, max_tokens=budget, bucket=5)
        sizes = [len(b) * int(lengths[b].max() + 1) for b in plan]
        assert max(sizes) <= budget
        assert sorted(np.concatenate(list(plan)).tolist()) == list(range(500))
        assert np.mean(sizes) > 0.75 * budget  # sorted pools: little padding, batches nearly full
        rows = {int(lengths[b].max()): len(b) for b in plan}
        assert rows[min(rows)] > rows[max(rows)]  # short sentences come many to a batch
    again = plan_batches(lengths, 20, shuffle=True, seed=1, max_tokens=budget, bucket=5)
    assert [b.tolist() for b in again] == [b.tolist() for b in plan]  # deterministic from the seed
    other = plan_batches(lengths, 20, shuffle=True, seed=2, max_tokens=budget, bucket=5)
    assert [b.tolist() for b in other] != [b.tolist() for b in plan]
    in_order = plan_batches(lengths, 20, max_tokens=budget)
    assert np.concatenate(list(in_order)).tolist() == list(range(500))
    with pytest.raises(ValueError, match="sentence 3 has 9 words.*10 positions exceed the token budget of 9"):
        plan_batches(np.array([1, 2, 3, 9, 4]), 2, max_tokens=9)


def test_batches_of_shards_equal_batches_of_the_encoded_text(tmp_path):
    sentences = random_sentences(90, seed=8)
    data = open_prepared(_prepare(tmp_path, [write_text(tmp_path / "t.txt", sentences)], shard_tokens=50))
    encoded = encode(sentences, data.vocab)
    for options in ({"shuffle": True, "seed": 4}, {"shuffle": True, "seed": 4, "max_tokens": 30},
                    {"shuffle": True, "seed": 4, "rank": 1, "world_size": 2}):
        ours, theirs = batches(data.train, 8, **options), batches(encoded, 8, **options)
        assert len(ours) == len(theirs) > 0
        for a, b in zip(ours, theirs, strict=True):
            assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)


def _train(tmp_path: Path, name: str, *data_args: str, extra: tuple[str, ...] = ()) -> Path:
    out = tmp_path / name
    assert main(["train", *data_args, "--out", str(out), "--rho", "2", "--hidden", "12", "--epochs", "1",
                 "--batch-size", "10", "--lr", "0.01", "--seed", "3", "--device", "cpu", *extra]) == 0
    return out


def test_afp_train_data_equals_train_on_the_same_text(tmp_path, capsys):
    train = write_text(tmp_path / "train.txt", patterned_sentences(150, seed=1) + [["zebra", "sat"]])
    valid = write_text(tmp_path / "valid.txt", patterned_sentences(60, seed=2) + [["okapi"]])
    prepared = tmp_path / "prep"
    assert main(["prepare", "--text", str(train), "--out", str(prepared), "--valid", str(valid), "--min-count", "2",
                 "--shard-tokens", "500"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["train"]["sentences"] == 151 and summary["train"]["shards"] > 1 and summary["train"]["oov"] == 1

    by_data = _train(tmp_path, "data", "--data", str(prepared))
    by_text = _train(tmp_path, "text", "--train", str(train), "--valid", str(valid), extra=("--min-count", "2"))
    by_data_valid = _train(tmp_path, "data-valid", "--data", str(prepared), "--valid", str(valid))
    a, b, c = (load_checkpoint(run) for run in (by_data, by_text, by_data_valid))
    assert a.vocab == b.vocab == open_prepared(prepared).vocab
    assert a.training["train_config"]["data"] == str(prepared)
    # same vocabulary, same initialization, same batches in the same order: the same training, bit for bit
    assert a.training["best_valid_ppl"] == b.training["best_valid_ppl"] == c.training["best_valid_ppl"]
    for name, tensor in a.model.state_dict().items():
        assert torch.equal(tensor, b.model.state_dict()[name]), name
    metrics = [json.loads((run / "metrics.jsonl").read_text()) for run in (by_data, by_text)]
    assert metrics[0]["train_loss"] == metrics[1]["train_loss"]
    assert metrics[0]["train_tokens"] == metrics[1]["train_tokens"] == sum(len(s) + 1 for s in load_corpus(train))


def test_afp_train_data_with_a_token_budget_and_a_sentence_limit(tmp_path):
    train = write_text(tmp_path / "train.txt", patterned_sentences(200, seed=1))
    prepared = _prepare(tmp_path, [train])
    run = _train(tmp_path, "run", "--data", str(prepared), extra=("--batch-tokens", "120", "--max-train-sentences",
                                                                   "150"))
    metrics = json.loads((run / "metrics.jsonl").read_text())
    assert metrics["train_tokens"] == sum(len(s) + 1 for s in patterned_sentences(200, seed=1)[:150])
    assert metrics["valid_ppl"] is None  # no validation split was prepared
    assert load_checkpoint(run).training["train_config"]["batch_tokens"] == 120


def test_train_config_takes_exactly_one_data_source():
    with pytest.raises(ValueError, match="train: give exactly one of train"):
        TrainConfig(train="a.txt", data="prep")
    with pytest.raises(ValueError, match="train: give exactly one of train"):
        TrainConfig()
    with pytest.raises(ValueError, match="min_count: the vocabulary of prepared data"):
        TrainConfig(data="prep", min_count=2)
    with pytest.raises(ValueError, match="batch_tokens: must be an integer >= 2"):
        TrainConfig(data="prep", batch_tokens=0)
    with pytest.raises(ValueError, match="words_txt: a vocabulary read from a symbol table"):
        PrepareConfig(text=("a.txt",), out="x", words_txt="w.txt", max_vocab=10)
    assert TrainConfig(data="prep").train is None


def test_a_missing_or_damaged_directory_is_named(tmp_path):
    sentences = random_sentences(40, seed=9)
    out = _prepare(tmp_path, [write_text(tmp_path / "t.txt", sentences)], shard_tokens=60)
    tokens = out / "train-00001.tokens.int32"
    good = tokens.read_bytes()

    with pytest.raises(ShardError, match="nowhere: no such directory"):
        open_prepared(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ShardError, match=r"empty/meta.json: no such file.*did not finish"):
        open_prepared(tmp_path / "empty")
    tokens.write_bytes(good[:-4])
    with pytest.raises(ShardError, match=r"train-00001.tokens.int32: \d+ bytes, but meta.json says .*truncated"):
        open_prepared(out)
    tokens.write_bytes(good[:-4] + np.array([999], dtype="<i4").tobytes())
    with pytest.raises(ShardError, match=r"train-00001.tokens.int32: id 999 .* outside \[-1, \d+\)"):
        open_prepared(out)
    assert open_prepared(out, verify=False).train.sentences == 40  # sizes agree; only the scan finds it
    tokens.unlink()
    with pytest.raises(ShardError, match="train-00001.tokens.int32: no such file"):
        open_prepared(out)
    tokens.write_bytes(good)
    offsets = out / "train-00000.offsets.int64"
    values = np.fromfile(offsets, dtype="<i8")
    values[2] = values[1]  # an empty sentence: the sizes still agree
    values.tofile(offsets)
    with pytest.raises(ShardError, match="train-00000.offsets.int64: offsets do not increase near sentence 0"):
        open_prepared(out)
    meta = out / "meta.json"
    meta.write_text(meta.read_text().replace('"version": 1', '"version": 7'))
    with pytest.raises(ShardError, match="meta.json: format version 7"):
        open_prepared(out)
    meta.write_text('{"format": "afp-shards",\n "version": 1,\n oops}')
    with pytest.raises(ShardError, match=r"meta.json:3: invalid JSON"):
        open_prepared(out)
    meta.unlink()
    with pytest.raises(ShardError, match="meta.json: no such file"):
        open_prepared(out)


def test_prepare_errors_name_the_file_and_leave_nothing_half_written(tmp_path, capsys):
    good = write_text(tmp_path / "t.txt", random_sentences(10))
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine words\nbroken \xff here\n")
    with pytest.raises(CorpusError, match="bad.txt: not UTF-8 text at line 2"):
        prepare(PrepareConfig(text=(str(good),), valid=str(bad), out=str(tmp_path / "a")))
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == []  # the train shards were removed again
    assert main(["prepare", "--text", str(tmp_path / "missing.txt"), "--out", str(tmp_path / "b")]) == 2
    assert "missing.txt: no such file" in capsys.readouterr().err
    _prepare(tmp_path, [good], "c")
    with pytest.raises(ShardError, match="already holds prepared data"):
        _prepare(tmp_path, [good], "c")
    assert main(["train", "--data", str(tmp_path / "b"), "--out", str(tmp_path / "run")]) == 2
    assert "b: no such directory" in capsys.readouterr().err
    assert main(["train", "--data", str(tmp_path / "c"), "--train", str(good), "--out", str(tmp_path / "run")]) == 2
    assert "give exactly one of train" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
