"""Publish errors no other test reached (bench/code_health/error_sites.py, issue 68 item 1).

The real `publish` (what the CLI's publish and the pipeline's publish stage call) with real small
wheels (tests/test_publish.py's make_wheel), real static folders and a real pypiserver; each error
one line naming the problem and the fix, a PublishError (exit 8), the index left as it was.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from build_kernel.errors import PublishError
from build_kernel.stages import publish as pub
from tests.test_publish import clean_env, make_wheel, target_for


@pytest.fixture
def no_inodes(tmp_path: Path) -> Iterator[Path]:
    """A real tmpfs with no free inode (nr_inodes=1: its root only): writable, and no name can be made in it.
    Mounting needs root (CAP_SYS_ADMIN): elsewhere the test skips, saying so."""
    folder = tmp_path / "full"
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,nr_inodes=1", "tmpfs", str(folder)],
                          capture_output=True, text=True, check=False) if shutil.which("mount") else None
    if done is None or done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip() if done else 'no mount'}")
    yield folder
    subprocess.run(["umount", "--lazy", str(folder)], check=False)


def test_a_static_folder_that_cannot_be_created(tmp_path: Path, no_inodes: Path) -> None:
    """Its parent is a writable folder (the check before any work passes) and mkdir still fails."""
    wheel = make_wheel(tmp_path / "in", "bk-site", "1.0")
    folder = no_inodes / "index"
    env = clean_env()
    with pytest.raises(PublishError) as info:
        pub.publish([wheel], target_for(str(folder), tmp_path, env), env=env)
    assert info.value.exit_code == 8
    assert info.value.render() == (f"cannot create the static index folder {folder}: No space left on device "
                                   "(check the path and its permissions)")
    assert list(no_inodes.iterdir()) == []
