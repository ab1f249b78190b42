"""Request bodies: k2 JSON lattices under format auto, gzip bodies (and their limits), JSON parsed
off the event loop."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
import tracemalloc
import zlib
from typing import Any

import pytest

from afp.compare import compare_answers
from lattices.formats.jsonfmt import lattice_to_json
from lattices.formats.k2 import is_k2_json, k2_dict_from_json, k2_dict_to_json, read_k2
from service.encoding import GzipDecoder
from service.errors import APIError
from tests.lattices.test_k2 import WORDS, transducer
from tests.lattices.test_k2_output import assert_valid_k2
from tests.service.test_app import SLF, assert_same_answer, client_for, library_answer, path_totals, written
from tests.service.test_rescore_cli import ARCHIVE

WORDS_TXT = "".join(f"{w} {i}\n" for i, w in enumerate(WORDS))
K2_JSON = k2_dict_to_json(transducer())  # words: cat sat, dog, or epsilon; token labels and lm_scores
GZIPPED = gzip.compress(b'{"sentences": ["a"]}', mtime=0)  # no timestamp: the same test ids in every xdist worker


def hypotheses(response: Any) -> list[tuple[str, list[list[str]], list[float]]]:
    assert response.status_code == 200, response.text
    return [(r["key"], [h["words"] for h in r["nbest"]], [h["score"] for h in r["nbest"]])
            for r in response.json()["results"]]


def bomb(size: int) -> bytes:
    """A gzip stream of ``size`` zero bytes (about a thousandth of that compressed), made in pieces."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    piece = bytes(1 << 20)
    parts = [deflate.compress(piece) for _ in range(size >> 20)]
    return b"".join([*parts, deflate.flush()])


# ------------------------------------------------------------------------------ k2 under format auto
def test_k2_json_is_recognized_and_nothing_else() -> None:
    (source,) = read_k2(transducer(), symbols=WORDS)
    assert is_k2_json(K2_JSON) and is_k2_json([K2_JSON, K2_JSON]) and is_k2_json({"arcs": []})
    assert not is_k2_json(lattice_to_json(source))  # the JSON lattice form: start, finals, 5-entry arcs
    assert not is_k2_json({"key": "u", "arcs": [[0, 1, "a", 0.0, 0.0]]})  # a JSON lattice missing its finals
    assert not is_k2_json({"key": "u", "hypotheses": []}) and not is_k2_json({"lattices": [K2_JSON]})
    assert not is_k2_json([]) and not is_k2_json("0 1 2 3") and not is_k2_json({"arcs": "x"})


def test_k2_json_lattice_with_format_auto_is_read_as_k2(client, library) -> None:
    """Read as k2 under format auto: the answer is the Python API's for the k2 lattice (words and
    scores), and the rescored lattice comes back in k2's JSON form: the API's rescored lattice, with
    the same paths and totals once read again."""
    body = {"lattice": K2_JSON, "words": WORDS_TXT, "nbest": 3, "return_lattice": True}
    auto = client.post("/v1/rescore", json=body)
    explicit = client.post("/v1/rescore", json={**body, "format": "k2"})
    assert hypotheses(auto) == hypotheses(explicit)
    (expected,) = library_answer(library, K2_JSON, "k2", WORDS, nbest=3, return_lattice=True)
    assert_same_answer(auto.json()["results"], [expected])
    ((_, words, _),) = hypotheses(auto)
    assert sorted(words) == [[], ["cat", "sat"], ["dog"]]
    returned = auto.json()["results"][0]["lattice"]  # the rescored lattice comes back in k2's JSON form
    assert returned == explicit.json()["results"][0]["lattice"] and "aux_labels" in returned
    want = written(expected.lattice, "k2")
    assert sorted(returned) == sorted(want)
    found = compare_answers(want, returned)
    assert found.same, found.difference
    d = k2_dict_from_json(returned)
    assert_valid_k2(d)  # </s> scores as final weights: a super-final state, -1 only into it
    (back,) = read_k2(d, symbols=WORDS)
    found = compare_answers(path_totals(expected.lattice), path_totals(back))
    assert found.same, found.difference


def test_list_of_k2_json_lattices_with_format_auto(client) -> None:
    r = client.post("/v1/rescore", json={"lattice": [K2_JSON, K2_JSON], "words": WORDS_TXT})
    assert [key for key, _, _ in hypotheses(r)] == ["lattice-0", "lattice-1"]
    broken = client.post("/v1/rescore", json={"lattice": {"arcs": [[0, 1, 5, 0.0]]}, "words": WORDS_TXT})
    assert broken.status_code == 422 and broken.json()["error"]["kind"] == "lattice_format"
    assert "label -1" in broken.json()["error"]["message"]  # read as k2, so k2's error


# -------------------------------------------------------------------------------------- gzip bodies
def test_gzip_bodies_give_the_same_answers(client) -> None:
    body = json.dumps({"format": "kaldi", "lattice": ARCHIVE, "nbest": 2}).encode()
    plain = client.post("/v1/rescore", content=body, headers={"content-type": "application/json"})
    packed = gzip.compress(body)
    for encoding, data in [("gzip", packed), ("x-gzip", packed), ("GZip", packed), ("identity", body),
                           ("gzip", gzip.compress(body[:40]) + gzip.compress(body[40:]))]:  # two members
        r = client.post("/v1/rescore", content=data, headers={"content-type": "application/json",
                                                              "content-encoding": encoding})
        assert hypotheses(r) == hypotheses(plain), encoding
    text = client.post("/v1/rescore?nbest=2", content=gzip.compress(SLF.encode()),
                       headers={"content-type": "text/plain", "content-encoding": "gzip"})
    assert hypotheses(text) == hypotheses(client.post("/v1/rescore?nbest=2", content=SLF,
                                                      headers={"content-type": "text/plain"}))
    sentences = {"sentences": ["the cat sat", "a dog"]}
    ppl = client.post("/v1/perplexity", content=gzip.compress(json.dumps(sentences).encode()),
                      headers={"content-type": "application/json", "content-encoding": "gzip"})
    assert ppl.status_code == 200 and ppl.json() == client.post("/v1/perplexity", json=sentences).json()


def test_streamed_gzip_body_is_decompressed_as_it_arrives(client, library) -> None:
    data = gzip.compress(json.dumps({"format": "htk", "lattice": SLF}).encode())

    def chunks():  # no Content-Length; cuts inside the gzip header and the deflate stream
        for i in range(0, len(data), 7):
            yield data[i:i + 7]

    r = client.post("/v1/rescore", content=chunks(), headers={"content-type": "application/json",
                                                              "content-encoding": "gzip"})
    assert r.status_code == 200, r.text
    assert_same_answer(r.json()["results"], library_answer(library, SLF, "htk"))  # the words and scores of afp rescore


def test_the_limit_holds_for_the_decompressed_size(model_dir) -> None:
    with client_for(model_dir, max_body_bytes=1 << 20) as c:
        small = bomb(64 << 20)  # 64 MiB of zeros in about 64 KB
        assert len(small) < 1 << 20
        for path in ("/v1/rescore", "/v1/perplexity"):
            r = c.post(path, content=small, headers={"content-type": "application/json", "content-encoding": "gzip"})
            assert r.status_code == 413, r.text
            assert r.json()["error"] == {"kind": "too_large", "message": "the request body decompresses to more "
                                                                         "than the limit of 1048576 bytes"}
        raw = c.post("/v1/rescore", content=bytes(2 << 20), headers={"content-encoding": "gzip"})
        assert raw.status_code == 413 and raw.json()["error"]["message"].startswith("request body is over the limit")
        deep = c.post("/v1/rescore", content=gzip.compress(b"[" * 100), headers={"content-type": "application/json",
                                                                               "content-encoding": "gzip"})
        assert deep.status_code == 422 and "levels deep" in deep.json()["error"]["message"]  # checked decompressed


def test_a_zip_bomb_is_never_decompressed_whole() -> None:
    data = bomb(256 << 20)
    decoder = GzipDecoder(limit=1 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(APIError) as info:
            for i in range(0, len(data), 1 << 16):
                decoder.feed(data[i:i + (1 << 16)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.status == 413 and decoder.size == (1 << 20) + 1  # stopped one byte over the limit
    assert peak < 8 << 20, peak  # not 256 MiB


@pytest.mark.parametrize("data, words", [
    (b"this is not gzip", "incorrect header check"),
    (GZIPPED[:-6], "ends early"),
    (GZIPPED + b"trailing", "incorrect header check"),  # after a member comes another, or nothing
    (GZIPPED[:-8] + b"\0\0\0\0" + GZIPPED[-4:], "incorrect data check"),  # the CRC-32 is wrong
])
def test_damaged_gzip_bodies_are_422s(client, data: bytes, words: str) -> None:
    for path in ("/v1/rescore", "/v1/perplexity"):
        r = client.post(path, content=data, headers={"content-type": "application/json", "content-encoding": "gzip"})
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert error["kind"] == "invalid_request" and error["message"].startswith(
            "the gzip request body cannot be decompressed") and words in error["message"], error


@pytest.mark.parametrize("encoding", ["br", "deflate", "compress", "gzip, br", "zstd"])
def test_other_content_encodings_are_415s(client, encoding: str) -> None:
    for path in ("/v1/rescore", "/v1/perplexity"):
        r = client.post(path, content=b'{"sentences": ["a"]}', headers={"content-type": "application/json",
                                                                      "content-encoding": encoding})
        assert r.status_code == 415, r.text
        assert r.json()["error"]["kind"] == "unsupported_encoding" and repr(encoding) in r.json()["error"]["message"]
    assert client.get("/healthz", headers={"content-encoding": "br"}).status_code == 200  # no body, no check


# ------------------------------------------------------------------------------- off the event loop
def test_json_bodies_are_parsed_and_validated_off_the_event_loop(client, monkeypatch) -> None:
    import service.routes.perplexity
    import service.routes.rescore

    loop_thread = client.portal.call(threading.current_thread)
    seen: list[tuple[str, threading.Thread, bool]] = []

    def on_loop() -> bool:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return False
        return True

    real_loads = json.loads

    def loads(data: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(data, (bytes, bytearray)):  # request bodies (the test's own response reading is str)
            seen.append(("loads", threading.current_thread(), on_loop()))
        return real_loads(data, *args, **kwargs)

    monkeypatch.setattr(json, "loads", loads)
    for module in (service.routes.rescore, service.routes.perplexity):
        real_validate = module.validate

        def validate(model: Any, data: Any, real: Any = real_validate) -> Any:
            seen.append(("validate", threading.current_thread(), on_loop()))
            return real(model, data)

        monkeypatch.setattr(module, "validate", validate)
    r = client.post("/v1/rescore", json={"format": "kaldi", "lattice": ARCHIVE})
    assert r.status_code == 200, r.text
    assert client.post("/v1/rescore?nbest=2", content=SLF, headers={"content-type": "text/plain"}).status_code == 200
    assert client.post("/v1/perplexity", json={"sentences": ["the cat"]}).status_code == 200
    kinds = [kind for kind, _, _ in seen]
    assert kinds.count("loads") == 2 and kinds.count("validate") == 3, kinds
    for kind, thread, looping in seen:
        assert thread is not loop_thread and not looping, (kind, thread.name)


def test_perplexity_body_errors_keep_their_messages(client) -> None:
    cases = [(b"", None, "the request body is empty: send a JSON object"),
             (b"[1, 2]", "application/json", "Input should be a valid dictionary"),
             (b"{}", "application/json", "sentences: Field required"),
             (b'{"sentences": []}', "application/json", "sentences: List should have at least 1 item"),
             (b'{"sentences": ["a"]}', "text/plain", "send a JSON object (Content-Type: application/json), not "
                                                     "text/plain"),
             (b'{"sentences": ["a"]}', None, "send a JSON object (Content-Type: application/json), not no "
                                             "Content-Type")]
    for data, content_type, message in cases:
        headers = {"content-type": content_type} if content_type else {}
        r = client.post("/v1/perplexity", content=data, headers=headers)
        assert r.status_code == 422 and r.json()["error"]["message"].startswith(message), r.text
    assert client.post("/v1/perplexity", json={"sentences": ["a"], "x": 1}).json()["error"]["field"] == "x"


def test_openapi_still_documents_both_request_bodies(client) -> None:
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    assert "RescoreRequest" in schemas and "sentences" in schemas["PerplexityRequest"]["properties"]
    body = spec["paths"]["/v1/perplexity"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/PerplexityRequest"}
