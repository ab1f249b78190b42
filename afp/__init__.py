"""afp-rescore's library: the Python API (:mod:`afp.api`) and the code behind every front end
(batch jobs, outputs, tuning, WER, lhotse cuts, the merging scorer, symbol tables).

``import afp`` is cheap: the API's names are loaded on first use, so a module that needs one
part (the server's ``afp.batching``) does not import the batch-job modules::

    import afp

    model = afp.load_model()
    results = model.rescore("examples/lattice.txt", nbest=2)
"""

from __future__ import annotations

from typing import Any

__all__ = ["Model", "RescoreFailed", "SentenceScore", "load_model", "rescore_options"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from afp import api

        return getattr(api, name)
    raise AttributeError(f"module 'afp' has no attribute {name!r}")
