"""The offline ``local`` engine: Baker Mandarin voice (FastSpeech2 + MB-MelGAN) on LiteRT.

text → :mod:`.frontend` (phone ids) → :class:`BakerModel` (24 kHz audio) →
:class:`LocalEngine` (voices, silences, worker processes, 16-bit clips).
"""

from audiobook.engines.local.engine import LocalEngine, Prosody
from audiobook.engines.local.model import (
    BakerModel,
    default_model_dir,
    ensure_model,
    install_model,
)

__all__ = [
    "BakerModel",
    "LocalEngine",
    "Prosody",
    "default_model_dir",
    "ensure_model",
    "install_model",
]
