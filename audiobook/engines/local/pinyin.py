"""Chinese characters → pinyin as actually spoken: polyphones, tone sandhi, erhua.

Word segmentation (jieba) gives pypinyin the context it needs for most 多音字;
a small override table and a few context rules fix what its phrase dictionary
gets wrong for our kind of text (military ranks, particles).  Tone sandhi is
applied afterwards because the Baker corpus the voice was trained on is labelled
with the tones a speaker produces (你好 ni2 hao3), not the dictionary tones.

Syllables are pypinyin ``TONE3`` strings with ``5`` for the neutral tone, e.g.
``zhang3``.  A 儿 pronounced as erhua (哪儿) gets the syllable :data:`ERHUA`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import jieba
from pypinyin import Style, pinyin
from pypinyin.constants import RE_HANS
from pypinyin.pinyin_dict import pinyin_dict as _PYPINYIN_CHARS

logger = logging.getLogger(__name__)

ERHUA = "r"

# Words pypinyin (or the sandhi rules) get wrong in context; read exactly as given.
_OVERRIDES: dict[str, str] = {
    "长津湖": "chang2 jin1 hu2",
    "长江": "chang2 jiang1",
    "总长": "zong3 zhang3",
    "团长": "tuan2 zhang3",
    "重点": "zhong4 dian3",
    "重新": "chong2 xin1",
    "还是": "hai2 shi4",
    "还给": "huan2 gei3",
    "行动": "xing2 dong4",
    "银行": "yin2 hang2",
    "了解": "liao3 jie3",
    "得到": "de2 dao4",
    "觉得": "jue2 de5",
    "不得不": "bu4 de2 bu4",
    "为了": "wei4 le5",
    "作为": "zuo4 wei2",
    "朝着": "chao2 zhe5",
    "朝代": "chao2 dai4",
    "调查": "diao4 cha2",
    "的确": "di2 que4",
    "落下": "luo4 xia4",
    "误认为": "wu4 ren4 wei2",
    "处在": "chu3 zai4",
    "一月": "yi1 yue4",
    "一组": "yi1 zu3",
}


def _word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


# Heads whose 长 is "chief" (营长, 组长), when jieba leaves 长 as its own word.
_CHIEF_OF = frozenset("营连排班组队团师旅军首总局处科所部校院市县省站社船舰家族厂店行会委")
# 长 directly before these means "grow" (长大, 长出).
_GROW_BEFORE = frozenset("大出成高满得")

# Words (or word endings) whose 儿 is erhua: it colours the syllable before it.
_ERHUA_WORDS = _word_set(
    "这儿 那儿 哪儿 点儿 会儿 块儿 下儿 事儿 玩儿 空儿 劲儿 活儿 味儿 "
    "样儿 个儿 今儿 明儿 昨儿 好儿 慢慢儿 差点儿 孩儿 们儿 伴儿 面儿 "
    "门儿 份儿 圈儿 盖儿 画儿 号儿 边儿 词儿 字儿 法儿 主儿 头儿 趟儿 "
    "闷儿 天儿 尖儿 片儿 条儿 影儿 信儿 眼儿 口儿 气儿"
)
# Words where 儿 keeps its own syllable (a child, a son).
_NOT_ERHUA = _word_set("女儿 婴儿 孤儿 幼儿 胎儿 健儿 宠儿 男儿 侄儿 孙儿 妻儿 少儿 患儿 弃儿")

# X得 words where 得 means "obtain" (获得 huo4 de2); in other X得 it is the particle de5.
_OBTAIN_DE = _word_set(
    "获得 取得 赢得 难得 心得 所得 应得 求得 博得 习得 购得 抢得 夺得 争得 可得 自得 只得 不得"
)
# Verbs after which 为 is "become/as" (wei2) rather than "for" (wei4): 演变为, 改为.
_BECOME_BEFORE_WEI = frozenset("变成化改转分作视称选评定认列封奉推任命名")

_NUMERALS = frozenset("零〇一二三四五六七八九十两")
_COUNTS = _NUMERALS | {"几"}
_AMOUNT_AFTER_YI = _NUMERALS | frozenset("百千万亿")
_DIGITS_READ_ONE_BY_ONE = frozenset("零〇二三四五六七八九")


@dataclass(frozen=True)
class Word:
    """One segmented word and the syllable spoken for each of its characters."""

    text: str
    pinyin: tuple[str, ...]


def has_reading(char: str) -> bool:
    """True for a Chinese character pypinyin can read."""
    return ord(char) in _PYPINYIN_CHARS and RE_HANS.match(char) is not None


def tone(syllable: str) -> int:
    """Tone digit of a TONE3 syllable (5 = neutral; erhua counts as neutral)."""
    return int(syllable[-1]) if syllable[-1].isdigit() else 5


def _with_tone(syllable: str, new_tone: int) -> str:
    base = syllable[:-1] if syllable[-1].isdigit() else syllable
    return f"{base}{new_tone}"


class PinyinConverter:
    """Segments runs of Chinese characters and reads them; jieba loads on first use."""

    def __init__(self) -> None:
        self._tokenizer: jieba.Tokenizer | None = None
        self._lock = threading.Lock()

    def _jieba(self) -> jieba.Tokenizer:
        with self._lock:
            if self._tokenizer is None:
                # jieba logs its dictionary loading to stderr at DEBUG level.
                logging.getLogger("jieba").setLevel(logging.WARNING)
                tokenizer = jieba.Tokenizer()
                tokenizer.initialize()
                for word in _OVERRIDES:
                    tokenizer.add_word(word)
                self._tokenizer = tokenizer
            return self._tokenizer

    def segment(self, run: str) -> list[str]:
        """Split a run of Chinese characters into words."""
        return [w for w in self._jieba().cut(run) if w]

    def words(self, run: str) -> list[Word]:
        """Read a run of characters that all satisfy :func:`has_reading`."""
        if not run:
            return []
        texts = self.segment(run)
        syllables = _lexical_pinyin(texts)
        words = []
        start = 0
        for text in texts:
            words.append(Word(text, tuple(syllables[start : start + len(text)])))
            start += len(text)
        return _apply_context_rules(words)


def _lexical_pinyin(texts: Sequence[str]) -> list[str]:
    """Dictionary readings, one syllable per character, overrides first."""
    out: list[str] = []
    for text in texts:
        override = _OVERRIDES.get(text)
        if override is not None:
            out.extend(override.split())
            continue
        read = [
            items[0]
            for items in pinyin(
                text, style=Style.TONE3, neutral_tone_with_five=True, errors="ignore"
            )
        ]
        if len(read) != len(text):
            # Defensive: pypinyin should give one syllable per readable character.
            read = [pinyin(ch, style=Style.TONE3, neutral_tone_with_five=True)[0][0] for ch in text]
        out.extend(read)
    return out


def _apply_context_rules(words: list[Word]) -> list[Word]:
    chars: list[str] = []
    syllables: list[str] = []
    word_of: list[int] = []
    fixed: list[bool] = []
    for index, word in enumerate(words):
        chars.extend(word.text)
        syllables.extend(word.pinyin)
        word_of.extend([index] * len(word.text))
        # Override words already carry the intended spoken tones.
        fixed.extend([word.text in _OVERRIDES] * len(word.text))
    citation = list(syllables)

    for i, char in enumerate(chars):
        if fixed[i]:
            continue
        word = words[word_of[i]]
        prev_char = chars[i - 1] if i > 0 else ""
        next_char = chars[i + 1] if i + 1 < len(chars) else ""
        next_tone = tone(citation[i + 1]) if i + 1 < len(chars) else 0
        alone = len(word.text) == 1
        if char == "一":
            syllables[i] = _yi(word.text, chars[max(0, i - 2) : i], next_char, next_tone)
        elif char == "不":
            syllables[i] = _bu(prev_char, next_char, next_tone)
        elif alone and char == "地" and word_of[i] > 0 and next_char:
            # Adverbial particle after a word (迅速地离开), not 地 "ground".
            if len(words[word_of[i] - 1].text) >= 2:
                syllables[i] = "de5"
        elif alone and char == "得":
            syllables[i] = "de5" if word_of[i] > 0 else "dei3"
        elif (
            alone
            and char == "为"
            and (
                prev_char in _BECOME_BEFORE_WEI
                or any(w.text == "以" for w in words[max(0, word_of[i] - 8) : word_of[i]])
                or _starts_amount(chars[i + 1 : i + 3])
            )
        ):
            # 演变为, 以…为…, 成绩为106: "become", "take … as …", "is"
            syllables[i] = "wei2"
        elif char == "得" and len(word.text) == 2 and i > 0 and word_of[i - 1] == word_of[i]:
            if word.text not in _OBTAIN_DE:
                syllables[i] = "de5"  # 变得, 打得: the complement particle
        elif char == "只" and prev_char in _COUNTS:
            syllables[i] = "zhi1"  # the measure word: 两三只, 几只
        elif alone and char == "长":
            if prev_char in _CHIEF_OF or next_char in _GROW_BEFORE:
                syllables[i] = "zhang3"
            else:
                syllables[i] = "chang2"
        elif char == "儿" and i > 0 and _is_erhua(words, word_of[i], i, chars, citation[i]):
            syllables[i] = ERHUA

    out = []
    start = 0
    for word in words:
        end = start + len(word.text)
        out.append(Word(word.text, tuple(syllables[start:end])))
        start = end
    return out


def _starts_amount(chars: Sequence[str]) -> bool:
    """True if ``chars`` begin a number (一百, 三), not 一 as "a" (一个)."""
    if not chars or chars[0] not in _NUMERALS:
        return False
    return chars[0] != "一" or (len(chars) > 1 and chars[1] in _AMOUNT_AFTER_YI)


def _yi(word: str, before: Sequence[str], next_char: str, next_tone: int) -> str:
    prev_char = before[-1] if before else ""
    if prev_char == "第" or prev_char in _NUMERALS or next_char in _DIGITS_READ_ONE_BY_ONE:
        return "yi1"  # ordinals and numbers: 第一, 十一, 一九三七
    if not next_char or (len(word) > 1 and word.endswith("一")):
        return "yi1"  # 统一, 唯一, sentence end
    if next_char in "月号":
        return "yi1"  # dates: 一月, 一号
    if prev_char == next_char and (len(before) < 2 or before[0] != "一"):
        return "yi5"  # 看一看, but not 一点一点
    return "yi2" if next_tone in (4, 5) else "yi4"


def _bu(prev_char: str, next_char: str, next_tone: int) -> str:
    if next_char and prev_char == next_char:
        return "bu5"  # 好不好, 是不是
    return "bu2" if next_tone == 4 else "bu4"


def _is_erhua(words: list[Word], word_index: int, i: int, chars: list[str], reading: str) -> bool:
    word = words[word_index]
    if word.text.startswith("儿"):
        if len(word.text) > 1 or word_index == 0:
            return False  # 儿子, 儿童
        host = words[word_index - 1].text + "儿"
    else:
        host = word.text[: word.text.index("儿") + 1] if "儿" in word.text else word.text
    if host in _NOT_ERHUA or host[-2:] in _NOT_ERHUA:
        return False
    return tone(reading) == 5 or host in _ERHUA_WORDS or host[-2:] in _ERHUA_WORDS


def third_tone_sandhi(syllables: Iterable[str]) -> list[str]:
    """Apply 3-3 → 2-3 to one prosodic word: every 3rd tone before another becomes 2nd."""
    out = list(syllables)
    for i in range(len(out) - 1):
        if tone(out[i]) == 3 and tone(out[i + 1]) == 3 and out[i + 1] != ERHUA:
            out[i] = _with_tone(out[i], 2)
    return out
