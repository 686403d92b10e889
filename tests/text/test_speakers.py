from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audiobook.errors import ConfigError
from audiobook.models import Chapter, CleanedChapter, Segment, Voice
from audiobook.settings import Character, Settings
from audiobook.text.clean import clean_chapter
from audiobook.text.load import load_chapter
from audiobook.text.segment import build_plan
from audiobook.text.speakers import (
    attribute_speakers,
    attribution_stats,
    load_overrides,
    overrides_path,
)
from tests.conftest import CHAPTERS

SETTINGS = Settings()
CAST = (
    Character("何大清", ("总长",), Voice(edge_voice="zh-CN-YunjianNeural", pitch="-10Hz")),
    Character("石头", ("团长",), Voice(edge_voice="zh-CN-YunyangNeural", pitch="+0Hz")),
)


def _segments(path: Path) -> tuple[Segment, ...]:
    cleaned = clean_chapter(load_chapter(path), SETTINGS.cleanup)
    return build_plan(cleaned, SETTINGS.pauses, 60).segments


def _text(tmp_path: Path, *paragraphs: str) -> tuple[Segment, ...]:
    path = tmp_path / "ch001.txt"
    path.write_text("\n\n".join(paragraphs), encoding="utf-8")
    return _segments(path)


def _segments_of(paragraphs: list[str]) -> tuple[Segment, ...]:
    lines = tuple(paragraphs)
    chapter = Chapter(id="ch001", path=Path("ch001.txt"), encoding="utf-8", lines=lines)
    cleaned = CleanedChapter(chapter, tuple(enumerate(lines, start=1)), ())
    return build_plan(cleaned, SETTINGS.pauses, 60).segments


def _by_id(segments: tuple[Segment, ...]) -> dict[str, Segment]:
    return {s.id: s for s in segments}


def _who(segments: tuple[Segment, ...]) -> list[tuple[str | None, str]]:
    """(speaker, voice) of each quotation, in order."""
    seen: dict[int | None, tuple[str | None, str]] = {}
    for s in segments:
        if s.role == "dialogue":
            seen.setdefault(s.quote, (s.speaker, s.voice))
    return list(seen.values())


@pytest.fixture(scope="module")
def ch004() -> tuple[Segment, ...]:
    return _segments(CHAPTERS / "ch004.txt")


def test_ch004_tags_after_the_quote_name_the_speaker(ch004) -> None:
    segments = _by_id(attribute_speakers(ch004, ()))
    assert segments["15.1"].text.startswith("“都小心点")
    assert segments["15.1"].speaker == "何大清"
    assert segments["15.1"].speaker_rule == "after-quote"
    # 特战团.团长石头轻声回应: the name after the title, before the adverb and verb.
    assert segments["16.1"].text == "“是，总长！”"
    assert segments["16.1"].speaker == "石头"
    # Names nobody configured are shown but read with the dialogue voice.
    assert segments["15.1"].voice == segments["16.1"].voice == "dialogue"


def test_ch004_speaker_named_in_the_introducing_sentence(ch004) -> None:
    segments = attribute_speakers(ch004, CAST)
    quote = [s for s in segments if s.text.startswith("“我们不是国军") or s.id == "36.4"]
    assert [s.id for s in quote] == ["36.3", "36.4"]  # one quote over two segments
    assert {(s.speaker, s.speaker_rule) for s in quote} == {("老余", "before-quote")}
    assert {s.voice for s in quote} == {"dialogue"}  # 老余 is not in the cast


def test_ch004_configured_characters_get_their_own_voices(ch004) -> None:
    segments = _by_id(attribute_speakers(ch004, CAST))
    assert (segments["15.1"].speaker, segments["15.1"].voice) == ("何大清", "何大清")
    assert (segments["16.1"].speaker, segments["16.1"].voice) == ("石头", "石头")
    assert (segments["17.2"].speaker, segments["17.2"].voice) == (
        "石头",
        "石头",
    )  # 团长石头吩咐说着
    assert segments["21.2"].voice == "何大清"  # 何大清目光一凛，果断下令行动。“一组，……”
    assert SETTINGS.voice_for("dialogue") != CAST[0].voice != CAST[1].voice


def test_addressing_someone_is_not_speaking(ch004) -> None:
    # 总长 is 何大清's alias: “是，总长！” and “总长，小鬼子太过分了！” are said to him.
    segments = _by_id(attribute_speakers(ch004, CAST))
    assert segments["16.1"].speaker == "石头"
    assert segments["20.1"].text == "“总长，小鬼子太过分了！”"
    assert segments["20.1"].speaker is None  # 一名队员咬牙切齿地说道: nobody we can name
    assert segments["20.1"].voice == "dialogue"


def test_quotes_without_a_speaker_cue_keep_the_dialogue_voice(ch004) -> None:
    segments = _by_id(attribute_speakers(ch004, CAST))
    for segment_id in ("18.1", "18.2", "33.1"):  # no tag; 有人催促道
        assert segments[segment_id].role == "dialogue"
        assert (segments[segment_id].speaker, segments[segment_id].voice) == (None, "dialogue")


def test_narration_and_text_are_left_alone(ch004) -> None:
    attributed = attribute_speakers(ch004, CAST)
    assert [s.text for s in attributed] == [s.text for s in ch004]
    for before, after in zip(ch004, attributed, strict=True):
        if before.role == "narrator":
            assert after == before
            assert after.voice == "narrator"
    tag = _by_id(attributed)["15.2"]
    assert (tag.text, tag.role, tag.voice) == ("何大清低声叮嘱道。", "narrator", "narrator")


def test_every_segment_of_a_quote_has_the_same_speaker(ch004) -> None:
    for segments in (ch004, _segments(CHAPTERS / "ch000.txt")):
        quotes: dict[int | None, set[tuple[str | None, str | None, str]]] = {}
        for s in attribute_speakers(segments, CAST):
            if s.role == "dialogue":
                quotes.setdefault(s.quote, set()).add((s.speaker, s.speaker_rule, s.voice))
        assert quotes
        assert all(len(v) == 1 for v in quotes.values())


def test_ch004_counts(ch004) -> None:
    stats = attribution_stats(attribute_speakers(ch004, CAST))
    assert stats.quotes == 10
    assert stats.attributed == 7
    assert stats.by_rule == {"after-quote": 4, "before-quote": 3}


@pytest.mark.parametrize(
    ("open_mark", "close_mark"), [("“", "”"), ("「", "」"), ("『", "』"), ('"', '"')]
)
def test_every_kind_of_quotation_mark(tmp_path: Path, open_mark: str, close_mark: str) -> None:
    segments = _text(
        tmp_path,
        f"{open_mark}天黑了，快走吧。{close_mark}王小明笑着说。",
        f"李娜看了看四周，冷冷地问：{open_mark}你要去哪里？{close_mark}",
        f"{open_mark}哪里都行。{close_mark}",
    )
    assert _who(attribute_speakers(segments, ())) == [
        ("王小明", "dialogue"),
        ("李娜", "dialogue"),
        ("王小明", "dialogue"),  # quote-only reply in a two-person exchange
    ]


@pytest.mark.parametrize(
    ("paragraph", "speaker", "rule"),
    [
        ("何大清：“全体出发！”", "何大清", "name-colon"),
        ("何大清对石头说：“明天见。”", "何大清", "name-to-x"),
        ("“明天见。”石头对何大清低声说道。", "石头", "name-to-x"),
        ("“快走！”何大清顿了顿，“鬼子马上就到。”", "何大清", "split-quote"),
        ("“别动！”唐司令厉声喝道。", "唐司令", "after-quote"),
        ("“好久不见。”欧阳锋冷笑道。", "欧阳锋", "after-quote"),
        ("“注意脚步。”一组组长低声提醒道。", "一组组长", "after-quote"),
        ("“是，总长！”团长轻声回应。", "石头", "after-quote+title"),
        ("“走！”何总长说道。", "何大清", "after-quote+title"),
        ("“走！”王总长说道。", "王总长", "after-quote"),
        ("老王看了看四周，又道：“走。”", "老王", "before-quote"),
    ],
)
def test_rules(tmp_path: Path, paragraph: str, speaker: str, rule: str) -> None:
    segments = attribute_speakers(_text(tmp_path, paragraph), CAST)
    quotes = [s for s in segments if s.role == "dialogue"]
    assert quotes
    assert {(s.speaker, s.speaker_rule) for s in quotes} == {(speaker, rule)}


@pytest.mark.parametrize(
    "paragraph",
    [
        "“小心。”他低声说道。",  # a pronoun: we do not guess who
        "“开火！”一名士兵大喊道。",
        "何大清一挥手，众人大声喊道：“冲！”",  # someone else is the subject of the verb
        "“好！”众人齐声喝彩，何大清也笑道。",
        "“走。”何大清说的没错。",  # 说 is not a speech tag here
        "何大清知道：“走。”",  # 知道 is not 道
        "“石头！”石头喊道。",  # calling oneself by name: the cues contradict
        "石头说道：“走。”何大清笑道。",  # two cues that disagree
    ],
)
def test_no_speaker_rather_than_a_wrong_one(tmp_path: Path, paragraph: str) -> None:
    segments = attribute_speakers(_text(tmp_path, paragraph), CAST)
    assert {(s.speaker, s.voice) for s in segments if s.role == "dialogue"} == {(None, "dialogue")}


def test_turn_taking_stops_when_a_quote_addresses_the_expected_speaker(tmp_path: Path) -> None:
    exchange = ("“你是谁？”何大清问道。", "“我是石头。”石头回答道。", "“你从哪里来？”")
    assert _who(attribute_speakers(_text(tmp_path, *exchange, "“北边。”"), CAST)) == [
        ("何大清", "何大清"),
        ("石头", "石头"),
        ("何大清", "何大清"),
        ("石头", "石头"),
    ]
    # Turn-taking would give 何大清 next, but “总长，……” is said to him.
    speakers = _who(attribute_speakers(_text(tmp_path, *exchange[:2], "“总长，北边。”"), CAST))
    assert speakers[-1] == (None, "dialogue")
    # Narration between the turns ends the exchange.
    broken = _text(tmp_path, *exchange[:2], "天黑了。", "“你从哪里来？”")
    assert _who(attribute_speakers(broken, CAST))[-1] == (None, "dialogue")


def test_override_file_changes_one_attribution(tmp_path: Path, ch004) -> None:
    chapter = tmp_path / "ch004.txt"
    shutil.copy(CHAPTERS / "ch004.txt", chapter)
    assert overrides_path(chapter) == tmp_path / "ch004.speakers.toml"
    assert load_overrides(overrides_path(chapter)) == {}  # no file: nothing overridden

    overrides_path(chapter).write_text('"18.2" = "石头"\n', encoding="utf-8")
    segments = _segments(chapter)
    plain = attribute_speakers(segments, CAST)
    fixed = attribute_speakers(segments, CAST, load_overrides(overrides_path(chapter)))
    changed = [
        (a.id, b.speaker, b.voice, b.speaker_rule)
        for a, b in zip(plain, fixed, strict=True)
        if a != b
    ]
    # The whole quote (18.1 and 18.2) changes, nothing else.
    assert changed == [("18.1", "石头", "石头", "override"), ("18.2", "石头", "石头", "override")]


def test_override_values_reset_or_name_an_unconfigured_speaker(ch004) -> None:
    overrides = {"15.1": "dialogue", "16.1": "narrator", "33.1": "二组组长", "20.1": "总长"}
    segments = _by_id(attribute_speakers(ch004, CAST, overrides))
    assert (segments["15.1"].speaker, segments["15.1"].voice) == (None, "dialogue")
    assert (segments["16.1"].speaker, segments["16.1"].voice) == (None, "narrator")
    assert (segments["33.1"].speaker, segments["33.1"].voice) == ("二组组长", "dialogue")
    assert (segments["20.1"].speaker, segments["20.1"].voice) == ("何大清", "何大清")  # alias
    assert {s.speaker_rule for s in segments.values() if s.id in overrides} == {"override"}


def test_override_errors_name_the_problem(tmp_path: Path, ch004) -> None:
    with pytest.raises(ConfigError, match=r"segment 99\.1"):
        attribute_speakers(ch004, CAST, {"99.1": "何大清"})
    with pytest.raises(ConfigError, match=r"15\.2.*narration"):
        attribute_speakers(ch004, CAST, {"15.2": "何大清"})
    with pytest.raises(ConfigError, match=r"18\.1 and 18\.2"):
        attribute_speakers(ch004, CAST, {"18.1": "何大清", "18.2": "石头"})

    path = tmp_path / "ch004.speakers.toml"
    path.write_text('"第18段" = "石头"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"ch004\.speakers\.toml: '第18段' is not a segment id"):
        load_overrides(path)
    path.write_text('"18.1" = ""\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r'"18\.1" must be a name'):
        load_overrides(path)
    path.write_text('"18.1" = 石头\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_overrides(path)


FRAGMENTS = st.sampled_from(
    [
        "“走吧。”",
        "「小心！」",
        "“总长，鬼子来了！”",
        "何大清",
        "石头",
        "总长",
        "王小明",
        "他",
        "众人",
        "一名队员",
        "低声",
        "严肃地",
        "对石头",
        "说道",
        "问",
        "笑道",
        "看了看四周",
        "点点头",
        "，",
        "。",
        "：",
    ]
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(FRAGMENTS, min_size=1, max_size=8).map("".join), min_size=1, max_size=4))
def test_any_text_keeps_its_words_and_names_only_speakers_it_mentions(paragraphs) -> None:
    segments = _segments_of(paragraphs)
    attributed = attribute_speakers(segments, CAST)
    assert [(s.text, s.role) for s in attributed] == [(s.text, s.role) for s in segments]
    by_quote: dict[int | None, set[str | None]] = {}
    for s in attributed:
        if s.role == "narrator":
            assert s.voice == "narrator" and s.speaker is None
            continue
        by_quote.setdefault(s.quote, set()).add(s.speaker)
        assert s.voice in ("dialogue", s.speaker)
        if s.speaker and s.speaker_rule != "turn-taking":
            # Whoever speaks is named (or titled) in the narration of this or the last paragraph.
            nearby = "".join(
                n.text
                for n in attributed
                if n.role == "narrator" and s.paragraph - 1 <= n.paragraph <= s.paragraph
            )
            names = {s.speaker} | {a for c in CAST if c.name == s.speaker for a in c.aliases}
            assert any(name in nearby for name in names)
    assert all(len(speakers) == 1 for speakers in by_quote.values())
