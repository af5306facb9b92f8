"""What a package index lists for one project, read from its PEP 503 page.

pip answers "which file would you install" (wheelpins asks it that, with `--report`), but not "does this
index still list the version": pip merges every source of its configuration (find-links, extra indexes)
into one answer, and `pip index versions` stays silent about an index it could not reach. So the one
index a recipe names is read here, as pip reads it: the project's page, each file link's version from its
wheel name, kept when one of its tags fits this interpreter (the build environment is a venv of it) and its
`data-requires-python` admits it.
"""

from __future__ import annotations

import html.parser
import http.client
import re
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit
from urllib.request import url2pathname

from packaging import tags
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from build_kernel import network
from build_kernel.errors import ToolchainError

# pip's own words when an index cannot be reached; pip goes on without that index and then reports what it
# could not find (or, under a constraint, ResolutionImpossible): the first is the cause, the last a symptom.
_NETWORK = re.compile(r"(?:Failed to establish a new connection: \[Errno -?\d+\] ([^'\")]+)|"
                      r"(Temporary failure in name resolution|Name or service not known|Connection refused|"
                      r"Network is unreachable|Read timed out|certificate verify failed|ProxyError[^'\")]*))"
                      r"[^\n]*?(?:\)'?\)?:\s*(/\S*))?$", re.M)


def network_cause(output: str, torch_index: str) -> str | None:
    """The first index pip could not reach, named by the recipe's torch_index when the failed path is under it."""
    found = [((m.group(1) or m.group(2)).strip(), m.group(3) or "") for m in _NETWORK.finditer(output)]
    if not found:
        return None
    index_path = urlsplit(torch_index).path.rstrip("/") + "/" if torch_index else None
    torch_hits = [(reason, failed) for reason, failed in found if index_path and failed.startswith(index_path)]
    if torch_hits:
        return f"pip could not reach the torch index {torch_index}: {torch_hits[0][0]}"
    reason, failed = found[0]
    return f"pip could not reach a package index{f' ({failed})' if failed else ''}: {reason}"


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links.append(dict(attrs))


def page_url(index: str, name: str) -> str:
    return f"{index.rstrip('/')}/{canonicalize_name(name)}/"


def _opener(env: Mapping[str, str]) -> urllib.request.OpenerDirector:
    """urllib with the proxies and CA bundle of the plan's environment (never read here from os.environ)."""
    proxies = {k[:-6].lower(): v for k, v in env.items() if k.lower() in ("http_proxy", "https_proxy") and v}
    cafile = env.get("PIP_CERT") or env.get("SSL_CERT_FILE") or env.get("REQUESTS_CA_BUNDLE")
    context = ssl.create_default_context(cafile=cafile if cafile and Path(cafile).is_file() else None)
    return urllib.request.build_opener(urllib.request.ProxyHandler(proxies),
                                       urllib.request.HTTPSHandler(context=context))


def _read_page(url: str, env: Mapping[str, str]) -> str | None:
    """The page's text; None when the index has no such project (404, or no folder in a file:// index)."""
    parts = urlsplit(url)
    if parts.scheme == "file":  # a folder index, as pip reads it: the folder's index.html
        folder = Path(url2pathname(parts.path))
        page = folder / "index.html" if folder.is_dir() else folder
        if not page.is_file():
            if not folder.parent.is_dir():
                raise ToolchainError(f"cannot read the index {url}: {folder.parent} does not exist",
                                     hint="check [toolchain] torch_index")
            return None
        return page.read_text(errors="replace")
    timeout = network.settings(env).timeout_s  # pip's own default: a firewalled index must not hold `plan` long
    try:
        with _opener(env).open(urllib.request.Request(url, headers={"Accept": "text/html"}), timeout=timeout) as r:
            data: bytes = r.read()
            return data.decode(errors="replace")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise ToolchainError(f"cannot read the index {url}: HTTP {exc.code} {exc.reason}",
                             hint="check [toolchain] torch_index, or pass --offline to use the lock") from None
    except http.client.HTTPException as exc:  # not HTTP at all, or a page cut off before its length
        said = " ".join(str(exc).split())[:120]  # a status line of another protocol, on one line
        raise ToolchainError(f"the index {url} did not answer as an HTTP server does: {type(exc).__name__}"
                             f"{f' {said!r}' if said else ''}",
                             hint="check [toolchain] torch_index (the URL of a package index), or pass --offline "
                                  "to use the lock") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):  # connected (or not) and then nothing: said as such, with the knob
            raise ToolchainError(f"the index {url} did not answer in {timeout:g} s",
                                 hint=f"check the network and the proxy, or raise {network.TIMEOUT_ENV}, or pass "
                                      "--offline to use the lock") from None
        raise ToolchainError(f"the index {url} is unreachable: {reason}",
                             hint="check the network and the proxy, or pass --offline to use the lock") from None


def listed(index: str, name: str, env: Mapping[str, str]) -> list[str]:
    """The versions of `name` with a wheel for this interpreter that the index lists, oldest first."""
    url = page_url(index, name)
    text = _read_page(url, env)
    if text is None:
        return []
    parser = _Links()
    parser.feed(text)
    ours = set(tags.sys_tags())
    here = Version(".".join(map(str, sys.version_info[:3])))
    found: set[Version] = set()
    for link in parser.links:
        filename = urlsplit(urljoin(url, link.get("href") or "")).path.rsplit("/", 1)[-1]
        try:
            project, version, _, wheel_tags = parse_wheel_filename(unquote(filename))
            needs = SpecifierSet(link.get("data-requires-python") or "")
        except (InvalidWheelFilename, InvalidVersion, InvalidSpecifier):
            continue
        if project == canonicalize_name(name) and ours & wheel_tags and here in needs:
            found.add(version)
    return [str(v) for v in sorted(found)]


def is_listed(versions: list[str], want: str) -> bool:
    try:
        return Version(want) in {Version(v) for v in versions}
    except InvalidVersion:
        return False


def nearest(versions: list[str], want: str, n: int = 2) -> list[str]:
    """The listed versions closest to `want` in version order: up to `n` below it and `n` above it."""
    try:
        pivot = Version(want)
    except InvalidVersion:
        return versions[-n:]
    below = [v for v in versions if Version(v) < pivot][-n:]
    above = [v for v in versions if Version(v) > pivot][:n]
    return below + above


def newest_nightly(versions: list[str]) -> str | None:
    """The newest development release (`2.12.0.dev20260307+cu130`): what a nightly index publishes each day."""
    dev = [v for v in versions if Version(v).is_devrelease]
    return max(dev, key=Version) if dev else None
