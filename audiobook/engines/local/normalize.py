"""Rewrite digits, symbols and Latin letters as the Chinese words a narrator would say.

The acoustic model only knows Mandarin syllables, so everything else in a chapter
has to become Chinese characters before the pinyin stage: ``1937年`` is read digit
by digit, ``106人`` as a cardinal, ``8:30`` as a clock time, ``GPS`` letter by
letter.  The rules are ordered from the most specific pattern to the most generic
one; every rule only rewrites ASCII digits/letters/symbols, so Chinese text passes
through untouched and no input can make the normalizer fail.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_DIGIT_CHARS = "零一二三四五六七八九"
_SMALL_UNITS = ("千", "百", "十", "")
# Each 4-digit group's unit, from the lowest group upwards.
_GROUP_UNITS = ("", "万", "亿", "万亿")
_MAX_CARDINAL_DIGITS = 16

# Full-width forms (common in Chinese web text) of the characters the rules look for.
_FULLWIDTH = str.maketrans(
    {
        **{chr(0xFF10 + i): str(i) for i in range(10)},
        **{chr(0xFF21 + i): chr(ord("A") + i) for i in range(26)},
        **{chr(0xFF41 + i): chr(ord("a") + i) for i in range(26)},
        "％": "%",
        "．": ".",
        "＋": "+",
        "＝": "=",
        "／": "/",
        "～": "~",
        "〇": "零",
    }
)

# Quantifiers after which a lone 2 is read 两 (两个, 两天) rather than 二 (二月, 二号).
_LIANG_CLASSIFIERS = frozenset(
    "个人位名只头匹条件把张本辆架艘门颗枚发层天年岁次回遍趟种样位支挺队组排连营团师旅"
    "军批块片根句声步分秒点刻周斤公米里尺寸丈亩吨升杯瓶碗盒包双对套台部间所座家千万亿"
)

# Mandarin approximations of English letter names, as spoken in mainland China.
_LETTER_NAMES = {
    "A": "诶",
    "B": "比",
    "C": "西",
    "D": "迪",
    "E": "伊",
    "F": "艾弗",
    "G": "吉",
    "H": "艾尺",
    "I": "艾",
    "J": "杰",
    "K": "开",
    "L": "艾乐",
    "M": "艾姆",
    "N": "恩",
    "O": "欧",
    "P": "皮",
    "Q": "丘",
    "R": "阿",
    "S": "艾斯",
    "T": "踢",
    "U": "优",
    "V": "维",
    "W": "达布溜",
    "X": "艾克斯",
    "Y": "歪",
    "Z": "兹",
}

_UNITS_AFTER_NUMBER = {
    "km": "公里",
    "kg": "公斤",
    "cm": "厘米",
    "mm": "毫米",
    "ml": "毫升",
    "m": "米",
    "g": "克",
    "℃": "摄氏度",
    "°C": "摄氏度",
    "°": "度",
}


def read_digits(digits: str) -> str:
    """Read a digit string one digit at a time: ``"1937"`` → 一九三七."""
    return "".join(_DIGIT_CHARS[int(d)] for d in digits)


def _read_group(group: str) -> str:
    """Read a 1-4 digit group (value > 0) with 千/百/十 and inner 零."""
    out = []
    pending_zero = False
    for digit, unit in zip(group.rjust(4, "0"), _SMALL_UNITS, strict=True):
        if digit == "0":
            pending_zero = bool(out)
            continue
        if pending_zero:
            out.append("零")
            pending_zero = False
        out.append(_DIGIT_CHARS[int(digit)] + unit)
    return "".join(out)


def read_cardinal(digits: str) -> str:
    """Read a non-negative integer the way it is counted: ``"106"`` → 一百零六.

    Numbers too long to have a name are read digit by digit.
    """
    digits = digits.lstrip("0") or "0"
    if digits == "0":
        return "零"
    if len(digits) > _MAX_CARDINAL_DIGITS:
        return read_digits(digits)
    groups = []
    while digits:
        groups.append(digits[-4:])
        digits = digits[:-4]
    groups.reverse()
    out: list[str] = []
    pending_zero = False
    for index, group in enumerate(groups):
        value = int(group)
        if value == 0:
            pending_zero = bool(out)
            continue
        if out and (pending_zero or value < 1000):
            out.append("零")
        out.append(_read_group(group) + _GROUP_UNITS[len(groups) - 1 - index])
        pending_zero = False
    text = "".join(out)
    if text.startswith("一十"):
        # 10-19 at the head of a number are said 十…, not 一十….
        text = text[1:]
    if text[:2] in ("二千", "二万", "二亿"):
        text = "两" + text[1:]
    return text


def _read_decimal(integer: str, fraction: str) -> str:
    return read_cardinal(integer) + "点" + read_digits(fraction)


# --- rules -------------------------------------------------------------------------
# Each rule is (pattern, replacement function); they run in order over the whole text.

_Rule = tuple[re.Pattern[str], Callable[[re.Match[str]], str]]

_URL = re.compile(r"(?:https?://|www\.)[A-Za-z0-9./_%?=&#:~+-]+|[\w.+-]+@[\w-]+\.[\w.]+", re.ASCII)
_ELLIPSIS = re.compile(r"\.{3,}|。{3,}")
_THOUSANDS = re.compile(r"(?<![0-9])[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])")
_PHONE = re.compile(r"(?<![0-9])([0-9]{3,4})-([0-9]{7,8})(?![0-9])")
_YEAR_RANGE = re.compile(r"(?<![0-9])([0-9]{4})\s*[-~–—至到]\s*([0-9]{4})(?=\s*年)")
_YEAR = re.compile(r"(?<![0-9.])([0-9]{4})(?=\s*年)")
_CLOCK = re.compile(r"(?<![0-9.])([0-9]{1,2})[:：]([0-9]{2})(?:[:：]([0-9]{2}))?(?![0-9])")
_RATIO = re.compile(r"(?<![0-9.])([0-9]+)\s*[:：]\s*([0-9]+)(?![0-9])")
_PERCENT = re.compile(r"([0-9]+)(?:\.([0-9]+))?\s*([%‰])")
_FRACTION = re.compile(r"(?<![0-9/])([0-9]+)/([0-9]+)(?![0-9/])")
_RANGE = re.compile(
    r"(?<![0-9.])([0-9]+(?:\.[0-9]+)?)\s*[~～]\s*(?=[0-9])|(?<![0-9.-])([0-9]{1,6}(?:\.[0-9]+)?)-(?=[0-9]{1,6}(?![0-9-]))"
)
_DECIMAL = re.compile(r"([0-9]+)\.([0-9]+)")
_UNIT = re.compile(r"(?<=[0-9])\s*(km|kg|cm|mm|ml|m|g|℃|°C|°)(?![A-Za-z])")
_ARITHMETIC = re.compile(r"(?<=[0-9])\s*([+=×])\s*(?=[0-9])")
_LETTER_DIGITS = re.compile(r"(?<=[A-Za-z])-?([0-9]{3,})")
_INTEGER = re.compile(r"[0-9]+")
_LATIN = re.compile(r"[A-Za-z]+")
# Hanzi that follows a long digit run makes it a quantity (1000000人), otherwise an id.
_HAN = re.compile(r"[\u3400-\u9fff]")


def _clock(match: re.Match[str]) -> str:
    hour, minute, second = match.group(1), match.group(2), match.group(3)
    if int(hour) > 24 or int(minute) > 59 or (second is not None and int(second) > 59):
        # Not a time of day: a score or ratio such as 106:105 or 3:75.
        text = read_cardinal(hour) + "比" + read_cardinal(minute)
        if second is not None:
            text += "比" + read_cardinal(second)
        return text
    text = ("两" if hour == "2" else read_cardinal(hour)) + "点"
    if int(minute) or second is not None:
        text += ("零" if minute[0] == "0" and minute != "00" else "") + read_cardinal(minute) + "分"
    if second is not None:
        text += read_cardinal(second) + "秒"
    return text


def _integer(match: re.Match[str]) -> str:
    digits = match.group(0)
    text = match.string
    after = text[match.end() : match.end() + 1]
    before = text[match.start() - 1 : match.start()] if match.start() else ""
    if len(digits) > 1 and digits[0] == "0":
        return read_digits(digits)  # 007, 010: codes, not amounts
    if len(digits) >= 7 and not _HAN.match(after):
        return read_digits(digits)  # phone numbers, ids
    if digits == "2" and after in _LIANG_CLASSIFIERS and before != "第":
        return "两"
    return read_cardinal(digits)


def _letters(match: re.Match[str]) -> str:
    # Surrounding spaces keep the letter names from fusing with neighbouring words
    # during segmentation; the frontend treats spaces as word boundaries.
    return " " + "".join(_LETTER_NAMES[ch.upper()] for ch in match.group(0)) + " "


_RULES: tuple[_Rule, ...] = (
    (_URL, lambda m: " "),
    (_ELLIPSIS, lambda m: "……"),
    (_THOUSANDS, lambda m: m.group(0).replace(",", "")),
    (_PHONE, lambda m: read_digits(m.group(1)) + "，" + read_digits(m.group(2))),
    (_YEAR_RANGE, lambda m: read_digits(m.group(1)) + "到" + read_digits(m.group(2))),
    (_YEAR, lambda m: read_digits(m.group(1))),
    (_CLOCK, _clock),
    (_RATIO, lambda m: read_cardinal(m.group(1)) + "比" + read_cardinal(m.group(2))),
    (
        _PERCENT,
        lambda m: (
            ("百分之" if m.group(3) == "%" else "千分之")
            + (_read_decimal(m.group(1), m.group(2)) if m.group(2) else read_cardinal(m.group(1)))
        ),
    ),
    (_FRACTION, lambda m: read_cardinal(m.group(2)) + "分之" + read_cardinal(m.group(1))),
    (_RANGE, lambda m: (m.group(1) or m.group(2)) + "到"),
    (_DECIMAL, lambda m: _read_decimal(m.group(1), m.group(2))),
    (_UNIT, lambda m: _UNITS_AFTER_NUMBER[m.group(1)]),
    (_ARITHMETIC, lambda m: {"+": "加", "=": "等于", "×": "乘"}[m.group(1)]),
    (_LETTER_DIGITS, lambda m: read_digits(m.group(1))),
    (_INTEGER, _integer),
    (_LATIN, _letters),
)


def normalize_text(text: str) -> str:
    """Return ``text`` with every number, symbol and Latin word spelled in Chinese.

    Chinese characters and punctuation are kept, so the result can still be split
    into phrases; characters with no reading are left for the frontend to skip.
    """
    text = text.translate(_FULLWIDTH)
    for pattern, replace in _RULES:
        text = pattern.sub(replace, text)
    return text
