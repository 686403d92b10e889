from __future__ import annotations

import json
from dataclasses import replace
from itertools import pairwise

import pytest

from audiobook.assemble.sidecars import (
    chapter_marks,
    chapters_json,
    short_title,
    srt,
    transcript_cues,
    webvtt,
)
from audiobook.models import ChapterMark, Cue
from tests.assemble.helpers import build_plan, parse_cues

RATE = 24000


@pytest.mark.parametrize(
    ("text", "title"),
    [
        # A short sentence stays whole, minus its full stop.
        ("这只是其中几个例子，屠杀仍在继续。被俘虏的军民。", "这只是其中几个例子，屠杀仍在继续"),
        # A long one is cut at its last clause mark within 30 characters.
        (
            "12月12日下午，唐生智下达撤退命令，但由于命令下达失误，导致约十万中国守军滞留江边。",
            "12月12日下午，唐生智下达撤退命令，但由于命令下达失误",
        ),
        # A very short first sentence takes the next along; ！ and ？ are kept.
        ("嗯。你说什么？我没听见。", "嗯。你说什么？我没听见"),
        # Quotation marks are dropped rather than left unbalanced.
        ("“快走！”他低声说。", "快走！他低声说"),
        ("……", ""),
        ("   ", ""),
        # No punctuation within reach: cut between words (not inside 偏僻), marked.
        (
            "老何大清带领特战团通过神秘的空间裂缝抵达南京城下关区一处偏僻的小巷，四周一片死寂。",
            "老何大清带领特战团通过神秘的空间裂缝抵达南京城下关区一处…",
        ),
    ],
)
def test_short_title(text: str, title: str) -> None:
    result = short_title(text)
    assert len(result) <= 30
    assert result == title


def test_one_mark_per_scene_from_the_first_sample_to_the_end() -> None:
    plan = build_plan()
    # Segment i's speech starts at i seconds and lasts 0.5 s.
    spans = [(i * RATE, i * RATE + RATE // 2) for i in range(len(plan.segments))]
    marks = chapter_marks(plan, spans, RATE, duration_ms=10_000)
    firsts = [next(s.index for s in plan.segments if s.scene == n) for n in range(3)]
    assert [m.start_ms for m in marks] == [0, firsts[1] * 1000, firsts[2] * 1000]
    assert [m.end_ms for m in marks] == [firsts[1] * 1000, firsts[2] * 1000, 10_000]
    assert [m.title for m in marks] == [
        "南京沦陷三天后，整座城市陷入了无尽的黑暗",
        "第二天清晨，雾气笼罩着江面，远处传来零星的枪声",
        "多年以后，他仍然记得那个寒冷的冬天",
    ]


def test_paragraph_marks() -> None:
    plan = build_plan()
    spans = [(i * RATE, i * RATE + RATE // 2) for i in range(len(plan.segments))]
    marks = chapter_marks(plan, spans, RATE, duration_ms=10_000, mode="paragraph")
    assert len(marks) == plan.paragraph_count == 5
    assert marks[1].title == "快走！他低声说"
    assert all(a.end_ms == b.start_ms for a, b in pairwise(marks))


def test_cues_are_sentences_across_pieces() -> None:
    plan = build_plan()
    # Split the first sentence into two pieces, as the planner does with long sentences.
    first = plan.segments[0]
    head, tail = first.text.split("，", 1)
    pieces = (replace(first, text=head + "，", piece=0), replace(first, text=tail, piece=1))
    segments = pieces + plan.segments[1:]
    plan = replace(plan, segments=segments)
    spans = [(i * RATE, i * RATE + RATE // 2) for i in range(len(segments))]
    cues = transcript_cues(plan, spans, RATE)
    assert cues[0] == Cue(0.0, 1.5, "南京沦陷三天后，整座城市陷入了无尽的黑暗。")
    assert len(cues) == len(segments) - 1
    assert cues[1] == Cue(2.0, 2.5, "街道上硝烟弥漫。")


def test_formats_parse_back() -> None:
    cues = [
        Cue(0.0, 1.25, "他说：<快走> & 别回头"),
        Cue(3661.5, 3663.042, "第二句。"),
    ]
    vtt = webvtt(cues)
    assert vtt.startswith("WEBVTT\n\n")
    assert "&lt;快走&gt; &amp; 别回头" in vtt
    assert [(a, b) for a, b, _ in parse_cues(vtt)] == [(0.0, 1.25), (3661.5, 3663.042)]
    parsed_srt = parse_cues(srt(cues))
    assert parsed_srt == [(0.0, 1.25, "他说：<快走> & 别回头"), (3661.5, 3663.042, "第二句。")]
    assert "01:01:01,500 --> 01:01:03,042" in srt(cues)

    marks = [ChapterMark(0, 1500, "开始"), ChapterMark(1500, 4000, "结束")]
    data = json.loads(chapters_json(marks))
    assert data == {
        "version": "1.2.0",
        "chapters": [
            {"startTime": 0.0, "endTime": 1.5, "title": "开始"},
            {"startTime": 1.5, "endTime": 4.0, "title": "结束"},
        ],
    }
