"""bench/needs.py: a study run without its extra stops on one line naming the module, why, and the extra."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_a_missing_module_is_one_line_naming_it_why_and_the_extra() -> None:
    code = ("import sys; sys.path.insert(0, 'bench'); sys.argv = ['bench/code_health/error_sites.py']\n"
            "from needs import need\n"
            "need('json', 'no_such_module_for_this_test', extra='bench', why='it reads its data')\n"
            "print('not reached')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == ("bench/code_health/error_sites.py: needs no_such_module_for_this_test (it reads its data); "
                           "install it with: pip install -e '.[bench]'\n")


def test_every_study_script_that_needs_an_extra_module_asks_for_it_by_name() -> None:
    """The bench scripts that import coverage, mutmut or matplotlib say so through needs.need before they do."""
    for script in sorted((REPO_ROOT / "bench").glob("*/*.py")):
        text = script.read_text()
        for module, extra in (("coverage", "bench"), ("mutmut", "mutate"), ("matplotlib", "bench")):
            if f"import {module}" in text or f"from {module}" in text or f'"-m", "{module}"' in text:
                assert f'need("{module}"' in text and f'extra="{extra}"' in text, (script, module)
