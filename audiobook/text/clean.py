"""Remove web-novel junk lines (site ads, vote begging) that no listener wants read.

Every rule is a named regex; a line matching any enabled rule is removed whole
and reported as a :class:`RemovedLine`, so nothing disappears silently.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from audiobook.models import Chapter, CleanedChapter, RemovedLine
from audiobook.settings import Cleanup

# Kept narrow on purpose: story text may say 收藏 or 推荐, but hardly ever
# "请大家收藏" or a domain name.
DEFAULT_RULES: Mapping[str, str] = {
    "url": r"(?i)(https?://|www\.)\S",
    "domain": r"(?i)\b[a-z0-9-]{2,}\.(com|net|org|cc|cn|la|info|me|co|xyz|top|vip|io|tw|biz)\b",
    "bookmark": r"请(大家)?收藏|加入书签|收藏本站|记住本站|本站域名|书友们?请",
    "votes": r"求(推荐|月票|收藏|订阅|打赏|票票?)|(推荐|月)票.{0,6}(支持|投)",
    "unfinished": r"本章未完|未完待续|点击下一页继续|本章完[）)]?$",
    "latest": r"最新章节|更新最快|全网最快|无弹窗|免费阅读|手机阅读|手机用户|手机版阅读",
}


def compile_rules(settings: Cleanup) -> tuple[tuple[str, re.Pattern[str]], ...]:
    rules: dict[str, str] = {}
    if settings.default_rules:
        rules.update((k, v) for k, v in DEFAULT_RULES.items() if k not in settings.disable)
    rules.update(settings.rules)
    return tuple((name, re.compile(pattern)) for name, pattern in rules.items())


def clean_chapter(chapter: Chapter, settings: Cleanup) -> CleanedChapter:
    rules = compile_rules(settings)
    kept: list[tuple[int, str]] = []
    removed: list[RemovedLine] = []
    for line_no, line in enumerate(chapter.lines, start=1):
        if not line:
            continue
        rule = next((name for name, pattern in rules if pattern.search(line)), None)
        if rule is None:
            kept.append((line_no, line))
        else:
            removed.append(RemovedLine(line_no=line_no, text=line, rule=rule))
    return CleanedChapter(chapter=chapter, lines=tuple(kept), removed=tuple(removed))
