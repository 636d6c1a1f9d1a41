"""The settings tables of the docs, generated from the component types' schemas.

``python -m components.reference`` rewrites them in ``docs/configuration.md``, between
:data:`BEGIN` and :data:`END`; ``tests/components/test_reference.py`` fails when the page
and the schemas drift apart. A table lists each YAML key of a type with the type and
default of the resource field it comes from, the environment variable that overrides it,
and the resource's own description.
"""

from __future__ import annotations

import sys
from pathlib import Path

from components.fields import DEFAULT, PROJECT_ROOT, TYPE
from components.site import Site
from components.sources import SOURCE_TYPES, GridIntensity

#: The types in the order the page lists them.
TYPES = [Site, *SOURCE_TYPES, GridIntensity]
PAGE = PROJECT_ROOT / "docs" / "configuration.md"
BEGIN = ("<!-- The settings below are generated from the component types by "
         "`python -m components.reference`: do not edit them here. -->")
END = "<!-- End of the generated settings. -->"


def cell(text: str) -> str:
    """``text`` (reStructuredText literals allowed) on one line of a Markdown table cell."""
    text = " ".join(text.split()).replace("``", "`").replace("|", "\\|")
    return text.replace("<", "&lt;").replace(">", "&gt;")


def table(kind: type) -> str:
    """The section of one component type: its docstring's first paragraph, then a row per
    YAML key."""
    summary = cell((kind.__doc__ or "").strip().split("\n\n")[0])
    rows = [f"### `components.{kind.__name__}`", "", summary, "",
            "| key | type | default | overridden by | meaning |", "|---|---|---|---|---|"]
    variables = kind.variables()
    for name, info in kind.model_fields.items():
        extra = info.json_schema_extra
        variable = f"`{variables[name]}`" if name in variables else ""
        rows.append(f"| `{name}` | {cell(f'`{extra[TYPE]}`')} | `{extra[DEFAULT]}` | "
                    f"{variable} | {cell(info.description or '')} |")
    return "\n".join(rows)


def tables() -> str:
    """Every type's section, between the markers."""
    return "\n\n".join([BEGIN, *map(table, TYPES), END])


def rewritten(page: str) -> str:
    """``page`` with its generated settings replaced by :func:`tables`."""
    before, _, rest = page.partition(BEGIN)
    _, _, after = rest.partition(END)
    return before + tables() + after


def main(page: Path = PAGE) -> int:
    """Rewrites the settings of ``page``; 1 when it has no markers."""
    text = page.read_text()
    if BEGIN not in text or END not in text:
        print(f"{page}: no generated settings ({BEGIN!r} ... {END!r})", file=sys.stderr)
        return 1
    page.write_text(rewritten(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
