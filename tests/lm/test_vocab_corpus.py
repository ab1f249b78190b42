from __future__ import annotations

import gzip

import pytest
import torch

from lm.corpus import CorpusError, batches, collate_flat, encode, iter_lhotse_texts, load_corpus, read_sentences
from lm.vocab import Vocabulary, VocabularyError
from tests.factories import random_sentences, shared_data_file, write_text


def test_vocabulary_from_sentences_orders_by_count_and_maps_oov():
    vocab = Vocabulary.from_sentences([["b", "a", "b"], ["c", "b", "a"]], max_size=5)
    assert vocab.words == ("<s>", "</s>", "<unk>", "b", "a")  # c (count 1) fell off
    assert vocab.encode(["a", "c", "zzz"]) == [4, vocab.unk_id, vocab.unk_id]
    assert vocab.count_oov(["a", "c", "<unk>"]) == 2  # a literal <unk> is unknown too (Vocabulary.is_known)
    assert vocab.predictable_mask() == [False, True, True, True, True]


def test_vocabulary_min_count_and_bad_max_size():
    vocab = Vocabulary.from_sentences([["a", "a", "b"]], min_count=2)
    assert "b" not in vocab and "a" in vocab
    with pytest.raises(ValueError, match="max_size"):
        Vocabulary.from_sentences([["a"]], max_size=2)


def test_words_txt_round_trip_keeps_ids_and_finds_unk(tmp_path):
    table = tmp_path / "words.txt"
    table.write_text("<eps> 0\n<UNK> 1\nHELLO 2\nWORLD 5\n#0 6\n")
    vocab = Vocabulary.from_words_txt(table)
    assert vocab.id("WORLD") == 5 and vocab.id("nope") == 1 and vocab.unk == "<UNK>"
    assert vocab.words[3] == "" and "<s>" in vocab and "</s>" in vocab
    mask = vocab.predictable_mask()
    assert not mask[0] and not mask[3] and not mask[6] and mask[5] and not mask[vocab.bos_id]
    vocab.to_words_txt(tmp_path / "out.txt")
    again = Vocabulary.from_words_txt(tmp_path / "out.txt")
    assert again.words == vocab.words


@pytest.mark.parametrize("content, message", [
    ("A 1\nB\n", r"words.txt:2: expected 'WORD ID'"),
    ("A x\n", r"words.txt:1: id 'x' is not an integer"),
    ("A 1\nB 1\n", r"words.txt:2: id 1 used for 'A' and 'B'"),
    ("A -3\n", r"words.txt:1: id -3 is negative"),
    ("", r"symbol table is empty"),
])
def test_words_txt_errors_name_file_and_line(tmp_path, content, message):
    table = tmp_path / "words.txt"
    table.write_text(content)
    with pytest.raises(VocabularyError, match=message):
        Vocabulary.from_words_txt(table)


def test_real_kaldi_symbol_table():
    table = shared_data_file("lattices", "ami-kaldi", "words.txt")  # a skip only without ../shared/data itself
    vocab = Vocabulary.from_words_txt(table)
    assert vocab.size >= 46949
    assert vocab.id("<eps>") == 0


def test_read_sentences_strips_boundaries_and_blank_lines(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("<s> a b </s>\n\n  c  \n")
    assert read_sentences(path) == [["a", "b"], ["c"]]
    assert read_sentences(path, keep_empty=True) == [["a", "b"], [], ["c"]]


def test_read_sentences_errors(tmp_path):
    with pytest.raises(CorpusError, match="no such file"):
        read_sentences(tmp_path / "missing.txt")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n\xff\xfe\n")
    with pytest.raises(CorpusError, match="bad.txt: not UTF-8"):
        read_sentences(bad)


def test_encode_counts_tokens_and_oov():
    vocab = Vocabulary.from_sentences([["a", "b"]])
    corpus = encode([["a", "zz"], ["b"]], vocab)
    assert corpus.tokens == 3 + 2 and corpus.oov == 1 and corpus.sentences == 2
    assert corpus.ids[0].tolist() == [vocab.bos_id, vocab.id("a"), vocab.unk_id, vocab.eos_id]


def test_collate_flat_shifts_inputs_and_targets():
    batch = collate_flat(torch.tensor([0, 5, 6, 1, 0, 7, 1]), torch.tensor([4, 3]))
    assert batch.inputs.tolist() == [[0, 5, 6], [0, 7, 0]]
    assert batch.targets.tolist() == [[5, 6, 1], [7, 1, 0]]
    assert batch.lengths.tolist() == [3, 2] and batch.num_tokens == 5
    assert batch.mask.tolist() == [[True, True, True], [True, True, False]]


def test_batches_cover_every_sentence_once_and_split_by_rank():
    vocab = Vocabulary.from_sentences(random_sentences(50))
    corpus = encode(random_sentences(53, seed=1), vocab)
    seen = sum(b.inputs.shape[0] for b in batches(corpus, 4, shuffle=True, seed=3))
    assert seen == 53
    tokens = sum(b.num_tokens for b in batches(corpus, 4, shuffle=True, seed=3))
    assert tokens == corpus.tokens
    per_rank = [list(batches(corpus, 4, shuffle=True, seed=3, rank=r, world_size=2)) for r in (0, 1)]
    assert len(per_rank[0]) == len(per_rank[1]) == 7  # 14 batches, half each
    assert sum(b.inputs.shape[0] for rank in per_rank for b in rank) == 53  # disjoint shares of everything
    odd = encode(random_sentences(49, seed=1), vocab)  # 13 batches: one dropped so both ranks step together
    assert [len(list(batches(odd, 4, shuffle=True, rank=r, world_size=2))) for r in (0, 1)] == [6, 6]
    with pytest.raises(ValueError, match="batch_size"):
        next(batches(corpus, 0))


def _write_supervisions(path):
    from lhotse import SupervisionSegment, SupervisionSet

    sups = SupervisionSet.from_segments([
        SupervisionSegment(id="s1", recording_id="r1", start=0, duration=1, text="HELLO THERE"),
        SupervisionSegment(id="s2", recording_id="r1", start=1, duration=1, text=""),
        SupervisionSegment(id="s3", recording_id="r1", start=2, duration=1, text="<s> GOOD BYE </s>"),
    ])
    sups.to_file(path)
    return sups


def test_lhotse_supervision_and_cut_manifests(tmp_path):
    from lhotse import CutSet, Recording, RecordingSet

    sups = _write_supervisions(tmp_path / "supervisions.jsonl.gz")
    assert list(iter_lhotse_texts(tmp_path / "supervisions.jsonl.gz")) == [["HELLO", "THERE"], ["GOOD", "BYE"]]
    recordings = RecordingSet.from_recordings([Recording(id="r1", sources=[], sampling_rate=16000,
                                                         num_samples=48000, duration=3.0)])
    cuts = CutSet.from_manifests(recordings=recordings, supervisions=sups)
    cuts.to_file(tmp_path / "cuts.jsonl.gz")
    assert load_corpus(tmp_path / "cuts.jsonl.gz") == [["HELLO", "THERE"], ["GOOD", "BYE"]]


def test_lhotse_bad_manifest_is_a_corpus_error(tmp_path):
    path = tmp_path / "cuts.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write('{"not": "a manifest"}\n')
    with pytest.raises(CorpusError, match="cuts.jsonl.gz"):
        load_corpus(path)


def test_plain_text_is_read_by_load_corpus(tmp_path):
    path = write_text(tmp_path / "text.txt", [["x", "y"]])
    assert load_corpus(path) == [["x", "y"]]


def test_gzip_text_is_read_by_its_magic_bytes_and_a_truncated_one_names_the_file(tmp_path):
    sentences = [["a", "b"], ["c", "d", "e"]] * 500
    packed = gzip.compress("".join(" ".join(s) + "\n" for s in sentences).encode())
    (tmp_path / "text.gz").write_bytes(packed)
    (tmp_path / "noext").write_bytes(packed)  # the name does not matter
    assert read_sentences(tmp_path / "text.gz") == sentences
    assert read_sentences(tmp_path / "noext") == sentences
    (tmp_path / "cut.gz").write_bytes(packed[: len(packed) // 2])
    with pytest.raises(CorpusError, match=r"cut\.gz: cannot decompress"):
        read_sentences(tmp_path / "cut.gz")
