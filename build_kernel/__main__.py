from __future__ import annotations

from build_kernel.cli import main

main()
