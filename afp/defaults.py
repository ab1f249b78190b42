"""Where the bundled default model lives.

The default model is ``models/conversational/`` in the source tree; the environment variable
``AFP_MODEL_DIR`` points elsewhere (a model directory of the same layout).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
BUNDLED_MODELS = REPO_ROOT / "models"
DEFAULT_MODEL_NAME = "conversational"


def default_model_dir() -> Path:
    """``$AFP_MODEL_DIR`` when set, else the bundled ``models/conversational``."""
    override = os.environ.get("AFP_MODEL_DIR")
    return Path(override) if override else BUNDLED_MODELS / DEFAULT_MODEL_NAME
