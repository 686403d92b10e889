"""Text → phone symbols → ids, in the exact form the Baker FastSpeech2 model was trained on.

A training utterance looks like ``sil k a2 #0 ^ er2 #0 p u3 #2 p ei2 … sil eos``:
every syllable is an initial (``^`` when it has none) plus a final carrying its
tone digit; ``#0`` joins syllables inside a prosodic word, ``#1``/``#2``/``#3``
mark prosodic word, phrase and intonation-phrase boundaries (the corpus has
``#3`` at commas); punctuation itself is never a symbol.  Erhua adds ``er5``
right after the final it colours.

Pipeline: :func:`normalize_text` → runs of readable characters split at
punctuation → jieba words with pinyin (:mod:`.pinyin`) → prosodic words →
phrase breaks → symbols.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from audiobook.engines.local.normalize import normalize_text
from audiobook.engines.local.pinyin import (
    ERHUA,
    PinyinConverter,
    Word,
    has_reading,
    third_tone_sandhi,
)
from audiobook.errors import ModelError

logger = logging.getLogger(__name__)

# Part of the synthesis cache key: bump whenever the phones produced for a text change.
FRONTEND_VERSION = "2"

SILENCE = "sil"
END = "eos"

# Punctuation after which a narrator pauses (an intonation-phrase break, #3).
_PAUSE_PUNCTUATION = frozenset("，,、；;：:。.！!？?…—–()（）[]【】〔〕\n\r\t")
# Punctuation that groups words without a real pause (#2).
_PHRASE_PUNCTUATION = frozenset("“”‘’\"'「」『』《》〈〉·•")

# Single-character words that lean on the word before them (的, 了, locatives).
_CLITICS = frozenset("的了着地得吗呢吧啊呀哇啦嘛过们般似中里上内时")
# Words that typically open a new phrase; a #2 goes before them in long stretches.
_OPENER_WORDS = "通过 因为 所以 如果 虽然 但是 然后 并且 而且 或者 仿佛 如同 只有 只是 直到 为了 并用 进行 开始 准备"
_PHRASE_OPENERS = frozenset(
    "在把被从向对给让和与及并而但却就才又将于以由当如像因使用往跟同比"
) | frozenset(_OPENER_WORDS.split())
_MAX_PROSODIC_WORD = 4  # syllables a prosodic word may grow to by absorbing monosyllables
_PHRASE_AFTER_OPENER = 5  # syllables since the last phrase break before an opener gets #2
_PHRASE_ANYWHERE = 8  # syllables since the last phrase break before any boundary gets #2
_LONGEST_UNPAUSED = 20  # syllables before a stretch without punctuation gets a #3

# Syllables the mapper lacks (rare characters) → the closest syllable it has.
_SYLLABLE_FALLBACK = {
    "n": "en",
    "m": "mu",
    "hm": "hen",
    "hng": "heng",
    "fiao": "xiao",
    "nun": "lun",
    "cei": "ce",
    "wong": "weng",
    "din": "ding",
    "bong": "beng",
    "biang": "bian",
    "ê": "ei",
}


@dataclass(frozen=True)
class _Group:
    """A prosodic word and the break level that precedes it."""

    level: int
    words: tuple[Word, ...]

    @property
    def syllables(self) -> list[str]:
        return [s for word in self.words for s in word.pinyin]

    @property
    def size(self) -> int:
        return sum(len(word.pinyin) for word in self.words)


class Frontend:
    """Reads Chinese text as phone symbols/ids for one Baker-style symbol table."""

    def __init__(
        self,
        symbol_to_id: Mapping[str, int],
        syllable_phones: Mapping[str, tuple[str, str]],
    ) -> None:
        missing = [s for s in (SILENCE, END, "#0", "#1", "#2", "#3") if s not in symbol_to_id]
        if missing:
            raise ModelError(
                f"phone table lacks {missing}; reinstall: audiobook voices install local"
            )
        self._symbol_to_id = dict(symbol_to_id)
        self._syllable_phones = dict(syllable_phones)
        self._converter = PinyinConverter()

    @classmethod
    def load(cls, mapper_path: Path) -> Frontend:
        """Load the symbol table and pinyin dictionary from ``baker_mapper.json``."""
        try:
            mapper = json.loads(Path(mapper_path).read_text(encoding="utf-8"))
            symbol_to_id = {str(k): int(v) for k, v in mapper["symbol_to_id"].items()}
            syllable_phones = {
                str(k): (str(v[0]), str(v[1])) for k, v in mapper["pinyin_dict"].items()
            }
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            raise ModelError(
                f"cannot read phone table {mapper_path} ({exc}); "
                "reinstall: audiobook voices install local"
            ) from exc
        return cls(symbol_to_id, syllable_phones)

    def text_to_ids(self, text: str) -> list[int]:
        """Model input ids for ``text``; at least ``[sil, eos]`` even if nothing is speakable."""
        return [self._symbol_to_id[p] for p in self.text_to_phones(text)]

    def text_to_phones(self, text: str) -> list[str]:
        """Phone symbols for ``text``: ``sil``, syllables and breaks, ``sil``, ``eos``."""
        groups = _mark_phrases(list(self._groups(normalize_text(text))))
        phones = [SILENCE]
        level = 0
        for group in groups:
            # A group made only of unmappable syllables passes its break on to the next.
            level = max(level, group.level)
            syllable_phones = self._group_phones(group)
            if not syllable_phones:
                continue
            if len(phones) > 1:
                phones.append(f"#{level}")
            phones.extend(syllable_phones)
            level = 0
        if len(phones) > 1:
            phones.append(SILENCE)
        phones.append(END)
        return phones

    def _groups(self, text: str) -> Iterator[_Group]:
        """Prosodic words of the whole text, each with the break level before it."""
        level = 1
        for run, break_after in _runs(text):
            words = self._converter.words(run)
            for index, group in enumerate(_prosodic_words(words)):
                yield _Group(level if index == 0 else 1, group)
            level = break_after

    def _group_phones(self, group: _Group) -> list[str]:
        phones: list[str] = []
        for syllable in third_tone_sandhi(group.syllables):
            if syllable == ERHUA and phones:
                phones.append("er5")
                continue
            pair = self._phones(syllable)
            if pair is None:
                continue
            if phones:
                phones.append("#0")
            phones.extend(pair)
        return phones

    def _phones(self, syllable: str) -> tuple[str, str] | None:
        if syllable == ERHUA:
            syllable = "er2"  # an erhua 儿 with nothing before it to colour
        base, tone = (syllable[:-1], syllable[-1]) if syllable[-1].isdigit() else (syllable, "5")
        base = base.replace("ü", "v")
        pair = self._syllable_phones.get(base) or self._syllable_phones.get(
            _SYLLABLE_FALLBACK.get(base, "")
        )
        if pair is None or not {pair[0], f"{pair[1]}{tone}"} <= self._symbol_to_id.keys():
            logger.debug("no phones for syllable %r; skipped", syllable)
            return None
        return pair[0], f"{pair[1]}{tone}"


def _break_level(char: str) -> int:
    if char in _PAUSE_PUNCTUATION:
        return 3
    if char in _PHRASE_PUNCTUATION:
        return 2
    return 1  # spaces, symbols, emoji, letters left over: a word boundary only


def _runs(text: str) -> Iterator[tuple[str, int]]:
    """Split into runs of readable characters, each with the break level that follows it."""
    run: list[str] = []
    level = 0
    for char in text:
        if has_reading(char):
            if level and run:
                yield "".join(run), level
                run = []
            level = 0
            run.append(char)
        else:
            level = max(level, _break_level(char))
    if run:
        yield "".join(run), max(level, 1)


def _prosodic_words(words: Sequence[Word]) -> list[tuple[Word, ...]]:
    """Group jieba words into prosodic words: monosyllables lean on a neighbour."""
    groups: list[list[Word]] = []
    for word in words:
        leans_left = len(word.text) == 1 and (word.text in _CLITICS or word.pinyin == (ERHUA,))
        if leans_left and groups:
            groups[-1].append(word)
        else:
            groups.append([word])

    merged: list[list[Word]] = []
    index = 0
    while index < len(groups):
        group = groups[index]
        size = sum(len(w.pinyin) for w in group)
        if size == 1 and index + 1 < len(groups):
            after = groups[index + 1]
            if size + sum(len(w.pinyin) for w in after) <= _MAX_PROSODIC_WORD:
                groups[index + 1] = group + after
                index += 1
                continue
        if size == 1 and merged and sum(len(w.pinyin) for w in merged[-1]) < _MAX_PROSODIC_WORD:
            merged[-1].extend(group)
        else:
            merged.append(group)
        index += 1
    return [tuple(g) for g in merged]


def _mark_phrases(groups: list[_Group]) -> list[_Group]:
    """Promote some word boundaries to phrase (#2) or pause (#3) breaks in long stretches."""
    levels = [g.level for g in groups]
    since_phrase = 0
    for index, group in enumerate(groups):
        if index and levels[index] < 2:
            opener = group.words[0].text in _PHRASE_OPENERS
            if (
                opener and since_phrase >= _PHRASE_AFTER_OPENER
            ) or since_phrase >= _PHRASE_ANYWHERE:
                levels[index] = 2
        if levels[index] >= 2:
            since_phrase = 0
        since_phrase += group.size

    start = 0
    for end in [i for i, level in enumerate(levels) if level >= 3] + [len(groups)]:
        _split_long(groups, levels, start, end)
        start = end
    return [_Group(level, g.words) for level, g in zip(levels, groups, strict=True)]


def _split_long(groups: Sequence[_Group], levels: list[int], start: int, end: int) -> None:
    """Put a #3 near the middle of a stretch [start, end) that is too long to say in one breath."""
    sizes = [g.size for g in groups[start:end]]
    total = sum(sizes)
    if total <= _LONGEST_UNPAUSED or end - start < 2:
        return
    best, best_score = None, None
    before = sizes[0]
    for index in range(start + 1, end):
        # Prefer phrase boundaries, then the one closest to the middle.
        score = (levels[index] < 2, abs(total / 2 - before))
        if best_score is None or score < best_score:
            best, best_score = index, score
        before += sizes[index - start]
    assert best is not None
    levels[best] = 3
    _split_long(groups, levels, start, best)
    _split_long(groups, levels, best, end)
