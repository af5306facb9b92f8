"""Where upstream URLs are really fetched from: the user's mirror table and git's own rewrites.

Air-gapped sites mirror GitHub locally. That is a fact of the site, not of the recipe, so
recipes keep the public URLs and the mapping lives in a user file (`[mirrors]` in
`~/.config/build-kernel/config.toml`, or the file `$BUILD_KERNEL_CONFIG` names):

    [mirrors]
    "https://github.com/" = "https://git.example.internal/github/"     # a prefix, as git's insteadOf
    "https://github.com/NVIDIA/cutlass.git" = "file:///srv/git/cutlass.git"

The longest matching prefix wins, as with git's `url.<base>.insteadOf`, which is honoured
too (git applies it itself; we read it only to show and name the rewrite).

Package indexes are mapped by the same table, by URL prefix:

    "https://download.pytorch.org/whl/" = "https://pypi.example.internal/pytorch/whl/"  # torch_index, locked files
    "https://pypi.org/simple/" = "https://pypi.example.internal/simple/"  # pip's index of the build environment

The table's rules apply to every index URL the tool reads or hands to pip: `[toolchain] torch_index`,
the files a lock names (their sha256 still has to match), and pip's default index, PyPI (`PYPI` below),
which a build environment installs a torch pinned without torch_index from. git's insteadOf rules never
touch an index URL: they are git's. (Publish targets are named in indexes.toml: stages/publish/targets.py.)
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
PYPI = "https://pypi.org/simple/"  # pip's default index: what a `[mirrors]` rule maps to name a PyPI mirror


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


def _longest(rules: tuple[Rule, ...], url: str) -> Rewrite:
    matches = [r for r in rules if url.startswith(r.prefix)]
    if not matches:
        return Rewrite(url, url, None)
    rule = max(matches, key=lambda r: len(r.prefix))
    return Rewrite(url, rule.replacement + url[len(rule.prefix):], rule)


@dataclass(frozen=True)
class Mirrors:
    rules: tuple[Rule, ...] = field(default_factory=tuple)
    config_file: Path | None = None
    index_rules: tuple[Rule, ...] = field(default_factory=tuple)

    def rewrite(self, url: str) -> Rewrite:
        """A git URL as it is really fetched ([mirrors], then git's insteadOf)."""
        return _longest(self.rules, url)

    def index(self, url: str) -> Rewrite:
        """A package index URL (or a file under one) as it is really read ([mirrors] of the user config only)."""
        return _longest(self.index_rules, url)

    def index_origin(self, url: str) -> str:
        """The public URL a mirror's URL stands for (what a committed lock records), or the URL itself."""
        back = tuple(Rule(r.replacement, r.prefix, r.origin) for r in self.index_rules)
        return _longest(back, url).fetch_url

    def config_words(self) -> str:
        """`[mirrors] of the user config /path/config.toml`: an error that sends the user there says where it is."""
        return f"[mirrors] of the user config {self.config_file or _DEFAULT_WORDS}"


_DEFAULT_WORDS = f"(~/.config/build-kernel/config.toml, or the file ${CONFIG_ENV} names)"


def default_config_file(env: Mapping[str, str]) -> Path:
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".config")
    return Path(base) / "build-kernel" / "config.toml"


def _config_rules(path: Path) -> list[Rule]:
    """The prefix rules of [mirrors] in the user config."""
    if not path.is_file():
        return []
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise FetchError(f"{path}: invalid TOML: {exc}", hint=f"fix the syntax of the user config file {path}") from None
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
    own = _config_rules(path)
    return Mirrors(tuple(own + _git_rules(env)), path, tuple(own))
