from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audiobook.engines.local.normalize import normalize_text, read_cardinal


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        # years are read digit by digit, dates and counts as numbers
        ("1937年", "一九三七年"),
        ("1938年3月6日", "一九三八年三月六日"),
        ("12月13日", "十二月十三日"),
        ("2月12日", "二月十二日"),
        ("1937-1945年", "一九三七到一九四五年"),
        # cardinals
        ("106人", "一百零六人"),
        ("10万", "十万"),
        ("100人", "一百人"),
        ("150人", "一百五十人"),
        ("10005人", "一万零五人"),
        ("110000人", "十一万人"),
        ("1,000,000人", "一百万人"),
        ("3尺", "三尺"),
        # 两 before quantifiers, 二 in dates and ordinals
        ("2个", "两个"),
        ("2万", "两万"),
        ("2000人", "两千人"),
        ("第2个", "第二个"),
        ("2号", "二号"),
        # ordinals
        ("第16师团", "第十六师团"),
        ("第9联队", "第九联队"),
        # scores and clock times
        ("106:105", "一百零六比一百零五"),
        ("106：105", "一百零六比一百零五"),
        ("8:30", "八点三十分"),
        ("12:05", "十二点零五分"),
        ("2:00", "两点"),
        ("晚上8点", "晚上八点"),
        # decimals, percentages, fractions, ranges
        ("3.5%", "百分之三点五"),
        ("20%", "百分之二十"),
        ("3.14", "三点一四"),
        ("0.5", "零点五"),
        ("1/3", "三分之一"),
        ("3-5人", "三到五人"),
        # units written in Latin letters or symbols
        ("5km", "五公里"),
        ("30℃", "三十摄氏度"),
        # full-width digits as typed by Chinese input methods
        ("１２３人", "一百二十三人"),
        ("２０２０年", "二零二零年"),
        # 〇 is written in years; read it as the ordinary zero
        ("二〇一八年", "二零一八年"),
        # ids and phone numbers are read digit by digit
        ("电话13800138000。", "电话一三八零零一三八零零零。"),
        ("007", "零零七"),
        ("1000000人", "一百万人"),
    ],
)
def test_numbers_are_read_as_a_narrator_would(text: str, spoken: str) -> None:
    assert normalize_text(text) == spoken


def test_latin_letters_become_speakable_letter_names() -> None:
    gps = normalize_text("GPS定位").split()
    assert gps == ["吉皮艾斯", "定位"]
    ak = normalize_text("AK47").split()
    assert ak == ["诶开", "四十七"]
    # lower case reads the same as upper case
    assert normalize_text("gps") == normalize_text("GPS")


def test_model_numbers_after_letters_are_read_digit_by_digit() -> None:
    assert normalize_text("F117").split() == ["艾弗", "一一七"]


def test_ascii_ellipsis_becomes_a_chinese_ellipsis() -> None:
    # ch000 writes an ellipsis as six ASCII dots inside a quotation
    assert normalize_text("来到医院求治......日本兵") == "来到医院求治……日本兵"


def test_urls_are_dropped_not_spelled() -> None:
    out = normalize_text("请大家收藏：(www.dibaquxiaoshuo.com)诸天")
    assert "www" not in out
    assert "诸天" in out
    assert not any(ch.isascii() and ch.isalpha() for ch in out)


def test_chinese_text_passes_through_unchanged() -> None:
    text = "“是，总长！”特战团团长石头轻声回应。一九三七年，两个人。"
    assert normalize_text(text) == text


def test_no_ascii_digits_or_letters_survive() -> None:
    text = "1937年12月13日8:30，第16师团106:105，3.5%的GPS和AK47，共1,000人，电话010-12345678"
    out = normalize_text(text)
    assert not any(ch.isascii() and ch.isalnum() for ch in out), out


@pytest.mark.parametrize(
    ("digits", "spoken"),
    [
        ("0", "零"),
        ("10", "十"),
        ("19", "十九"),
        ("20", "二十"),
        ("101", "一百零一"),
        ("1010", "一千零一十"),
        ("100000005", "一亿零五"),
        ("100010000", "一亿零一万"),
        ("20000", "两万"),
    ],
)
def test_cardinal_reading(digits: str, spoken: str) -> None:
    assert read_cardinal(digits) == spoken


def _is_subsequence(needle: list[str], haystack: str) -> bool:
    it = iter(haystack)
    return all(ch in it for ch in needle)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_unicode_text_normalizes_without_losing_chinese(text: str) -> None:
    out = normalize_text(text)
    # only ASCII is rewritten: every Chinese character survives, in order
    assert _is_subsequence([c for c in text if "\u4e00" <= c <= "\u9fff"], out)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789.:：%,-/~年月日号点个人第万ABCxyz ", max_size=40))
def test_number_heavy_text_leaves_no_ascii_digits(text: str) -> None:
    out = normalize_text(text)
    assert not any(ch in "0123456789" for ch in out), (text, out)
