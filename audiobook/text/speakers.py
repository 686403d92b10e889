"""Who says each quotation: speaker attribution for Chinese fiction, over a chapter plan.

Every dialogue segment gets ``speaker`` (who, or None), ``speaker_rule`` (why) and
``voice`` (a configured character's name, else ``"dialogue"``); narration is left
alone and no text is ever changed. All segments of one quotation share the result.
Wrong attributions are worse than none, so every rule needs an unambiguous cue and
a quote whose cues disagree stays with the dialogue voice.

Rules, by the name ``audiobook plan`` shows:

``after-quote``   a name and a speech verb right after the quote:
                  ``“……”何大清低声叮嘱道。`` · ``“是，总长！”特战团.团长石头轻声回应。`` → 石头
``before-quote``  the narration sentence that introduces the quote names the speaker:
                  ``老余看着他们，严肃地说道：“……”`` · ``团长石头吩咐说着“……”``
``name-to-x``     either of the above with an addressee: ``何大清对石头说：“……”``
``name-colon``    ``何大清：“……”``
``split-quote``   a name between two parts of one speech: ``“……”何大清顿了顿，“……”``
``turn-taking``   quote-only paragraphs right after a two-person exchange alternate
``override``      the chapter's override file (below)

A ``+title`` or ``+alias`` suffix means the text used a configured alias (``总长``
for 何大清). Names come from the configured characters first, then from titles
(``一组组长``, ``团长石头`` → 石头, ``唐司令``), then from common surnames checked
against jieba's dictionary. A quote that opens by addressing someone (``“总长，……”``)
is never attributed to that someone.

Override file: ``<chapter stem>.speakers.toml`` next to the chapter
(``chapters/ch004.speakers.toml``), one line per quote, keyed by any segment id of
the quote as ``audiobook plan`` shows it::

    "17.2" = "石头"       # a character name or alias, or any name to show
    "20.1" = "dialogue"   # no speaker: the default dialogue voice
    "33.1" = "narrator"   # read this quote in the narrator's voice
"""

from __future__ import annotations

import functools
import logging
import re
import tomllib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import jieba
import jieba.posseg

from audiobook.errors import ConfigError
from audiobook.models import Segment
from audiobook.settings import Character

log = logging.getLogger(__name__)


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


OVERRIDE_SUFFIX = ".speakers.toml"
RESET_VOICES = ("dialogue", "narrator")

# Longest first, so that 说道 wins over 说 and 低声道 over 道.
SPEECH_VERBS = tuple(
    sorted(
        {
            *_words("说 问 喊 叫 嚷 吼 喝 骂 答 道 劝 叹"),
            *_words("说道 问道 喊道 叫道 嚷道 吼道 喝道 骂道 答道 劝道 叹道 笑道 怒道 回道 应道"),
            *_words("低声道 沉声道 冷声道 命令道 补充道 解释道 提醒道 催促道 安慰道 反问道"),
            *_words("叮嘱 嘱咐 吩咐 回应 回答 开口 提醒 催促 命令 下令 补充 解释 追问 反问"),
            *_words("质问 喝问 嘀咕 念叨 喃喃 低语 呼喊 大喊 大叫 惊呼 惊叫 插话 插嘴 打断"),
            *_words("安慰 感叹 汇报 报告 禀报 说着 问着 喊着"),
        },
        key=len,
        reverse=True,
    )
)
# Words that may sit between the speaker and the verb: 何大清[低声]叮嘱道.
ADVERBS = frozenset(
    _words(
        "低声 轻声 大声 高声 小声 沉声 厉声 柔声 朗声 颤声 冷声 细声 齐声 淡淡 冷冷 缓缓 慢慢 "
        "轻轻 悄悄 默默 连忙 急忙 赶紧 赶忙 立刻 马上 立即 随即 顿时 突然 忽然 终于 果断 坚定 "
        "也 又 再 还 便 就 才 再次 继续 接着 随后 然后 不禁 忍不住 一边 同时 当即 淡然 "
        "笑着 微笑着 苦笑着 冷笑着 喘着气 叹了口气 点头 点点头 点了点头 摇头 摇摇头 摇了摇头 "
        "皱眉 皱着眉 咬牙 咬着牙 回头 转身 抬头 低头 刚 刚刚 正 随口 冷笑 苦笑 微笑 大笑 狞笑 干笑"
    )
)
PREPOSITIONS = "对向朝冲跟"  # 何大清[对石头]说
# Titles used as names or before names (团长石头); longest first for matching.
TITLES = tuple(
    sorted(
        set(
            _words(
                "总长 团长 排长 连长 营长 班长 师长 旅长 军长 队长 组长 司令 总司令 副司令 参谋长 "
                "参谋 政委 指导员 教导员 长官 将军 元帅 少尉 中尉 上尉 少校 中校 上校 大佐 中佐 "
                "少佐 大尉 军曹 曹长 局长 处长 科长 部长 院长 校长 老师 先生 医生 大夫 掌柜 老板 "
                "师父 师傅 师兄 师姐 师弟 师妹 大人 少爷 小姐 夫人 公子 殿下 陛下 皇上 王爷 老爷 "
                "太太 宗主 长老 掌门 帮主 教主 族长 村长"
            )
        ),
        key=len,
        reverse=True,
    )
)
# Common single-character surnames, without those that are everyday function words
# (于, 向, 和, 时 …): a surname only makes a name together with the checks below.
SURNAMES = frozenset(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘蒋蔡余杜叶"
    "程苏魏吕丁任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺"
    "顾毛郝龚邵钱覃武戴莫孔汤温康施牛樊葛邢齐易乔伍庞颜倪庄聂章鲁岳翟殷詹欧耿兰焦俞左柳甘"
    "祝包宁符舒阮柯纪梅童凌毕季裴霍涂苗谷盛翁冉骆蓝游辛靳管柴蒙鲍喻祁蒲房滕屈饶艾尤穆卓"
)
COMPOUND_SURNAMES = _words(
    "欧阳 司马 诸葛 上官 慕容 东方 皇甫 令狐 南宫 独孤 公孙 长孙 宇文 司徒 夏侯 端木 西门"
)
# Characters that never occur in a name as the subject of a speech verb.
NOT_IN_NAMES = frozenset(
    "他她它我你您们谁这那哪某的了着地得是在说道问和与及就也都又还很被把将对向从给让有"
)
NOT_IN_QUALIFIERS = NOT_IN_NAMES | frozenset("几些每各众其")
# A jieba tag for the first word of a clause that means the clause has its own subject
# (pronoun, noun, numeral: 他们…, 众人…, 一名队员…) when it is not a name we recognise.
SUBJECT_TAGS = ("r", "n", "m")
# Dictionary words that start with a surname but are ordinary words above this frequency.
COMMON_WORD_FREQ = 1000

SENTENCE_END_RE = re.compile(r"[。！？!?…；;]+")
CLAUSE_RE = re.compile(r"([^，,、：:。！？!?…；;—\s]+)([，,、：:。！？!?…；;—\s]*)")
QUOTE_PARTS_RE = re.compile(r"[“”「」『』\"'，,！!。？?、：:；;…—\s]+")
SEPARATORS_RE = re.compile(r"[.．·・\s]")
CJK_RE = re.compile(r"^[\u4e00-\u9fff]+$")

# What may follow the verb: 说着, 说完 (only after the quote), 喊了一声.
AFTER_TAILS = ("", "着", "完", "了", "了一句", "了一声", "一句", "一声")
BEFORE_TAILS = ("", "着", "了一句", "了一声", "一句", "一声")
ORDER_RE = re.compile(r"^(.*)(?:下令|命令)[\u4e00-\u9fff]{0,2}$")


@dataclass(frozen=True)
class AttributionStats:
    """How many quotations a plan has, how many have a speaker, and by which rules."""

    quotes: int
    attributed: int
    by_rule: Mapping[str, int]


@dataclass(frozen=True)
class _Speaker:
    name: str  # the character's name when configured, else as written
    configured: bool
    suffix: str = ""  # "+title"/"+alias" when the text used a configured alias


@dataclass(frozen=True)
class _Finding:
    speaker: _Speaker
    rule: str


@dataclass(frozen=True)
class _Part:
    text: str
    quote: int | None  # key of the quotation, None for narration


@dataclass(frozen=True)
class _Paragraph:
    number: int
    scene: int
    parts: tuple[_Part, ...]

    @property
    def quote_only(self) -> bool:
        return all(part.quote is not None for part in self.parts)

    @property
    def quotes(self) -> tuple[int, ...]:
        return tuple(part.quote for part in self.parts if part.quote is not None)


def overrides_path(chapter_path: Path) -> Path:
    """``chapters/ch004.txt`` → ``chapters/ch004.speakers.toml``."""
    return chapter_path.with_name(chapter_path.stem + OVERRIDE_SUFFIX)


def load_overrides(path: Path) -> dict[str, str]:
    """Read a speaker override file (format in the module docstring); missing file → {}."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path.name}: cannot read ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path.name}: not valid TOML ({exc})") from None
    overrides: dict[str, str] = {}
    for key, value in raw.items():
        if not re.fullmatch(r"\d+\.\d+", key):
            raise ConfigError(
                f"{path.name}: '{key}' is not a segment id like \"17.2\" (see `audiobook plan`)"
            )
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(
                f'{path.name}: "{key}" must be a name, "dialogue" or "narrator", not {value!r}'
            )
        overrides[key] = value.strip()
    return overrides


def attribute_speakers(
    segments: tuple[Segment, ...],
    characters: tuple[Character, ...],
    overrides: Mapping[str, str] | None = None,
) -> tuple[Segment, ...]:
    """Set ``speaker``, ``speaker_rule`` and ``voice`` on every dialogue segment.

    Pauses depend on voices: run :func:`audiobook.text.segment.assign_pauses` afterwards.
    """
    names = _Names(characters)
    paragraphs = _paragraphs(segments)
    found = _attribute(paragraphs, names)
    found = _take_turns(paragraphs, found, names)
    voices = {quote: _voice(finding) for quote, finding in found.items()}
    voices.update(_apply_overrides(segments, overrides or {}, names))

    result = []
    for segment in segments:
        if segment.role != "dialogue":
            result.append(segment)
            continue
        speaker, rule, voice = voices.get(_quote_key(segment), (None, None, "dialogue"))
        result.append(replace(segment, speaker=speaker, speaker_rule=rule, voice=voice))
    return tuple(result)


def attribution_stats(segments: Iterable[Segment]) -> AttributionStats:
    """Quote and attribution counts of attributed segments, for notes and the plan header."""
    quotes: dict[int, Segment] = {}
    for segment in segments:
        if segment.role == "dialogue":
            quotes.setdefault(_quote_key(segment), segment)
    rules = Counter(s.speaker_rule for s in quotes.values() if s.speaker)
    return AttributionStats(
        quotes=len(quotes),
        attributed=sum(rules.values()),
        by_rule=dict(rules.most_common()),
    )


def _quote_key(segment: Segment) -> int:
    # A dialogue segment without a quote index (a hand-edited plan) is its own quote.
    return segment.quote if segment.quote is not None else -1 - segment.index


def _voice(finding: _Finding) -> tuple[str | None, str, str]:
    speaker = finding.speaker
    voice = speaker.name if speaker.configured else "dialogue"
    return speaker.name, finding.rule + speaker.suffix, voice


def _paragraphs(segments: tuple[Segment, ...]) -> list[_Paragraph]:
    paragraphs: list[_Paragraph] = []
    parts: list[_Part] = []
    current: Segment | None = None
    for segment in (*segments, None):
        if current is not None and (segment is None or segment.paragraph != current.paragraph):
            paragraphs.append(_Paragraph(current.paragraph, current.scene, tuple(parts)))
            parts = []
        if segment is None:
            break
        key = _quote_key(segment) if segment.role == "dialogue" else None
        if parts and parts[-1].quote == key:
            parts[-1] = _Part(parts[-1].text + segment.text, key)
        else:
            parts.append(_Part(segment.text, key))
        current = segment
    return paragraphs


def _attribute(paragraphs: list[_Paragraph], names: _Names) -> dict[int, _Finding]:
    """The cues around each quote; a quote whose cues disagree gets none."""
    candidates: dict[int, list[_Finding]] = {}
    previous: _Paragraph | None = None
    for paragraph in paragraphs:
        parts = paragraph.parts
        for i, part in enumerate(parts):
            if part.quote is None:
                continue
            found = candidates.setdefault(part.quote, [])
            before = parts[i - 1] if i > 0 else None
            after = parts[i + 1] if i + 1 < len(parts) else None
            if before is not None and before.quote is None:
                found += _some(names.before(before.text, between_quotes=i >= 2))
            elif i == 0 and previous is not None and _follows(previous, paragraph):
                # 何大清说道：⏎“……”: an introduction ending the previous paragraph.
                last = previous.parts[-1]
                if last.quote is None and last.text.rstrip().endswith(("：", ":")):
                    found += _some(names.before(last.text))
            if after is not None and after.quote is None:
                # Narration parts never touch, so a part after this narration is a quote.
                following = parts[i + 2].quote if i + 2 < len(parts) else None
                found += _some(names.after(after.text, following is not None))
                if following is not None and (finding := names.split(after.text)) is not None:
                    found.append(finding)
                    candidates.setdefault(following, []).append(finding)
        previous = paragraph

    quote_text = {
        part.quote: part.text for p in paragraphs for part in p.parts if part.quote is not None
    }
    result: dict[int, _Finding] = {}
    for quote, found in candidates.items():
        speakers = {f.speaker.name for f in found}
        if len(speakers) > 1:
            log.debug("quote %d: cues disagree (%s), no speaker", quote, ", ".join(speakers))
            continue
        if not found:
            continue
        if names.addresses(quote_text[quote], found[0].speaker):
            log.debug("quote %d addresses %s, so is not said by them", quote, speakers)
            continue
        result[quote] = found[0]
    return result


def _some(finding: _Finding | None) -> list[_Finding]:
    return [finding] if finding is not None else []


def _follows(previous: _Paragraph, paragraph: _Paragraph) -> bool:
    return previous.number + 1 == paragraph.number and previous.scene == paragraph.scene


def _take_turns(
    paragraphs: list[_Paragraph], found: dict[int, _Finding], names: _Names
) -> dict[int, _Finding]:
    """After A then B in adjacent paragraphs, quote-only paragraphs go A, B, A, …"""
    result = dict(found)
    quote_text = {
        part.quote: part.text for p in paragraphs for part in p.parts if part.quote is not None
    }

    def speaker_of(paragraph: _Paragraph) -> _Speaker | None:
        speakers = {result[q].speaker for q in paragraph.quotes if q in result}
        attributed = all(q in result for q in paragraph.quotes)
        return next(iter(speakers)) if len(speakers) == 1 and attributed else None

    for n in range(2, len(paragraphs)):
        first, second = paragraphs[n - 2], paragraphs[n - 1]
        if not (_follows(first, second) and first.quotes and second.quotes):
            continue
        a, b = speaker_of(first), speaker_of(second)
        if a is None or b is None or a.name == b.name:
            continue
        turn = (a, b)
        previous = second
        for paragraph in paragraphs[n:]:
            untouched = not any(q in result for q in paragraph.quotes)
            if not (_follows(previous, paragraph) and paragraph.quote_only and untouched):
                break
            speaker = turn[0]
            if any(names.addresses(quote_text[q], speaker) for q in paragraph.quotes):
                break  # “总长，……” is said to 总长: the exchange is not what we think
            for quote in paragraph.quotes:
                result[quote] = _Finding(replace(speaker, suffix=""), "turn-taking")
            turn = (turn[1], turn[0])
            previous = paragraph
    return result


def _apply_overrides(
    segments: tuple[Segment, ...], overrides: Mapping[str, str], names: _Names
) -> dict[int, tuple[str | None, str, str]]:
    by_id = {segment.id: segment for segment in segments}
    result: dict[int, tuple[str | None, str, str]] = {}
    chosen: dict[int, tuple[str, str]] = {}
    for segment_id, value in overrides.items():
        segment = by_id.get(segment_id)
        if segment is None:
            raise ConfigError(
                f"speaker override for segment {segment_id}: no such segment in this chapter "
                "(ids as `audiobook plan` shows them)"
            )
        if segment.role != "dialogue":
            raise ConfigError(
                f"speaker override for segment {segment_id}: it is narration; "
                "overrides apply to quoted speech only"
            )
        quote = _quote_key(segment)
        if quote in chosen and chosen[quote][1] != value:
            other = chosen[quote][0]
            raise ConfigError(
                f"speaker overrides for segments {other} and {segment_id} name different "
                "speakers for the same quote"
            )
        chosen[quote] = (segment_id, value)
        if value in RESET_VOICES:
            result[quote] = (None, "override", value)
            continue
        character = names.character(value)
        if character is not None:
            result[quote] = (character, "override", character)
        else:
            result[quote] = (value, "override", "dialogue")
    return result


class _Names:
    """Recognises who a piece of narration names: configured characters first, then heuristics."""

    def __init__(self, characters: tuple[Character, ...]) -> None:
        self._known: dict[str, _Speaker] = {}
        for character in characters:
            for alias in character.aliases:
                suffix = "+title" if alias.endswith(TITLES) else "+alias"
                self._known.setdefault(_norm(alias), _Speaker(character.name, True, suffix))
        for character in characters:  # a name beats someone else's alias
            self._known[_norm(character.name)] = _Speaker(character.name, True)

    def character(self, name: str) -> str | None:
        speaker = self._known.get(_norm(name))
        return speaker.name if speaker else None

    # Rules over narration around one quote.

    def before(self, narration: str, between_quotes: bool = False) -> _Finding | None:
        """The sentence right before a quote: ``老余看着他们，严肃地说道：``."""
        text = narration.rstrip()
        if between_quotes and SENTENCE_END_RE.search(text[-1:]):
            return None  # “……”王明说。“……”: the tag of the quote before, not this one
        sentence = SENTENCE_END_RE.split(text.rstrip("：:，,。 "))[-1]
        clauses = [c for c, _ in _clauses(sentence)]
        if not clauses:
            return None
        found = self._speech(clauses[-1], BEFORE_TAILS)
        if found is None and text.endswith(("：", ":")) and len(clauses) == 1:
            # 何大清：“……” — the whole introduction is a name (and maybe 低声).
            named = self._chunk(clauses[0])
            return replace(named, rule="name-colon") if isinstance(named, _Finding) else None
        return self._with_subject(found, clauses[:-1], "before-quote")

    def after(self, narration: str, next_is_quote: bool) -> _Finding | None:
        """The sentence right after a quote: ``何大清低声叮嘱道。``."""
        sentence = SENTENCE_END_RE.split(narration, maxsplit=1)[0]
        ends_narration = len(sentence) == len(narration.rstrip())
        clauses = _clauses(sentence)
        for i, (clause, mark) in enumerate(clauses):
            found = self._speech(clause, AFTER_TAILS)
            if found is None:
                continue
            introduces_next = any(ch in "：:" for ch in mark) or (
                next_is_quote and ends_narration and i == len(clauses) - 1 and not mark.strip()
            )
            if introduces_next:
                return None  # 石头接着说道：“……” belongs to the next quote
            earlier = [c for c, _ in clauses[:i]]
            if isinstance(found, _Finding) and not all(self._transparent(c) for c in earlier):
                return None  # 众人齐声喝彩，何大清也笑道。: someone else acted first
            return self._with_subject(found, earlier, "after-quote")
        return None

    def split(self, narration: str) -> _Finding | None:
        """Narration between two quotes of one speech: ``“……”何大清顿了顿，“……”``."""
        text = narration.strip()
        if not text.endswith(("，", ",")) or SENTENCE_END_RE.search(text):
            return None
        clauses = [c for c, _ in _clauses(text)]
        if not clauses or any(ch in "听闻" for ch in text):
            return None  # 何大清听完，…: a reaction to the first quote, not its speaker
        speaker = self._leading(clauses[0])
        if speaker is None or not all(self._transparent(c) for c in clauses[1:]):
            return None
        return _Finding(speaker, "split-quote")

    def addresses(self, quote: str, speaker: _Speaker) -> bool:
        """Whether a quote calls on ``speaker``: ``“总长，……”``, ``“是，总长！”``."""
        called = (self.subject(part) for part in QUOTE_PARTS_RE.split(quote) if len(part) <= 12)
        return any(c is not None and c.name == speaker.name for c in called)

    # Pieces.

    def _speech(self, clause: str, tails: tuple[str, ...]) -> _Finding | str | None:
        """A clause ending in a speech verb: its subject, "empty", "blocked"; None: no verb."""
        chunks = []
        for tail in tails:
            if not clause.endswith(tail):
                continue
            head = clause[: len(clause) - len(tail)]
            chunks += [head[: -len(verb)] for verb in SPEECH_VERBS if head.endswith(verb)]
        if tails is BEFORE_TAILS:  # 下令/命令 may take a short object: 果断下令行动
            chunks += [m[1] for m in [ORDER_RE.match(clause)] if m]
        if not chunks:
            return None
        # Shortest verb first: 欧阳锋冷笑|道 (not 欧阳锋冷|笑道).
        results = [self._chunk(chunk) for chunk in sorted(chunks, key=len, reverse=True)]
        findings = [r for r in results if isinstance(r, _Finding)]
        if findings:
            return findings[0]
        return "empty" if "empty" in results else "blocked"

    def _with_subject(
        self, found: _Finding | str | None, earlier: list[str], rule: str
    ) -> _Finding | None:
        """The speaker of a speech-verb clause; one without its own subject (严肃地说道)
        takes the subject of the nearest earlier clause that has one (老余看着他们)."""
        if isinstance(found, _Finding):
            return replace(found, rule="name-to-x" if found.rule == "to-x" else rule)
        if found != "empty":
            return None
        for clause in reversed(earlier):
            speaker = self._leading(clause)
            if speaker is not None:
                return _Finding(speaker, rule)
            if not self._transparent(clause):
                return None
        return None

    def _chunk(self, chunk: str) -> _Finding | str:
        """Subject + adverbials → a finding (rule "to-x" if 对X); "empty"; or "blocked"."""
        chunk = chunk.strip()
        for cut in self._cuts(chunk):
            rest = chunk[cut:]
            if not _adverbial(rest):
                continue
            speaker = self.subject(chunk[:cut])
            if speaker is not None:
                to_x = rest[:1] in tuple(PREPOSITIONS) or _has_preposition(rest)
                rule = "to-x" if to_x else ""
                return _Finding(speaker, rule)
        return "empty" if _adverbial(chunk) else "blocked"

    def _cuts(self, text: str, words_only: bool = False) -> list[int]:
        """Where a subject may end: word boundaries first (longest first), then the rest."""
        bounds = {n for n in range(1, len(text) + 1) if _norm(text[:n]) in self._known}
        position = 0
        for word in _lexicon().lcut(text):
            position += len(word)
            bounds.add(position)
        preferred = sorted((b for b in bounds if b <= 12), reverse=True)
        if words_only:
            return preferred
        others = range(min(len(text), 8), 1, -1)
        return preferred + [n for n in others if n not in bounds]

    def _leading(self, clause: str) -> _Speaker | None:
        """The name a clause starts with: ``何大清目光一凛`` → 何大清."""
        for cut in self._cuts(clause, words_only=True):
            speaker = self.subject(clause[:cut])
            if speaker is not None:
                return speaker
        return None

    def _transparent(self, clause: str) -> bool:
        """A clause without a subject of its own (看着他们, 果断下令): the subject carries over."""
        if self._leading(clause) is not None:
            return False
        if (
            any(clause.startswith(a) for a in ADVERBS)
            or self._speech(clause, BEFORE_TAILS) == "empty"
        ):
            return True
        words = _tagger().lcut(clause)
        return not words or not words[0].flag.startswith(SUBJECT_TAGS)

    def subject(self, text: str) -> _Speaker | None:
        """``text`` exactly names someone: a character, 团长石头, 一组组长, 唐司令, 何大清."""
        key = _norm(text)
        if not key or len(key) > 12:
            return None
        if key in self._known:
            return self._known[key]
        if not CJK_RE.match(key):
            return None
        for title in TITLES:  # 团长石头 → 石头
            at = key.rfind(title)
            name = key[at + len(title) :] if at >= 0 else ""
            if name and _qualifier(key[:at]):
                if name in self._known:
                    return self._known[name]
                if _name_after_title(name):
                    return _Speaker(name, False)
        for title in TITLES:  # 一组组长, 唐司令, 总长
            qualifier = key[: -len(title)]
            if key.endswith(title) and _qualifier(qualifier):
                # 何总长: surname + the title a configured 何大清 goes by.
                titled = self._known.get(title)
                if titled and len(qualifier) == 1 and titled.name.startswith(qualifier):
                    return titled
                return _Speaker(key, False)
        if _personal_name(key):
            return _Speaker(key, False)
        return None


@functools.cache
def _lexicon() -> jieba.Tokenizer:
    """jieba's default dictionary, loaded once (about a second) and only read."""
    # jieba logs its dictionary loading to stderr at DEBUG level.
    logging.getLogger("jieba").setLevel(logging.WARNING)
    jieba.dt.initialize()
    return jieba.dt


@functools.cache
def _tagger() -> jieba.posseg.POSTokenizer:
    _lexicon()
    return jieba.posseg.dt


def _norm(text: str) -> str:
    return SEPARATORS_RE.sub("", text)


def _clauses(text: str) -> list[tuple[str, str]]:
    """Clauses with the marks after each: ``老余看着他们，严肃地说道`` → two clauses."""
    return [(m[1], m[2]) for m in CLAUSE_RE.finditer(text)]


def _has_preposition(rest: str) -> bool:
    return any(
        rest.startswith(a) and len(rest) > len(a) and rest[len(a)] in PREPOSITIONS for a in ADVERBS
    )


@functools.cache
def _adverbial(text: str) -> bool:
    """Whether ``text`` is only adverbials between a speaker and a verb (may be empty)."""
    if not text:
        return True
    for word in (*ADVERBS, *SPEECH_VERBS):
        if text.startswith(word) and _adverbial(text[len(word) :]):
            return True
    for n in range(1, 5):  # 严肃地 / 严肃的, 咬牙切齿地, 笑着
        marker = text[n : n + 1]
        allowed = "地的" if n >= 2 else ""
        allowed += "着" if n <= 2 else ""
        if marker and marker in allowed and CJK_RE.match(text[:n]) and _adverbial(text[n + 1 :]):
            return True
    if text[0] in PREPOSITIONS:  # 对石头, 向众人
        for n in range(2, min(len(text), 8) + 1):
            if CJK_RE.match(text[1:n]) and _adverbial(text[n:]):
                return True
    return False


def _qualifier(text: str) -> bool:
    """What may precede a title: 一组, 特战团, 唐 — not 一名, 那个, 他们的."""
    if not text:
        return True
    if len(text) > 6 or not CJK_RE.match(text) or any(ch in NOT_IN_QUALIFIERS for ch in text):
        return False
    return not (text[0] == "一" and text[1:2] in "名个位群")


def _name_after_title(name: str) -> bool:
    """团长[石头], 排长[老余]: after a title, a name or a single noun (nicknames are nouns)."""
    if not 2 <= len(name) <= 3 or any(ch in NOT_IN_NAMES for ch in name):
        return False
    if any(word in name for word in (*ADVERBS, *SPEECH_VERBS, *TITLES)):
        return False
    if _personal_name(name):
        return True
    words = _tagger().lcut(name, HMM=False)
    return len(words) == 1 and words[0].flag in ("n", "nr", "nz", "j")


def _personal_name(key: str) -> bool:
    """何大清, 老余, 小李, 欧阳锋 — a surname and one or two more characters, not a word."""
    if any(ch in NOT_IN_NAMES for ch in key) or key in ADVERBS:
        return False
    if key.startswith(tuple(COMPOUND_SURNAMES)) and 3 <= len(key) <= 4:
        return True
    if len(key) == 2 and key[0] in "老小阿" and key[1] in SURNAMES:
        return True
    if not (2 <= len(key) <= 3 and key[0] in SURNAMES):
        return False
    rest = key[1:]
    if rest in ADVERBS or rest.startswith(SPEECH_VERBS) or rest.startswith(TITLES):
        return False
    if _lexicon().FREQ.get(key):  # a dictionary word: 王明 and 李娜 are, so are 高声 and 明白
        words = _tagger().lcut(key, HMM=False)
        freq = _lexicon().FREQ[key]
        return len(words) == 1 and words[0].flag.startswith("nr") and freq < COMMON_WORD_FREQ
    # Not a word: 何|大清 is a name, 石头|刚 is a word and an adverb.
    return _lexicon().lcut(key, HMM=False)[0] == key[0]
