"""Archive readers stop between lattices once their deadline has passed (a server request's
time limit covers parsing, not only rescoring)."""

from __future__ import annotations

import json
import time

import pytest

from lattices.formats import read_lattices, write_lattices
from lattices.ops import DeadlineExceeded
from tests.lattices.test_kaldi import COMPACT

NBEST = json.dumps([{"key": f"u{i}", "hypotheses": [{"words": ["a", "b"], "scores": {"am": -1.0}}]}
                    for i in range(3)])


def archives() -> dict[str, bytes | str]:
    lattices = read_lattices(COMPACT, "kaldi")
    return {"kaldi": COMPACT, "kaldi-binary": write_lattices(lattices, "kaldi", binary=True),
            "json": write_lattices(lattices, "json").decode(), "nbest-json": NBEST}


@pytest.mark.parametrize("name", ["kaldi", "kaldi-binary", "json", "nbest-json"])
def test_a_passed_deadline_stops_parsing_and_a_later_one_does_not(name):
    data = archives()[name]
    fmt = "kaldi" if name.startswith("kaldi") else name
    symbols = read_lattices(COMPACT, "kaldi")[0].symbols if name == "kaldi-binary" else None  # ids need words.txt
    assert read_lattices(data, fmt, symbols, deadline=time.monotonic() + 60)  # in time: parsed
    with pytest.raises(DeadlineExceeded):
        read_lattices(data, fmt, symbols, deadline=time.monotonic() - 1)
