"""The sha256 an index says it holds for one file: from the `#sha256=` of its PEP 503 project page.

An upload index refuses to overwrite (pypiserver: HTTP 409; others: 400 "already exists"),
so a second publish of a version has to ask the index what it holds to tell "the same
bytes again" (a success) from "other bytes under that version" (refused). A page without
a hash, or an index that cannot be read, leaves the answer to the install-back, which
compares the bytes pip fetched.
"""

from __future__ import annotations

import base64
import re
import urllib.error
import urllib.request
from pathlib import PurePosixPath
from urllib.parse import unquote, urljoin, urlsplit

from packaging.utils import canonicalize_name

from build_kernel.stages.publish.targets import Target

PAGE_TIMEOUT_S = 30.0
_LINK = re.compile(r"""<a\s[^>]*href=["']([^"']+)["']""", re.IGNORECASE)


def hashes_on_page(html: str, page_url: str) -> dict[str, str]:
    """File name -> sha256 of every link on a simple page that carries `#sha256=` (others are left out)."""
    found: dict[str, str] = {}
    for href in _LINK.findall(html):
        url = urljoin(page_url, href.replace("&amp;", "&"))
        parts = urlsplit(url)
        algo, _, digest = parts.fragment.partition("=")
        if algo == "sha256" and digest:
            found[unquote(PurePosixPath(parts.path).name)] = digest.lower()
    return found


def published_sha256(target: Target, project: str, filename: str) -> str | None:
    """The sha256 the index's simple page gives for `filename`; None when it cannot say."""
    page = f"{target.simple_url.rstrip('/')}/{canonicalize_name(project)}/"
    request = urllib.request.Request(page, headers={"Accept": "text/html"})
    if target.username and target.password:
        token = base64.b64encode(f"{target.username}:{target.password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=PAGE_TIMEOUT_S) as resp:
            html = resp.read().decode("utf-8", "replace")
            final = resp.geturl()
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return hashes_on_page(html, final).get(filename)
