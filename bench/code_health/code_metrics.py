"""House metrics of build_kernel/ (issue 11): what the layout review counts.

Modules over 300 lines, functions over 60 lines, modules importing `subprocess` other than
the process module, and `os.environ` reads outside configuration (plan, mirrors, cli's
option resolution). Run before and after a refactor, on the same tree layout rules:

    python bench/code_health/code_metrics.py [--root build_kernel] [--json]
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Where reading the environment is the job: configuration resolution and the process module.
CONFIG_MODULES = {"plan.py", "config.py", "mirrors.py", "process.py"}
# Programs of their own, run by the build with the environment the tool made for it: the compiler
# launcher hands that environment on to the compiler it starts (stdlib only, for its start-up time).
# The op-count hook runs inside the server's processes, configured by the variable the serve stage sets;
# the API-key wrapper too (it reads the key file's path the unit or the serve stage sets); nvcc's path-mapping
# launcher hands the build's environment on to the nvcc it spawns.
OWN_PROGRAMS = {"recorder.py", "sitecustomize.py", "launch_with_key.py", "nvcc_paths.py"}


def metrics(package: Path) -> dict[str, object]:
    long_modules: dict[str, int] = {}
    long_functions: dict[str, int] = {}
    subprocess_imports: list[str] = []
    environ_reads: list[str] = []
    for path in sorted(package.rglob("*.py")):
        rel = str(path.relative_to(package.parent))
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > 300:
            long_modules[rel] = lines
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > 60:
                    long_functions[f"{rel}:{node.name}"] = length
            if ((isinstance(node, ast.Import) and any(a.name == "subprocess" for a in node.names)) or (
                    isinstance(node, ast.ImportFrom) and node.module == "subprocess")) and path.name != "process.py":
                subprocess_imports.append(rel)
            if (isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name)
                    and node.value.id == "os" and path.name not in CONFIG_MODULES | OWN_PROGRAMS):
                environ_reads.append(f"{rel}:{node.lineno}")
    return {
        "modules_over_300_lines": long_modules,
        "functions_over_60_lines": long_functions,
        "subprocess_imports_outside_process": sorted(set(subprocess_imports)),
        "os_environ_reads_outside_configuration": environ_reads,
        "counts": {"modules_over_300": len(long_modules), "functions_over_60": len(long_functions),
                   "subprocess_importers": len(set(subprocess_imports)), "environ_reads": len(environ_reads)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", type=Path, default=ROOT / "build_kernel")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    data = metrics(args.root)
    if args.json:
        print(json.dumps(data, indent=2))
        return
    for key, value in data.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
