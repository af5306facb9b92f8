"""A nightly's version: the package's own release with `.devYYYYMMDD` (PEP 440), so that the nights of one
release sort by date before the local label (`0.4.3.dev20261207+cu130...` < `0.4.3.dev20261208+cu130...`),
and pip's `--pre` takes the newest night. Set by `build-kernel nightly` (Plan.version_dev); empty elsewhere."""

from __future__ import annotations

import re

from packaging.version import InvalidVersion, Version

from build_kernel.errors import BuildError


def stamp(base: str, dev: str) -> str:
    """`0.4.3` and `20261207` -> `0.4.3.dev20261207`; a development release of its own is replaced, a local
    label dropped (the tool writes its own); `dev` empty: `base` as it is."""
    if not dev:
        return base
    try:
        public = Version(base).public
    except InvalidVersion:
        raise BuildError(f"the package's version {base!r} is not PEP 440, so nights cannot sort by it",
                         hint="build a commit whose version is PEP 440 (e.g. 0.4.3)") from None
    return f"{re.sub(r'[.]?dev[0-9]*$', '', public)}.dev{dev}"
