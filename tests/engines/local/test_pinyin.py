from __future__ import annotations

import pytest

from audiobook.engines.local.pinyin import ERHUA, PinyinConverter, third_tone_sandhi


@pytest.fixture(scope="module")
def converter() -> PinyinConverter:
    return PinyinConverter()


def read(converter: PinyinConverter, sentence: str, word: str) -> list[str]:
    """Syllables spoken for ``word`` where it first occurs inside ``sentence``."""
    chars = [c for w in converter.words(sentence) for c in w.text]
    syllables = [s for w in converter.words(sentence) for s in w.pinyin]
    start = "".join(chars).index(word)
    return syllables[start : start + len(word)]


@pytest.mark.parametrize(
    ("sentence", "word", "expected"),
    [
        ("特战团团长石头轻声回应", "团长", "tuan2 zhang3"),
        ("是总长的命令", "总长", "zong3 zhang3"),
        ("他们渡长江而去", "长江", "chang2 jiang1"),
        ("诸天从长津湖开始", "长津湖", "chang2 jin1 hu2"),
        ("这是重点", "重点", "zhong4 dian3"),
        ("我们重新开始", "重新", "chong2 xin1"),
        ("他还是来了", "还是", "hai2 shi4"),
        ("把枪还给他", "还给", "huan2 gei3"),
        ("各营连排保持畅通行动", "行动", "xing2 dong4"),
        ("他去银行取钱", "银行", "yin2 hang2"),
        ("我了解情况", "了解", "liao3 jie3"),
        ("终于得到了消息", "得到", "de2 dao4"),
        ("我觉得不对", "觉得", "jue2 de5"),
        ("我们不得不撤退", "不得不", "bu4 de2 bu4"),
        ("为了减轻负重", "为了", "wei4 le5"),
        ("以连排作为作战单位", "作为", "zuo4 wei2"),
        ("他朝着城门跑去", "朝着", "chao2 zhe5"),
        ("那个朝代很长", "朝代", "chao2 dai4"),
        ("警方调查此事", "调查", "diao4 cha2"),
        ("这的确是真的", "的确", "di2 que4"),
        # particles after verbs and adjectives
        ("街市变得死寂", "变得", "bian4 de5"),
        ("被一记重拳打得头晕目眩", "得", "de5"),
        ("他迅速地离开了现场", "地", "de5"),
        ("鲜血染红了大地", "大地", "da4 di4"),
        ("局势演变为大溃逃", "为", "wei2"),
        ("准备为战友提供火力支援", "为", "wei4"),
        ("此时他们的成绩为一百零六比一百零五", "为", "wei2"),
        ("为一个人牺牲", "为", "wei4"),
        ("一组组长低声提醒道", "组长", "zu3 zhang3"),
        ("上万名士兵争夺两三只渡船", "只", "zhi1"),
        ("这只是其中几个例子", "只", "zhi3"),
        ("以免被误认为军人", "误认为", "wu4 ren4 wei2"),
    ],
)
def test_polyphones_are_read_in_context(
    converter: PinyinConverter, sentence: str, word: str, expected: str
) -> None:
    assert read(converter, sentence, word) == expected.split()


@pytest.mark.parametrize(
    ("sentence", "word", "expected"),
    [
        ("一个人", "一个", "yi2 ge4"),  # before 4th tone
        ("过了一天", "一天", "yi4 tian1"),  # before 1st tone
        ("一起走", "一起", "yi4 qi3"),
        ("他是第一", "第一", "di4 yi1"),  # ordinal keeps 1st tone
        ("十一月", "十一", "shi2 yi1"),
        ("一九三七年", "一九三七", "yi1 jiu3 san1 qi1"),  # digits read one by one
        ("天下统一", "统一", "tong3 yi1"),
        ("你看一看", "看一看", "kan4 yi5 kan4"),
        ("一点一点地靠近", "一点一点", "yi4 dian3 yi4 dian3"),
        ("我不是国军", "不是", "bu2 shi4"),  # before 4th tone
        ("这不好", "不好", "bu4 hao3"),
        ("好不好", "好不好", "hao3 bu5 hao3"),
    ],
)
def test_yi_and_bu_tone_sandhi(
    converter: PinyinConverter, sentence: str, word: str, expected: str
) -> None:
    assert read(converter, sentence, word) == expected.split()


@pytest.mark.parametrize(
    ("sentence", "word", "expected"),
    [
        ("他的书", "的", "de5"),
        ("他来了", "了", "le5"),
        ("看着我", "着", "zhe5"),
        ("是你吗", "吗", "ma5"),
        ("你呢", "呢", "ne5"),
        ("我们走吧", "们", "men5"),
    ],
)
def test_particles_have_the_neutral_tone(
    converter: PinyinConverter, sentence: str, word: str, expected: str
) -> None:
    assert read(converter, sentence, word) == expected.split()


def test_third_tone_sandhi_changes_all_but_the_last_third_tone() -> None:
    assert third_tone_sandhi(["ni3", "hao3"]) == ["ni2", "hao3"]
    assert third_tone_sandhi(["zhan3", "lan3", "guan3"]) == ["zhan2", "lan2", "guan3"]
    # a neutral or other tone in between breaks the chain
    assert third_tone_sandhi(["jie3", "jie5"]) == ["jie3", "jie5"]
    assert third_tone_sandhi(["hao3", "bu5", "hao3"]) == ["hao3", "bu5", "hao3"]


def test_erhua_merges_but_a_real_er_syllable_stays(converter: PinyinConverter) -> None:
    assert read(converter, "你去哪儿了", "哪儿") == ["na3", ERHUA]
    assert read(converter, "等一会儿", "会儿") == ["hui4", ERHUA]
    assert read(converter, "他的女儿", "女儿") == ["nv3", "er2"]
    assert read(converter, "儿子回来了", "儿子")[0] == "er2"


def test_every_character_gets_exactly_one_syllable(converter: PinyinConverter) -> None:
    text = "南京沦陷三天后整座城市陷入了无尽的黑暗与恐怖之中哪儿一会儿"
    words = converter.words(text)
    assert "".join(w.text for w in words) == text
    assert all(len(w.text) == len(w.pinyin) for w in words)
