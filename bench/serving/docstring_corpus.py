"""The tiny MoE's training text and its held-out prompts: Python's own docstrings (issue 70 item 1).

The model must learn something general, not recite its prompts: it trains on the docstrings of the standard
library that the running Python ships (its `stdlib` folder, no test suites, no third-party packages) and is
prompted with the summary lines of docstrings from OTHER modules, which it never saw. A module is held out by
its path's hash (one in HELD_OUT_OF), so the split does not depend on the file order or on how many files a
Python version has. Every held-out prompt is checked absent from the training text (`check_disjoint`).

    python bench/serving/docstring_corpus.py [--stdlib DIR]     # sizes, the split and the first prompts
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

HELD_OUT_OF = 8  # a module is held out when its path's sha256 is 0 mod this: about 1 in 8
# Folders of the stdlib that are not the library's own documentation: test suites, installed packages, tools.
SKIP = re.compile(r"(^|/)(test|tests|idle_test|site-packages|dist-packages|__pycache__|lib2to3/tests)(/|$)")
# A prompt is a summary line of a held-out docstring: a sentence of a few words, ASCII, no doctest or markup.
PROMPT = re.compile(r"^[A-Z][A-Za-z0-9 ,;:'()\-]{14,90}\.$")
PROMPT_WORDS = (4, 14)


@dataclass(frozen=True)
class Corpus:
    train: list[str]  # the training docstrings, whitespace-normalised, in module order
    held_out: list[str]  # the held-out modules' docstrings (the held-out loss is measured on them)
    prompts: list[str]  # candidate prompts: distinct summary lines of held-out docstrings, in module order
    stdlib: str
    modules: tuple[int, int]  # (training modules, held-out modules)

    def sha256(self) -> str:
        return hashlib.sha256(json.dumps([self.train, self.held_out]).encode()).hexdigest()


def _normal(text: str) -> str:
    return " ".join(text.split())


def _docstrings(path: Path) -> list[str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []  # a few stdlib files are templates or not UTF-8: left out, the same way every time
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))]
    found = (ast.get_docstring(n, clean=True) for n in nodes)
    return [d for d in found if d and d.isascii()]


def held_out(rel: str) -> bool:
    return int(hashlib.sha256(rel.encode()).hexdigest(), 16) % HELD_OUT_OF == 0


def summary_line(doc: str) -> str | None:
    first = _normal(doc.split("\n\n")[0])
    words = len(first.split())
    return first if PROMPT.match(first) and PROMPT_WORDS[0] <= words <= PROMPT_WORDS[1] else None


def build(stdlib: Path | None = None) -> Corpus:
    root = Path(stdlib or sysconfig.get_paths()["stdlib"])
    train: list[str] = []
    held: list[str] = []
    prompts: list[str] = []
    counts = [0, 0]
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if SKIP.search(rel):
            continue
        docs = _docstrings(path)
        if not docs:
            continue
        out = held_out(rel)
        counts[out] += 1
        (held if out else train).extend(_normal(d) for d in docs)
        if out:
            prompts.extend(p for p in map(summary_line, docs) if p and p not in prompts)
    text = "\n".join(train)
    # A summary line may be shared by two modules (a copied docstring): one seen in training is no held-out prompt.
    prompts = [p for p in prompts if p not in text]
    return Corpus(train, held, prompts, str(root), (counts[0], counts[1]))


def check_disjoint(prompts: list[str], train: list[str]) -> None:
    """Raise if a prompt repeats or occurs anywhere in the training text."""
    if len(set(prompts)) != len(prompts):
        raise SystemExit("docstring_corpus: the prompts repeat")
    text = "\n".join(train)
    seen = [p for p in prompts if p in text]
    if seen:
        raise SystemExit(f"docstring_corpus: {len(seen)} prompt(s) occur in the training text, e.g. {seen[0]!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stdlib", type=Path, default=None)
    args = parser.parse_args()
    c = build(args.stdlib)
    check_disjoint(c.prompts, c.train)
    print(json.dumps({"stdlib": c.stdlib, "modules": c.modules, "train_docstrings": len(c.train),
                      "train_chars": sum(map(len, c.train)), "held_out_docstrings": len(c.held_out),
                      "held_out_chars": sum(map(len, c.held_out)), "prompts": len(c.prompts),
                      "sha256": c.sha256(), "first_prompts": c.prompts[:5]}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
