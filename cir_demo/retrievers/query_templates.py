"""Query templates: how a benchmark's query becomes the text a retriever encodes, as data.

A template is a string with fields in braces and optional filters: "{captions.0|strip|capitalize} and
{captions.1|strip}". Fields: `instruction` (the query's instruction as loaded), `shared_concept`
(CIRCO), `captions.0` / `captions.1` (FashionIQ's two captions). Filters: `strip` (strip '.?, ' at both
ends, CLIP4Cir's rule), `capitalize` (str.capitalize: first letter up, the rest down), `lower`.

Which template a run uses: the retriever config's own `query_templates[<benchmark>]`, else its family's
entry in configs/query_templates.json, else the `*` entry there, else none (the instruction as loaded,
byte for byte: the world, PinPoint, EDIR and JSONL benchmarks have no entry).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

DEFAULTS_PATH = Path(__file__).parent / "configs" / "query_templates.json"
_FIELD = re.compile(r"\{([a-z_]+(?:\.\d+)?)((?:\|[a-z]+)*)\}")
FILTERS = {"strip": lambda s: s.strip(".?, "), "capitalize": str.capitalize, "lower": str.lower}
FIELDS = ("instruction", "shared_concept", "captions.0", "captions.1")


class TemplateError(ValueError):
    """A template names an unknown field or filter, or a query lacks a field it needs."""


@lru_cache(maxsize=1)
def family_defaults() -> dict[str, dict[str, dict[str, str]]]:
    data = json.loads(DEFAULTS_PATH.read_text(encoding="utf-8"))
    return {k: v for k, v in data.items() if not k.startswith("_")}


def check_template(template: Any, where: str) -> str:
    """The template, or TemplateError naming `where` and the unknown field or filter."""
    if not isinstance(template, str) or not template.strip():
        raise TemplateError(f"{where}: a query template must be a non-empty string, got {template!r}")
    for m in _FIELD.finditer(template):
        if m.group(1) not in FIELDS:
            raise TemplateError(f"{where}: unknown field {{{m.group(1)}}} in {template!r}; fields: {', '.join(FIELDS)}")
        for f in m.group(2).split("|")[1:]:
            if f not in FILTERS:
                raise TemplateError(f"{where}: unknown filter |{f} in {template!r}; filters: {', '.join(FILTERS)}")
    return template


def resolve(config: Mapping[str, Any], benchmark: str) -> dict[str, str] | None:
    """{"template", "source"} for `benchmark` under this retriever config, or None (instruction as loaded)."""
    own = (config.get("query_templates") or {}).get(benchmark)
    if own is not None:
        return {"template": own, "source": f"retriever config {config.get('name')!r}"}
    defaults = family_defaults()
    for key in (config.get("family"), "*"):
        entry = defaults.get(key, {}).get(benchmark)
        if entry is not None:
            return {"template": entry["template"], "source": entry["source"] + f" (default for family {key!r})"}
    return None


def effective_templates(config: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """Every benchmark with a template for this retriever config -> {"template", "source"}."""
    names = set(config.get("query_templates") or {})
    for entries in family_defaults().values():
        names.update(entries)
    out = {b: resolve(config, b) for b in sorted(names)}
    return {b: t for b, t in out.items() if t is not None}


def render(template: str, query) -> str:
    """The text of `query` under `template` (TemplateError naming the query when a field is missing)."""

    def field(m: re.Match) -> str:
        name, filters = m.group(1), m.group(2).split("|")[1:]
        if name == "instruction":
            value = query.instruction
        elif name.startswith("captions."):
            captions = query.meta.get("captions") or ()
            i = int(name.split(".")[1])
            value = captions[i] if i < len(captions) else None
        else:
            value = query.meta.get(name)
        if not isinstance(value, str):
            raise TemplateError(f"query {query.query_id}: the template needs {{{name}}}, which this query lacks")
        for f in filters:
            value = FILTERS[f](value)
        return value

    return _FIELD.sub(field, template)
