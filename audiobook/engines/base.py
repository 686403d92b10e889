"""The one small interface every speech engine implements.

An engine is loaded once (models, sessions) and then synthesizes many segments.
Adding an engine means one module with a class like this plus a line in
:mod:`audiobook.engines.registry`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol, Self

from audiobook.models import Clip, Voice

if TYPE_CHECKING:
    from audiobook.settings import Settings


@dataclass(frozen=True)
class SynthesisRequest:
    text: str
    voice: Voice


class Engine(Protocol):
    name: ClassVar[str]
    # Longest segment the planner may hand this engine, in characters.
    max_segment_chars: ClassVar[int]

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """Load the engine (models, sessions) once, configured from voices.toml."""
        ...

    # Identifies engine + model (+ frontend); part of every segment's cache key.
    version: ClassVar[str]

    def synthesize(self, requests: Sequence[SynthesisRequest]) -> Iterator[tuple[int, Clip]]:
        """Yield ``(index into requests, clip)`` for every request, in any order.

        Raises :class:`audiobook.errors.SynthesisError` when a segment cannot be
        synthesized completely; clips already yielded stay valid (callers cache
        them so an interrupted render resumes).
        """
        ...

    def close(self) -> None: ...


def is_speakable(text: str) -> bool:
    """True if the text has anything a voice can say (not only punctuation/space)."""
    return any(ch.isalnum() for ch in text)
