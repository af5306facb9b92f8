"""Where upstream URLs are really fetched from: the user's mirror table and git's own rewrites.

Air-gapped sites mirror GitHub locally. That is a fact of the site, not of the recipe, so
recipes keep the public URLs and the mapping lives in a user file (`[mirrors]` in
`~/.config/build-kernel/config.toml`, or the file `$BUILD_KERNEL_CONFIG` names):

    [mirrors]
    "https://github.com/" = "https://git.example.internal/github/"     # a prefix, as git's insteadOf
    "https://github.com/NVIDIA/cutlass.git" = "file:///srv/git/cutlass.git"

The longest matching prefix wins, as with git's `url.<base>.insteadOf`, which is honoured
too (git applies it itself; we read it only to show and name the rewrite).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from build_kernel import process
from build_kernel.errors import FetchError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CONFIG_ENV = "BUILD_KERNEL_CONFIG"


def is_url(repo: str) -> bool:
    """A remote repository (what a mirror can stand for), not a local path."""
    return "://" in repo or repo.startswith("git@")


@dataclass(frozen=True)
class Rule:
    prefix: str
    replacement: str
    origin: str  # where the rule was read: the config file, or "git config url.<base>.insteadOf"


@dataclass(frozen=True)
class Rewrite:
    url: str  # as the recipe names it
    fetch_url: str  # what is really fetched
    rule: Rule | None

    @property
    def rewritten(self) -> bool:
        return self.rule is not None

    def describe(self) -> str:
        return f"{self.url} -> {self.fetch_url} ({self.rule.origin})" if self.rule else self.url

    def to_dict(self) -> dict[str, str]:
        return {"url": self.url, "fetch_url": self.fetch_url, "via": self.rule.origin if self.rule else ""}


@dataclass(frozen=True)
class Mirrors:
    rules: tuple[Rule, ...] = field(default_factory=tuple)
    config_file: Path | None = None

    def rewrite(self, url: str) -> Rewrite:
        matches = [r for r in self.rules if url.startswith(r.prefix)]
        if not matches:
            return Rewrite(url, url, None)
        rule = max(matches, key=lambda r: len(r.prefix))
        return Rewrite(url, rule.replacement + url[len(rule.prefix):], rule)


def default_config_file(env: Mapping[str, str]) -> Path:
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".config")
    return Path(base) / "build-kernel" / "config.toml"


def _config_rules(path: Path) -> list[Rule]:
    if not path.is_file():
        return []
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise FetchError(f"{path}: invalid TOML: {exc}", hint="fix the syntax of the user config file") from None
    table = data.get("mirrors", {})
    if not isinstance(table, dict) or not all(isinstance(v, str) and v for v in table.values()):
        raise FetchError(f"{path}: [mirrors] must map URL prefixes to mirror URLs (strings)",
                         hint='write e.g. "https://github.com/" = "file:///srv/git/github/"')
    return [Rule(prefix, replacement, str(path)) for prefix, replacement in table.items()]


def _git_rules(env: Mapping[str, str]) -> list[Rule]:
    """git's own `url.<base>.insteadOf` rules (global, system and GIT_CONFIG_* from the env)."""
    # cwd "/": no repository's own config; exit 1 is "no such rule".
    try:
        proc = process.run(["git", "config", "--get-regexp", r"^url\..*\.insteadof$"], error=FetchError,
                           what="reading git's url.<base>.insteadOf rules", env=env, cwd=Path("/"), check=False)
    except FetchError:  # no git: it has no rules either
        return []
    rules = []
    for line in proc.stdout.splitlines():
        key, _, prefix = line.partition(" ")
        base = key[len("url."):-len(".insteadof")]
        rules.append(Rule(prefix, base, f"git config url.{base}.insteadOf"))
    return rules


def load(env: Mapping[str, str]) -> Mirrors:
    path = default_config_file(env)
    return Mirrors(tuple(_config_rules(path) + _git_rules(env)), path)
