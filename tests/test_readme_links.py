"""Every relative link of README.md and docs/*.md leads somewhere: its file exists in the repository, and an anchor
(`file.md#heading`, `#heading`) names a heading of that file, as GitHub derives anchors from headings."""

import functools
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"`[^`\n]*`")
# [text](target "title") and ![alt](target); [label]: target (reference definitions)
_INLINE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.MULTILINE)
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$", re.MULTILINE)
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto: ...


def without_code(markdown: str) -> str:
    """The text outside fenced blocks and inline code spans (a link there is an example, not a link)."""
    return _CODE.sub("", _FENCE.sub("", markdown))


def links(markdown: str) -> list[str]:
    text = without_code(markdown)
    return _INLINE.findall(text) + _REFERENCE.findall(text)


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: markup and punctuation dropped, lower case, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading's anchor, with GitHub's -1, -2 ... for repeated ones."""
    seen: dict[str, int] = {}
    found = set()
    for _, title in _HEADING.findall(_FENCE.sub("", markdown)):
        slug = anchor(title)
        found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return found


@functools.cache
def anchors_of(path: Path) -> set[str]:
    return anchors(path.read_text(encoding="utf-8"))


def broken_links(markdown: str, page: Path, repo: Path) -> list[str]:
    """The relative links of ``markdown`` (the text of ``page``) that lead nowhere inside ``repo``, each with why."""
    broken = []
    for target in links(markdown):
        if _EXTERNAL.match(target):
            continue
        path_part, _, fragment = target.partition("#")
        path = (page.parent / path_part).resolve() if path_part else page
        if not path.exists():
            broken.append(f"{target}: no file {path}")
            continue
        try:
            path.relative_to(repo.resolve())
        except ValueError:
            broken.append(f"{target}: {path} is outside the repository")
            continue
        if fragment and path.suffix == ".md" and fragment not in anchors_of(path):
            broken.append(f"{target}: no heading with anchor #{fragment} in {path.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_relative_link_resolves(page):
    assert not broken_links(page.read_text(encoding="utf-8"), page, REPO)


def test_the_pages_are_there_and_have_links():
    assert (REPO / "docs").is_dir() and len(PAGES) > 5
    assert len(links((REPO / "README.md").read_text(encoding="utf-8"))) > 10


def test_the_front_door_is_at_most_200_lines_with_one_install_and_one_test_command():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    assert readme.count("pip install -c constraints/ci.txt -e '.[local,test]'") == 1
    assert readme.count("\npython -m pytest\n") == 1


def test_anchors_follow_github():
    assert anchor("Failures and resume") == "failures-and-resume"
    assert anchor("`verdicts.jsonl`, `summary.json`") == "verdictsjsonl-summaryjson"
    assert anchor("Run 4 — the whole dev file (`benchmarks/local_model.py`), 2026-12-01") == (
        "run-4--the-whole-dev-file-benchmarkslocal_modelpy-2026-12-01")
    assert anchor("The 0.5B compiled the same way: nothing ships") == "the-05b-compiled-the-same-way-nothing-ships"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n## B\n") == {"a", "a-1", "b"}


def test_the_checker_finds_a_planted_broken_link(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n\n## Options\n")
    (tmp_path / "tool.py").write_text("")
    page = tmp_path / "README.md"
    text = ("See [the guide](docs/guide.md), [its options](docs/guide.md#options), [the code](tool.py), "
            "[below](#usage), [the paper](https://arxiv.org/abs/2510.27052) and `[not a link](nowhere.md)`.\n\n"
            "## Usage\n\n```\n[in a code block](missing.md)\n```\n\n"
            "Broken: [gone](docs/gone.md), [no such heading](docs/guide.md#install), [no anchor](#nope), "
            "[outside](../elsewhere.md).\n\n[ref]: docs/also-gone.md\n")
    page.write_text(text)
    (tmp_path.parent / "elsewhere.md").write_text("")
    broken = broken_links(text, page, tmp_path)
    assert [b.split(":")[0] for b in broken] == ["docs/gone.md", "docs/guide.md#install", "#nope",
                                                 "../elsewhere.md", "docs/also-gone.md"]
