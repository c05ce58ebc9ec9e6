"""The ``PYTHONPATH`` of a child Python process that imports this checkout: the project's
root first, then whatever the caller's path held (packages installed beside the project)."""

import os
from collections.abc import Mapping
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def project_first(root: Path = PROJECT_ROOT, environ: Mapping[str, str] = os.environ) -> str:
    return os.pathsep.join(filter(None, [str(root), environ.get("PYTHONPATH")]))
