"""Starting the HTTP server (``afp serve``): its settings, checked before anything is loaded, and
the run.

    from service.startup import serve, server_settings

    serve(server_settings({"model_dir": "models/librispeech", "port": 8080}))

What can be checked from the settings alone (the model path, the weights file, the old LM, the
features) is checked here, so that a mistake is one line at once, not a failed start-up later.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pydantic's import (0.2 s) only where settings are made: not for afp's other commands' parser
    from service.settings import Settings

__all__ = ["DEFAULT_LOG_LEVEL", "LOG_LEVELS", "SettingsError", "serve", "server_settings"]


class SettingsError(ValueError):
    """Server settings that cannot be used; the message names the setting (its flag and variable)."""


def server_settings(overrides: Mapping[str, Any]) -> Settings:
    """:class:`~service.settings.Settings` from the environment (``AFP_*``) with ``overrides``
    (the flags given; None: not given) over it, checked: the model is a model directory, an ARPA
    file or an n-gram model directory; the weights file reads; the old LM and every feature's
    model directory exist."""
    from service.settings import Settings

    try:
        settings = Settings(**{name: value for name, value in overrides.items() if value is not None})
    except Exception as err:  # pydantic's ValidationError: report it as a usage error
        raise SettingsError(f"invalid server settings: {err}") from None
    from afp.mixtures import is_mixture_dir
    from lm.ngram.store import is_arpa_path, is_store_dir

    if is_arpa_path(settings.model_dir) or is_store_dir(settings.model_dir):
        if not settings.model_dir.exists():
            raise SettingsError(f"{settings.model_dir}: no such ARPA file")
    elif not ((settings.model_dir / "config.json").is_file() or is_mixture_dir(settings.model_dir)):
        raise SettingsError(f"{settings.model_dir}: not a model directory (no config.json, no mixture.json)")
    if settings.weights is not None:  # a bad weights file is one line now, not a failed start-up later
        from afp.weights import TunedWeights

        TunedWeights.read(settings.weights)
    if settings.old_lm is not None and not (settings.old_lm.is_file() or is_store_dir(settings.old_lm)):
        raise SettingsError(f"{settings.old_lm}: no such file or n-gram model directory "
                            f"(--old-lm / AFP_OLD_LM)")
    if settings.features:  # a bad feature is one line now, not a failed start-up later
        from afp.features import feature_specs

        for name, path in feature_specs(settings.features).items():
            if not (Path(path) / "config.json").is_file():
                raise SettingsError(f"feature {name!r}: {path}: not a model directory (--feature / AFP_FEATURES)")
    return settings


#: uvicorn's log levels, least first; ``afp serve --log-level`` and :func:`serve`'s default
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
DEFAULT_LOG_LEVEL = "info"


def serve(settings: Settings, log_level: str = DEFAULT_LOG_LEVEL, access_log: bool = True) -> None:
    """Run the server (uvicorn) until it is stopped; a graceful shutdown waits at most the
    request timeout. With more than one process (:meth:`Settings.process_count`), request work
    goes to worker processes (:mod:`service.pool`), and the Prometheus metrics are summed over
    them (``PROMETHEUS_MULTIPROC_DIR``, a temporary folder unless it is set)."""
    import os
    import tempfile

    import uvicorn

    from lm.device import resolve_device

    common = dict(host=settings.host, port=settings.port, log_level=log_level, access_log=access_log,
                  timeout_graceful_shutdown=int(settings.request_timeout_s))
    if settings.process_count(resolve_device(settings.device).type) == 1 or os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from service.app import create_app

        uvicorn.run(create_app(settings), **common)
        return
    with tempfile.TemporaryDirectory(prefix="afp-metrics-") as folder:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder  # before prometheus_client is imported
        from service.app import create_app

        uvicorn.run(create_app(settings), **common)
