"""SIGKILL anywhere (issue 68 item 2): a killed run, then the same command, ends as an uninterrupted one.

The publish tests kill a real child process with SIGKILL at an exact line (the child kills itself there: a
barrier, not a timer): inside the wheel's copy into the static index, and between the copy and the pages.
The pipeline test kills `build-kernel --recipe demo` (make demo's pipeline, bench/faults/kill_anywhere.py's
command) once in each stage, at the stage's start line, and reruns it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from build_kernel.stages import publish as pub
from tests.test_publish import LOCAL, clean_env, listing, make_wheel, target_for

# The child: publish one wheel into a static folder, SIGKILLed (by itself) at `where`.
_KILLED_PUBLISH = textwrap.dedent("""
    import os, shutil, signal, sys
    from pathlib import Path
    from build_kernel import static_index
    from build_kernel.stages import publish as pub

    where, wheel, folder, tmp = sys.argv[1], Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])

    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    if where == "copy":  # half the wheel written into the copy's temporary file, then killed
        def half(source, dest, **kwargs):
            Path(dest).write_bytes(Path(source).read_bytes()[:200])
            die()
        shutil.copy2 = half
    else:  # the wheel copied in, killed before its pages are written
        static_index.regenerate = die
    target = pub.resolve_target(folder, None, env=os.environ, indexes_file=tmp / "none.toml", pypirc=tmp / "none")
    pub.publish([wheel], target, env=os.environ)
""")


@pytest.mark.parametrize(("where", "status"), [("copy", "copied"), ("pages", "unchanged")])
def test_publish_killed_midway_is_finished_by_the_rerun(tmp_path: Path, where: str, status: str) -> None:
    env = clean_env()
    wheel = make_wheel(tmp_path / "w", "bk-killed", f"0.1.0{LOCAL}")
    clean, folder = tmp_path / "clean", tmp_path / "killed"
    pub.publish([wheel], target_for(str(clean), tmp_path, env), env=env)
    child = subprocess.run([sys.executable, "-c", _KILLED_PUBLISH, where, str(wheel), str(folder), str(tmp_path)],
                           env=env, capture_output=True, text=True, check=False)
    assert child.returncode == -signal.SIGKILL, child.stderr
    left = sorted(p.name for p in folder.iterdir())
    if where == "copy":  # the killed copy's temporary file, and no wheel under its own name
        assert [n for n in left if n.endswith(".tmp")] and wheel.name not in left
    else:  # the wheel is there, but no page lists it
        assert wheel.name in left and not (folder / "simple" / "bk-killed" / "index.html").exists()

    done = pub.publish([wheel], target_for(str(folder), tmp_path, env), env=env)

    assert done.wheels[0].status == status
    assert done.wheels[0].imports == {"bk_killed": "ok"}  # installed back from the finished index
    assert listing(folder) == listing(clean)  # byte for byte the uninterrupted publish: no temporary file left
    assert not [p for p in folder.rglob("*") if p.name.startswith(".")]


def test_other_writers_temporaries_are_not_swept(tmp_path: Path) -> None:
    """Only the atomic writes' own temporary names are removed: a user's dotfile in the index folder stays."""
    from build_kernel import atomic

    (tmp_path / ".htaccess").write_text("Options +Indexes\n")
    (tmp_path / ".keep.tmp").write_text("")
    (tmp_path / ".page.html.abcd_123.tmp").write_text("half")
    assert [p.name for p in atomic.sweep_files(tmp_path)] == [".page.html.abcd_123.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".htaccess", ".keep.tmp"]
