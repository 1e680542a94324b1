"""The built-in tools' catalog: what the worker tells the model, without importing them.

``catalog.json`` holds, per tool of :data:`forj_py.tools.BUILTIN`, its
description, its flags and its argument schema exactly as the registry
would generate them from the tool's class.  Regenerate it after changing a
tool's ``Args``, description or flags::

    python -m forj_py.tools.catalog

``tests/test_tool_catalog.py`` checks that the file matches the code.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

CATALOG_PATH = Path(__file__).with_name("catalog.json")


def load_catalog(path: Path = CATALOG_PATH) -> dict[str, dict[str, Any]]:
    """The catalog as written; empty when the file is missing (every tool then loads eagerly)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    data: dict[str, dict[str, Any]] = json.loads(text)
    return data


def build_catalog() -> dict[str, dict[str, Any]]:
    """The catalog generated from the tools' classes (imports every tool module)."""
    from . import BUILTIN, tool_class
    from .registry import schema_of

    catalog: dict[str, dict[str, Any]] = {}
    for name in BUILTIN:
        cls = tool_class(name)
        catalog[name] = {
            "description": cls.description,
            "side_effecting": cls.side_effecting,
            "requires_approval": cls.requires_approval,
            "runs_commands": cls.runs_commands,
            "matches_words": cls.matches_words,
            "alias_of": cls.alias_of,
            "parameters": schema_of(cls),
        }
    return catalog


def render(catalog: dict[str, dict[str, Any]]) -> str:
    """The file's text: key order kept, so definitions read back byte for byte."""
    return json.dumps(catalog, indent=1, ensure_ascii=False) + "\n"


def main() -> int:
    CATALOG_PATH.write_text(render(build_catalog()), encoding="utf-8")
    print(f"wrote {CATALOG_PATH}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
