"""A real decoder as a client: decode audio with PocketSphinx, rescore each lattice exactly.

    .venv/bin/pip install -e '.[decoder]'                   # from a clone: PocketSphinx 5 (its US English model)
    python examples/pocketsphinx_client.py tests/fixtures/librivox/*.wav             # the Python API
    python examples/pocketsphinx_client.py --server http://127.0.0.1:8000 FILE.wav...  # a running afp serve

Each 16 kHz mono 16-bit wav is decoded by ``pocketsphinx.Decoder(fwdflat=False)``; its lattice
goes, as the decoder writes it (``Lattice.write_htk``: PocketSphinx's own SLF), either to the
Python API (``afp.load_model(...).rescore``) or in a ``POST /v1/rescore`` request to a server,
which reads it with the PocketSphinx reader (lattices/formats/pocketsphinx.py). It prints, per
file, the decoder's 1-best and the rescored words::

    sense_and_sensibility_01_austen_64kb-0880
      decoder:  he was not an illness those young man
      rescored: he was not an ill disposed young man

``--weights W.json`` (from ``afp tune --save``) applies tuned weights; without it the untuned
defaults apply. ``--json`` prints one JSON object per file instead. With ``--server`` the client
waits for the server's ``/readyz`` (``--wait`` seconds) before it sends anything, so it can start
beside the server (docker/compose.yml).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.error
import urllib.request
import wave
from pathlib import Path
from typing import Any


def decode(path: Path) -> tuple[str, str]:
    """The decoder's 1-best and its lattice as PocketSphinx writes it (SLF text) for one wav."""
    from pocketsphinx import Decoder

    with wave.open(str(path)) as audio:
        if (audio.getframerate(), audio.getnchannels(), audio.getsampwidth()) != (16000, 1, 2):
            raise SystemExit(f"{path}: expected 16 kHz mono 16-bit audio (sox IN -r 16000 -c 1 -b 16 OUT.wav)")
        pcm = audio.readframes(audio.getnframes())
    decoder = Decoder(fwdflat=False)  # a fresh decoder per file: its noise normalisation carries over otherwise
    decoder.start_utt()
    decoder.process_raw(pcm, full_utt=True)
    decoder.end_utt()
    best = decoder.hyp().hypstr if decoder.hyp() is not None else ""  # also computes the lattice's p= posteriors
    with tempfile.TemporaryDirectory() as tmp:
        slf = Path(tmp) / f"{path.stem}.slf"
        decoder.get_lattice().write_htk(str(slf))
        return best, slf.read_text(encoding="utf-8")


def wait_ready(server: str, seconds: float) -> None:
    """Poll ``/readyz`` until the server answers 200 (it may still be loading its model)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(f"{server}/readyz", timeout=5) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"{server} was not ready within {seconds:g} s")
        time.sleep(0.5)


def rescore_remote(server: str, key: str, slf: str, weights: dict[str, Any] | None) -> dict[str, Any]:
    """``POST /v1/rescore`` with the lattice as written; the result of its one lattice."""
    named = slf.replace("VERSION=", f"UTTERANCE={key}\nVERSION=", 1)  # the key a file name gives a file
    body: dict[str, Any] = {"format": "pocketsphinx", "lattice": named}
    if weights is not None:
        body["weights"] = weights
    request = urllib.request.Request(f"{server}/v1/rescore", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=600) as answer:
            return json.loads(answer.read())["results"][0]
    except urllib.error.HTTPError as err:
        raise SystemExit(f"{key}: the server answered {err.code}: {err.read().decode(errors='replace')}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("audio", nargs="+", type=Path, help="16 kHz mono 16-bit wav files")
    parser.add_argument("--server", help="an afp server's URL (default: rescore in this process)")
    parser.add_argument("--model", help="with the Python API: the model directory (default: afp's default)")
    parser.add_argument("--weights", type=Path, help="a weights file of afp tune --save")
    parser.add_argument("--wait", type=float, default=120.0, help="seconds to wait for the server's readiness")
    parser.add_argument("--json", action="store_true", help="one JSON object per file")
    args = parser.parse_args(argv)
    model = None
    if args.server:
        wait_ready(args.server.rstrip("/"), args.wait)
    else:
        import afp

        model = afp.load_model(args.model)
    weights = json.loads(args.weights.read_text()) if args.weights and args.server else None
    for path in args.audio:
        decoded, slf = decode(path)
        if args.server:
            result = rescore_remote(args.server.rstrip("/"), path.stem, slf, weights)
            words = result["best"]["words"]
        else:
            assert model is not None
            with tempfile.TemporaryDirectory() as tmp:  # the file name is the lattice's key
                lattice = Path(tmp) / f"{path.stem}.slf"
                lattice.write_text(slf, encoding="utf-8")
                (result_obj,) = model.rescore(str(lattice), weights=args.weights)
            words = result_obj[0].best.words
        if args.json:
            print(json.dumps({"key": path.stem, "decoder": decoded.split(), "rescored": words}), flush=True)
        else:
            print(f"{path.stem}\n  decoder:  {decoded}\n  rescored: {' '.join(words)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
