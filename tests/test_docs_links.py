"""README.md is the entrance (≤ 200 lines, opening with the two commands that work on a fresh machine),
and every relative link of README.md and docs/*.md reaches a file, and a heading where it names one."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO_ROOT

DOCUMENTS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 200

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
INLINE_CODE = re.compile(r"(`+).+?\1", re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.+?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code: links and headings there are not links."""
    return FENCE.sub("", text)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its rendered text lower-cased, punctuation but `-` and `_`
    dropped, spaces turned into hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)    # a link: its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")       # html tags, code marks
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, the second of two equal ones with `-1` as GitHub does."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, heading in HEADING.findall(_prose(path.read_text())):
        slug = github_slug(heading)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def relative_links(path: Path) -> list[str]:
    return [target for target in LINK.findall(INLINE_CODE.sub("", _prose(path.read_text())))
            if not re.match(r"[a-z][a-z0-9+.-]*:", target, re.I)]   # http:, https:, mailto: ... are not ours


def broken_links(documents: list[Path]) -> list[str]:
    """`file: target (why)` for every relative link that reaches no file, or no heading of it."""
    broken = []
    for doc in documents:
        for target in relative_links(doc):
            file_part, _, fragment = target.partition("#")
            dest = (doc.parent / file_part).resolve() if file_part else doc
            if not dest.exists():
                broken.append(f"{doc.name}: {target} (no file {dest})")
            elif fragment and dest.suffix == ".md" and fragment.lower() not in anchors(dest):
                broken.append(f"{doc.name}: {target} (no heading #{fragment} in {dest.name})")
    return broken


def test_every_relative_link_resolves() -> None:
    assert len(DOCUMENTS) > 5
    assert sum(len(relative_links(d)) for d in DOCUMENTS) >= 20, "README and docs/ link each other"
    assert broken_links(DOCUMENTS) == []


def test_every_docs_page_is_linked_from_readme() -> None:
    linked = {(REPO_ROOT / t.partition("#")[0]).resolve() for t in relative_links(REPO_ROOT / "README.md")}
    assert [d.name for d in DOCUMENTS[1:] if d.resolve() not in linked] == []


def test_a_broken_link_or_anchor_is_caught(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    page.write_text("# A page\n\n## The compilers that link (`[toolchain] host_compiler`)\n\n## Twice\n\n## Twice\n\n"
                    "```sh\n# not a heading\n```\n")
    readme = tmp_path / "README.md"
    good = ("[p](docs/page.md) [h](docs/page.md#the-compilers-that-link-toolchain-host_compiler) "
            "[t](docs/page.md#twice-1) [self](#top) [web](https://example.com/x.md) `[code](nowhere.md)`\n")
    readme.write_text("# Top\n\n" + good)
    assert broken_links([readme, page]) == []
    readme.write_text("# Top\n\n" + good + "[gone](docs/gone.md) [anchor](docs/page.md#no-such-heading) "
                      "[fenced](docs/page.md#not-a-heading) [self](#nowhere)\n")
    broken = broken_links([readme, page])
    assert [b.split(" (")[0] for b in broken] == [
        "README.md: docs/gone.md", "README.md: docs/page.md#no-such-heading",
        "README.md: docs/page.md#not-a-heading", "README.md: #nowhere"]


def test_github_slugs() -> None:
    assert github_slug("The package's own tests (`build-kernel test`)") == "the-packages-own-tests-build-kernel-test"
    assert github_slug("flash-attn 2.8.3 (recipe `flash-attn-2.8.3`)") == "flash-attn-283-recipe-flash-attn-283"
    assert github_slug("The benchmark (`make bench`, `bench/scheduler.py` → `bench/results/scheduler.json`)") == \
        "the-benchmark-make-bench-benchschedulerpy--benchresultsschedulerjson"


def test_readme_is_an_entrance() -> None:
    """≤ 200 lines, opening with `make demo` and `make test` (the command .ci/run runs) in its first code block."""
    text = (REPO_ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES, f"README.md is {len(text.splitlines())} lines: move some into docs/"
    first = re.search(r"^```\w*\n(.*?)^```", text, re.M | re.S)
    assert first, "README.md has no code block"
    commands = [line.split("#")[0].strip() for line in first.group(1).splitlines() if line.strip()]
    assert commands[:2] == ["make demo", "make test"]
    assert text.index(first.group(0)) < text.index("\n## "), "the two commands come before any section"
