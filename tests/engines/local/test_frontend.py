from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audiobook.engines.local.frontend import Frontend
from audiobook.engines.local.pinyin import has_reading
from audiobook.errors import ModelError

ROOT = Path(__file__).resolve().parents[3]
CH004 = ROOT / "chapters" / "ch004.txt"


@pytest.fixture(scope="module")
def mapper_path() -> Path:
    from audiobook.engines.local.model import MAPPER, default_model_dir

    # Tests never download: the phone table ships with the installed voice model.
    path = default_model_dir() / MAPPER
    if not path.is_file():
        pytest.skip("local voice model not installed; run: audiobook voices install local")
    return path


@pytest.fixture(scope="module")
def frontend(mapper_path: Path) -> Frontend:
    return Frontend.load(mapper_path)


@pytest.fixture(scope="module")
def symbols(mapper_path: Path) -> dict[str, int]:
    return json.loads(mapper_path.read_text(encoding="utf-8"))["symbol_to_id"]


def syllables(phones: list[str]) -> list[str]:
    """Pair each initial with its final: ['n i2', 'h ao3', ...]."""
    body = [p for p in phones if p not in ("sil", "eos") and not p.startswith("#")]
    return [f"{body[i]} {body[i + 1]}" for i in range(0, len(body) - 1, 2)]


def test_sequence_has_the_shape_the_model_was_trained_on(frontend: Frontend) -> None:
    phones = frontend.text_to_phones("你好，世界。")
    assert phones == [
        "sil",
        "n",
        "i2",
        "#0",
        "h",
        "ao3",
        "#3",
        "sh",
        "iii4",
        "#0",
        "j",
        "ie4",
        "sil",
        "eos",
    ]


def test_ids_are_the_mapper_ids_of_the_phones(frontend: Frontend, symbols: dict[str, int]) -> None:
    text = "团长石头吩咐说着：“各营，以连排作为作战单位！”"
    phones = frontend.text_to_phones(text)
    assert frontend.text_to_ids(text) == [symbols[p] for p in phones]


def test_punctuation_becomes_a_pause_never_a_phone(frontend: Frontend) -> None:
    phones = frontend.text_to_phones("街道上，硝烟弥漫；废墟随处可见、房屋被炸毁：门窗破碎！")
    assert phones.count("#3") == 4
    assert not [p for p in phones if not p.isascii()]
    # a run of punctuation gives one break, not several
    assert "#3" not in "".join(frontend.text_to_phones("好……！？")[1:-2])


def test_quotes_mark_a_phrase_without_a_pause(frontend: Frontend) -> None:
    phones = frontend.text_to_phones("曾组织“杀人比赛”")
    assert "#2" in phones
    assert "#3" not in phones


def test_words_are_joined_inside_and_separated_between(frontend: Frontend) -> None:
    phones = frontend.text_to_phones("特战团成员们迅速进入战斗状态")
    breaks = [p for p in phones if p.startswith("#")]
    assert "#0" in breaks
    assert "#1" in breaks or "#2" in breaks


def test_long_stretch_without_punctuation_gets_a_breath(frontend: Frontend) -> None:
    text = "何大清带领特战团通过神秘的空间裂缝抵达南京城下关区一处偏僻的废弃工厂附近"
    phones = frontend.text_to_phones(text)
    assert "#3" in phones
    assert "#2" in phones


def test_sandhi_and_erhua_reach_the_phones(frontend: Frontend) -> None:
    assert syllables(frontend.text_to_phones("你好"))[0] == "n i2"
    assert syllables(frontend.text_to_phones("一个人"))[0] == "^ i2"
    assert syllables(frontend.text_to_phones("不是"))[0] == "b u2"
    phones = frontend.text_to_phones("你去哪儿了")
    assert phones[phones.index("a3") + 1] == "er5"  # na3 + er5, no separate ^ er
    assert "^" not in phones[phones.index("a3") :]


def test_numbers_and_letters_are_spoken(frontend: Frontend) -> None:
    assert frontend.text_to_phones("1937年") == frontend.text_to_phones("一九三七年")
    assert frontend.text_to_phones("106:105") == frontend.text_to_phones("一百零六比一百零五")
    assert len(syllables(frontend.text_to_phones("GPS"))) == 4  # 吉皮艾斯


@pytest.mark.parametrize("text", ["", "   ", "！？……", "………………", "😀🎉", "\x00\ufeff", "ⓐ"])
def test_nothing_speakable_gives_the_minimal_sequence(frontend: Frontend, text: str) -> None:
    assert frontend.text_to_phones(text) == ["sil", "eos"]


def test_unreadable_characters_are_skipped(frontend: Frontend) -> None:
    assert syllables(frontend.text_to_phones("你好😀世界")) == syllables(
        frontend.text_to_phones("你好世界")
    )


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=60))
def test_any_text_gives_a_valid_sequence(
    frontend: Frontend, symbols: dict[str, int], text: str
) -> None:
    phones = frontend.text_to_phones(text)
    assert phones[0] == "sil"
    assert phones[-2:] == ["sil", "eos"] or phones == ["sil", "eos"]
    assert all(p in symbols for p in phones)
    # breaks only ever sit between syllables
    for before, after in itertools.pairwise(phones):
        assert not (before.startswith("#") and (after.startswith("#") or after == "sil"))


@settings(max_examples=100, deadline=None)
@given(
    text=st.text(
        alphabet=st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF).filter(has_reading),
        max_size=30,
    )
)
def test_every_chinese_character_is_spoken(frontend: Frontend, text: str) -> None:
    spoken = len(syllables(frontend.text_to_phones(text)))
    # only an erhua 儿 merges into the syllable before it
    assert len(text) - text.count("儿") <= spoken <= len(text)


def test_chapter_is_fast_and_deterministic(frontend: Frontend, mapper_path: Path) -> None:
    text = CH004.read_text(encoding="utf-8")
    frontend.text_to_ids("预热")
    start = time.perf_counter()
    ids = frontend.text_to_ids(text)
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0, f"frontend took {elapsed:.2f}s for ch004"
    # every line with Chinese in it contributes speech: roughly one syllable per character
    hanzi = sum("\u4e00" <= c <= "\u9fff" for c in text)
    assert 0.95 * hanzi <= len(syllables(frontend.text_to_phones(text))) <= 1.05 * hanzi
    assert Frontend.load(mapper_path).text_to_ids(text) == ids


def test_jieba_stays_quiet(mapper_path: Path) -> None:
    code = (
        "from pathlib import Path; from audiobook.engines.local.frontend import Frontend; "
        f"Frontend.load(Path({str(mapper_path)!r})).text_to_ids('你好世界')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert result.stderr == ""
    assert result.stdout == ""


def test_broken_mapper_is_a_model_error(tmp_path: Path) -> None:
    bad = tmp_path / "baker_mapper.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ModelError, match="voices install local"):
        Frontend.load(bad)
    with pytest.raises(ModelError):
        Frontend.load(tmp_path / "missing.json")
