from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from audiobook.models import CleanedChapter
from audiobook.settings import Cleanup, Pauses
from audiobook.text.clean import clean_chapter
from audiobook.text.load import load_chapter
from audiobook.text.segment import build_plan, is_scene_break, split_long, split_paragraph
from tests.conftest import CHAPTERS

PAUSES = Pauses()


def _plan(name: str, max_chars: int = 60):
    cleaned = clean_chapter(load_chapter(CHAPTERS / f"{name}.txt"), Cleanup())
    return cleaned, build_plan(cleaned, PAUSES, max_chars)


def _chars(texts) -> str:
    return "".join(ch for text in texts for ch in text if not ch.isspace())


def _assert_no_text_lost(cleaned: CleanedChapter, plan) -> None:
    spoken = [text for _, text in cleaned.lines if not is_scene_break(text)]
    assert _chars(s.text for s in plan.segments) == _chars(spoken)


def test_ch004_has_three_scenes_starting_where_the_breaks_are() -> None:
    cleaned, plan = _plan("ch004")
    assert plan.scene_count == 3
    firsts = [next(s for s in plan.segments if s.scene == n) for n in range(3)]
    assert firsts[0].text.startswith("12月12日下午，唐生智下达撤退命令")
    assert firsts[1].text.startswith("何大清带领特战团通过神秘的空间裂缝抵达南京城下关区")
    assert firsts[2].text.startswith("在紧张的侦查过程中，一个令人愤慨的场景映入眼帘。")
    assert firsts[2].text.endswith("映入眼帘。")  # a sentence, not the whole paragraph
    _assert_no_text_lost(cleaned, plan)


def test_scene_break_gets_the_scene_pause_and_paragraphs_the_paragraph_pause() -> None:
    _, plan = _plan("ch004")
    for current, following in zip(plan.segments, plan.segments[1:], strict=False):
        turn = PAUSES.turn_ms if following.voice != current.voice else 0
        if following.scene != current.scene:
            assert current.pause_ms == PAUSES.scene_ms + turn
        elif following.paragraph != current.paragraph:
            assert current.pause_ms == PAUSES.paragraph_ms + turn
        elif following.sentence != current.sentence:
            assert current.pause_ms == PAUSES.sentence_ms + turn
    assert plan.segments[-1].pause_ms == 0


def test_ch000_plan_keeps_all_text_but_the_advertisement() -> None:
    cleaned, plan = _plan("ch000")
    assert plan.scene_count == 1
    assert len(plan.removed) == 1
    assert not any("dibaquxiaoshuo" in s.text for s in plan.segments)
    _assert_no_text_lost(cleaned, plan)


def test_inline_ellipsis_is_not_a_scene_break() -> None:
    assert is_scene_break("………………")
    assert is_scene_break("***")
    assert is_scene_break("——————")
    assert is_scene_break("◆ ◆ ◆")
    assert not is_scene_break("运动战……")
    assert not is_scene_break("……")
    _, plan = _plan("ch004")
    segment = next(s for s in plan.segments if "运动战……" in s.text)
    assert segment.scene == 1


def test_sentences_split_at_end_marks_and_keep_ellipses_and_dashes() -> None:
    pieces = split_paragraph("他愣了一下……然后——跑了。你呢？我不知道！好；走吧")
    assert [p.text for p in pieces] == [
        "他愣了一下……然后——跑了。",
        "你呢？",
        "我不知道！",
        "好；",
        "走吧",
    ]
    assert all(p.role == "narrator" for p in pieces)


def test_quotes_stay_with_their_sentences_and_are_dialogue() -> None:
    pieces = split_paragraph("“都小心点，这里情况不明，随时可能遭遇敌人。”何大清低声叮嘱道。")
    assert [(p.text, p.role, p.ends_sentence) for p in pieces] == [
        ("“都小心点，这里情况不明，随时可能遭遇敌人。”", "dialogue", True),
        ("何大清低声叮嘱道。", "narrator", True),
    ]
    pieces = split_paragraph(
        "老余看着他们，严肃地说道：“我们不是国军，但我们是中国人。现在马上走。”"
    )
    assert [(p.text, p.role) for p in pieces] == [
        ("老余看着他们，严肃地说道：", "narrator"),
        ("“我们不是国军，但我们是中国人。", "dialogue"),
        ("现在马上走。”", "dialogue"),
    ]
    assert pieces[1].quote == pieces[2].quote is not None


def test_other_quote_styles_are_dialogue() -> None:
    for opening, closing in ("「」", "『』", '""'):
        pieces = split_paragraph(f"他说：{opening}走吧，天黑了。{closing}大家都站了起来。")
        assert [p.role for p in pieces] == ["narrator", "dialogue", "narrator"]
        assert pieces[1].text == f"{opening}走吧，天黑了。{closing}"


def test_short_quoted_terms_stay_in_the_narration() -> None:
    pieces = split_paragraph("城陷之前，曾组织“杀人比赛”。就被利刃刺穿胸膛，“噗”的一声。")
    assert [p.role for p in pieces] == ["narrator", "narrator"]
    assert pieces[0].text == "城陷之前，曾组织“杀人比赛”。"


def test_unclosed_quote_runs_to_the_end_of_the_paragraph() -> None:
    pieces = split_paragraph("“第一段话还没完，下一段才结束。")
    assert [(p.text, p.role) for p in pieces] == [("“第一段话还没完，下一段才结束。", "dialogue")]


def test_long_sentences_split_at_clause_marks_into_even_parts() -> None:
    text = "这是第一个分句，" * 12 + "最后一句。"
    parts = split_long(text, 30)
    assert "".join(parts) == text
    assert all(len(part) <= 30 for part in parts)
    assert all(part.endswith(("，", "。")) for part in parts)
    assert min(map(len, parts)) >= 16  # no tiny leftover at the end


def test_numbers_are_never_split_at_their_colon_or_comma() -> None:
    text = "此时他们的成绩为106:105，时间是8:30，" * 2
    for part in split_long(text, 16):
        assert not part.startswith(("105", "30"))
        assert not part.endswith(("106:", "8:"))


def test_long_sentences_without_clause_marks_are_still_split() -> None:
    parts = split_long("长" * 100, 30)
    assert "".join(parts) == "长" * 100
    assert all(len(part) <= 30 for part in parts)


def test_title_line_is_recognized(tmp_path: Path) -> None:
    path = tmp_path / "ch004.txt"
    path.write_text("第4章 南京\n正文第一句。\n", encoding="utf-8")
    plan = build_plan(clean_chapter(load_chapter(path), Cleanup()), PAUSES, 60)
    assert plan.title == "第4章 南京"
    assert plan.segments[0].text == "第4章 南京"


def test_plan_round_trips_through_a_dict() -> None:
    from audiobook.models import ChapterPlan

    _, plan = _plan("ch004")
    assert ChapterPlan.from_dict(plan.to_dict()) == plan


# Chinese text with the punctuation that trips up splitters: quotes of every
# style, ellipses, dashes, runs of end marks, clause marks, and scene-break lines.
_text_chars = st.sampled_from(
    list("我们不是国军但的一二三人天地")
    + list("，。！？；、：…—“”「」『』\"'!?;,.*～ ")
    + ["……", "——"]
)
_lines = st.one_of(
    st.lists(_text_chars, min_size=1, max_size=80).map("".join),
    st.sampled_from(["………………", "***", "——————", "◆◆◆"]),
)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(_lines, min_size=1, max_size=12), max_chars=st.integers(5, 80))
def test_no_text_is_lost_for_any_chinese_text(
    tmp_path_factory, lines: list[str], max_chars: int
) -> None:
    path = tmp_path_factory.mktemp("prop") / "ch001.txt"
    path.write_text("\n".join(lines) + "\n正文。", encoding="utf-8")
    cleaned = clean_chapter(load_chapter(path), Cleanup(default_rules=False))
    plan = build_plan(cleaned, PAUSES, max_chars)
    _assert_no_text_lost(cleaned, plan)
    assert all(len(s.text) <= max_chars for s in plan.segments)
    assert all(s.text == s.text.strip() and s.text for s in plan.segments)
    assert [s.index for s in plan.segments] == list(range(len(plan.segments)))
