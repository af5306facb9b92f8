"""Recipes: TOML files that name everything a build depends on.

model: the section dataclasses and `Recipe`; convert: values checked by field type;
load: finding, reading and merging (`extends`) recipe files; rules: cross-field checks;
problems: collecting every `file:line` problem; reference: the generated reference doc.
"""

from build_kernel.recipe.load import DEFAULT_ROOT, list_recipes, load, recipes_dir
from build_kernel.recipe.model import (
    SECTIONS,
    SHA_RE,
    TOP_KEYS,
    Build,
    Dep,
    LibraryRule,
    Patches,
    Publish,
    Recipe,
    Serve,
    Source,
    Toolchain,
    Verify,
)
from build_kernel.recipe.reference import reference_markdown

__all__ = [
    "DEFAULT_ROOT",
    "SECTIONS",
    "SHA_RE",
    "TOP_KEYS",
    "Build",
    "Dep",
    "LibraryRule",
    "Patches",
    "Publish",
    "Recipe",
    "Serve",
    "Source",
    "Toolchain",
    "Verify",
    "list_recipes",
    "load",
    "recipes_dir",
    "reference_markdown",
]
