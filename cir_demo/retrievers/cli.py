"""`python -m cir_demo retrievers list [--json]` / `retrievers show NAME`: the declared retrievers.

Listing reads only the JSON configs (no model is loaded, no heavy import).
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from cir_demo.retrievers.registry import FAMILIES

    sub = parser.add_subparsers(dest="retrievers_command", metavar="ACTION")
    p_list = sub.add_parser("list", help="list the declared retrievers")
    p_list.add_argument("--json", action="store_true", help="print the rows as JSON")
    p_list.add_argument("--family", help=f"only this family ({', '.join(FAMILIES)})")
    p_show = sub.add_parser("show", help="print one retriever's config and where it was declared")
    p_show.add_argument("name")


def add_retriever_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """The options any command that loads a retriever shares (index build, eval, app)."""
    parser.add_argument(
        "--retriever",
        required=required,
        metavar="NAME",
        help="a retriever name (see `python -m cir_demo retrievers list`)",
    )
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow retrievers that run code from their model repository (BGE-VL, GME)",
    )


def retriever_from_args(args: argparse.Namespace, progress: bool = True):
    """Load the retriever the shared options name."""
    from cir_demo.retrievers.registry import load_retriever

    return load_retriever(
        args.retriever, device=args.device, trust_remote_code=args.trust_remote_code, progress=progress
    )


def _family_says(row: dict, hook: str, default):
    """What the row's family module answers to `hook(config)` (see the family protocol in registry.py)."""
    from cir_demo.retrievers.registry import family_module

    answer = getattr(family_module(row["family"]), hook, None)
    return answer(row) if answer is not None else default


def _format_table(rows: list[dict]) -> str:
    headers = ("name", "family", "model", "recipe", "status")
    table = []
    for r in rows:
        status = []
        if r["missing"]:
            status.append("missing: " + ", ".join(r["missing"]))
        if r["needs_remote_code"]:
            status.append("needs --trust-remote-code")
        status += _family_says(r, "problems", [])
        key_env = _family_says(r, "api_key_env", None)
        if key_env and not os.environ.get(key_env):
            status.append(f"needs ${key_env}")
        pin = r.get("transformers_pin")
        if pin:
            status.append(f"transformers{pin['spec']}" + (" (required)" if pin.get("hard") else " (recommended)"))
        recipe = r["recipe"] or _family_says(r, "recipe_label", "native")
        if r["recipe"] and r["params"]:
            recipe += "(" + ", ".join(f"{k}={v}" for k, v in r["params"].items() if k in ("text_weight", "t")) + ")"
        model = r["model"] or ""
        if r["pretrained"]:
            model += f" / {r['pretrained']}"
        table.append((r["name"], r["family"], model, recipe, "; ".join(status) or "ok"))
    widths = [max(len(h), *(len(row[i]) for row in table)) if table else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from cir_demo.retrievers import registry
    from cir_demo.utils.names import UnknownNameError

    action = getattr(args, "retrievers_command", None) or "list"
    if action == "show":
        try:
            cfg = registry.get_config(args.name)
        except UnknownNameError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        from cir_demo.retrievers.query_templates import effective_templates

        print(
            json.dumps(
                {
                    "source": registry.config_source(args.name),
                    "config": cfg,
                    "query_templates": effective_templates(cfg),
                },
                indent=2,
            )
        )
        return 0
    rows = registry.list_retrievers()
    family = getattr(args, "family", None)
    if family:
        if family not in registry.FAMILIES:
            print(f"error: {UnknownNameError('retriever family', family, registry.FAMILIES)}", file=sys.stderr)
            return 2
        rows = [r for r in rows if r["family"] == family]
    if getattr(args, "json", False):
        print(json.dumps(rows, indent=2))
    else:
        print(_format_table(rows))
    return 0
