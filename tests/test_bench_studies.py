"""bench/ is folders of studies: each with a README (its links resolve) that bench/README.md indexes, every results
file listed in bench/regenerate.py (remade from raw, or measured live), no script or folder named for an issue."""

from __future__ import annotations

import re
import sys

from tests.conftest import REPO_ROOT
from tests.test_docs_links import broken_links, relative_links

BENCH = REPO_ROOT / "bench"
SHARED = {"data"}  # data shared by several studies, not a study


def _studies() -> list[str]:
    return sorted(p.name for p in BENCH.iterdir() if p.is_dir() and p.name not in SHARED and not p.name.startswith((".", "_")))


def test_every_study_has_a_readme_the_index_links_and_its_links_resolve() -> None:
    studies = _studies()
    assert len(studies) >= 15
    index = {t.split("/")[0] for t in relative_links(BENCH / "README.md")}
    readmes = [BENCH / s / "README.md" for s in studies]
    assert [r for r in readmes if not r.is_file()] == []
    assert set(studies) <= index, set(studies) - index
    assert broken_links([BENCH / "README.md", *readmes]) == []


def test_the_pruning_question_is_answered_in_one_readme() -> None:
    text = (BENCH / "pruning" / "README.md").read_text()
    assert "SASS-identical" in text and "identical SASS" in text and "proof.svg" in text
    assert "pruning/" in (BENCH / "README.md").read_text().split("SASS-identical")[1].splitlines()[0]


def test_every_results_file_is_remade_or_named_as_measured_live() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import regenerate
    finally:
        sys.path.remove(str(BENCH))
    on_disk = {p.relative_to(REPO_ROOT).as_posix() for p in BENCH.glob("*/results/*.json")}
    listed = set(regenerate.FROM_RAW) | set(regenerate.MEASURED)
    assert on_disk == listed
    assert all((REPO_ROOT / svg).is_file() for svg in regenerate.FIGURES)
    for _, (script, argv) in regenerate.FROM_RAW.items():
        assert (REPO_ROOT / script).is_file()
        assert [a for a in argv if a.startswith("bench/") and not (REPO_ROOT / a).exists()] == []


def test_no_script_or_study_is_named_for_an_issue() -> None:
    named = [p.relative_to(BENCH).as_posix() for p in BENCH.rglob("*") if "raw" not in p.relative_to(BENCH).parts]
    assert [n for n in named if re.search(r"issues?\d|issue_\d|gpu_h200|h200_|_h200", n)] == []
