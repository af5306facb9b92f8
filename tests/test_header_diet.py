"""Series sm120 v13 (issue 71 item 1): v8 plus one patch that changes includes only, with its DEP-3 header, and
the recipe that builds it. The proof that the device code is v8's is a real build's (`prune-proof --across-tus`,
bench/header_diet/); these check the series' shape, which a later edit could break without a build."""

from __future__ import annotations

import re

from unidiff import PatchSet

from build_kernel.recipe.load import load
from build_kernel.series import load_series
from tests.conftest import REPO_ROOT

SM120 = REPO_ROOT / "patches" / "sm120"
DIET = "0012-lean-torch-headers.patch"
DEP3 = ("Description", "Origin", "Forwarded", "Last-Update", "Applies-To", "Checked-Against")
NEW_HEADER = "include/sgl_kernel_torch_lean.h"


def test_v13_is_v8_byte_for_byte_plus_the_diet() -> None:
    v8, v13 = load_series(SM120 / "v8"), load_series(SM120 / "v13")
    assert [(p.name, p.sha256) for p in v13.patches[:-1]] == [(p.name, p.sha256) for p in v8.patches]
    assert v13.patches[-1].name == DIET
    assert v13.applies_to_commits == v8.applies_to_commits
    assert v13.info["cxx_standard"] == v8.info["cxx_standard"]


def test_the_diet_has_its_dep3_header_and_says_what_it_removes_and_why() -> None:
    patch = load_series(SM120 / "v13").patches[-1]
    assert [field for field in DEP3 if field not in patch.headers] == []
    description = patch.headers["Description"]
    assert "torch/all.h" in description.split("\n")[0]
    # every file the diff touches is named as checked
    touched = {f.path for f in PatchSet(patch.path.read_text().split("\n---\n", 1)[1])} - {NEW_HEADER}
    assert touched <= set(re.findall(r"(\S+) @ [0-9a-f]{40}", patch.headers["Checked-Against"]))


def test_the_diet_rewrites_no_upstream_line_but_includes() -> None:
    """Each removed or added line of an upstream file is an #include or the guard around one: no function,
    signature or dispatch is rewritten, so a port to a new release is the include lines alone."""
    patch = load_series(SM120 / "v13").patches[-1]
    changed = [(f.path, line.value.strip()) for f in PatchSet(patch.path.read_text().split("\n---\n", 1)[1])
               if f.path != NEW_HEADER for hunk in f for line in hunk if line.is_added or line.is_removed]
    assert changed and [c for c in changed if not re.match(r"#(include|ifndef SGL_KERNEL_TORCH_LEAN_H|endif)", c[1])] == []


def test_the_recipe_builds_v13_and_is_nightly_cu130_otherwise() -> None:
    v13, base = load("nightly-cu130-v13", REPO_ROOT), load("nightly-cu130", REPO_ROOT)
    assert (v13.patches.series, v13.patches.version) == ("sm120", "v13")
    assert v13.series_dir == SM120 / "v13"
    assert (v13.source, v13.toolchain, v13.build) == (base.source, base.toolchain, base.build)
