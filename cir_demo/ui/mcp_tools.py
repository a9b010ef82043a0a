"""The public endpoints as MCP tools (`python app.py --mcp`), on gradio's MCP server with three changes:

- every tool answers JSON: the answer's text is `json.dumps` of the endpoint's dict (gradio sends Python's
  repr of it) and the same dict is the result's `structuredContent`; /image answers the picture and
  `{"url": ...}`;
- a file input (/search's images, /evaluate's results file) is a file path, an http(s) URL or base64
  (plain, or a `data:` URI), as the tools' descriptions say. A path is read only when the app serves
  this machine alone (`--server-name 127.0.0.1`, the default): a client elsewhere cannot name the
  server's files;
- an error quotes at most 100 characters of an input (`cut_inputs`), whoever raised it (the endpoint,
  gradio's file handling, the MCP library's schema check).

MCP calls reach the endpoints through one gradio client of the server's own, so every MCP caller shares
one session: a results file one MCP caller sends to /evaluate is named by any MCP caller, never by a page
visitor or a `gradio_client` client.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from typing import Any

import gradio as gr

from cir_demo.explorer.public_text import cut_inputs

FILE_FORMAT = (
    "a file path on the app's machine (when it serves 127.0.0.1 only), an http(s) URL, or the file's bytes "
    "as base64 (plain or a data: URI)"
)
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
_BASE64 = re.compile(r"[A-Za-z0-9+/=_-]+")


def serve_tools_as_json(demo: gr.Blocks) -> bool:
    """Adapt `demo`'s MCP server (made by `launch(mcp_server=True)`) as the module docstring says; False
    when the app serves no MCP server."""
    server = getattr(demo, "mcp_server_obj", None)
    if server is None:
        return False
    server.__class__ = _json_server_class(type(server))
    server.serves_local_files = str(getattr(demo, "server_name", "") or "") in LOCAL_HOSTS
    _answer_structured(server.mcp_server)
    return True


def _json_server_class(base: type) -> type:
    if getattr(base, "_cir_demo_json", False):
        return base

    class JsonToolServer(base):
        _cir_demo_json = True
        serves_local_files = False

        @property
        def _file_data_tool_description(self) -> str:
            return f" A file input is {FILE_FORMAT}."

        def simplify_filedata_schema(self, schema: dict[str, Any]):
            simplified, positions = super().simplify_filedata_schema(schema)
            for position in positions:
                node = simplified.get("properties", {})
                for step in position:
                    node = node[step] if isinstance(node, (dict, list)) else None
                if isinstance(node, dict):
                    node["format"] = FILE_FORMAT
            return simplified, positions

        def convert_strings_to_filedata(self, value: Any, filedata_positions: list) -> Any:
            # a position is a parameter's path in the schema: ["image"], or ["image2", "anyOf", 0] for an
            # optional file; the arguments hold the file under the parameter's name either way
            files = {p[0] for p in filedata_positions if p}
            return {k: self.file_input(v, str(k)) if k in files and isinstance(v, str) else v for k, v in value.items()}

        def file_input(self, text: str, field: str):
            """A tool's file argument as gradio's client sends a file (see the module docstring)."""
            from gradio.mcp import DEFAULT_TEMP_DIR
            from gradio.processing_utils import save_base64_to_cache
            from gradio_client import handle_file

            if text.startswith("data:"):
                return handle_file(save_base64_to_cache(text, DEFAULT_TEMP_DIR))
            if text.startswith(("http://", "https://")):
                return handle_file(text)
            path = os.path.expanduser(text)
            if self.serves_local_files and len(text) < 4096 and os.path.isfile(path):
                return handle_file(path)
            data = _base64_bytes(text)
            if data:
                uri = "data:application/octet-stream;base64," + base64.b64encode(data).decode()
                return handle_file(save_base64_to_cache(uri, DEFAULT_TEMP_DIR))
            quoted = repr(cut_inputs(text, [text]))
            if not (os.path.isabs(path) or os.sep in text):
                raise ValueError(f"{field}: {quoted} is not {FILE_FORMAT}")
            if not self.serves_local_files:
                raise ValueError(
                    f"{field}: this app serves other machines, so it reads no file path of its own; send the "
                    "file as base64 or an http(s) URL"
                )
            raise ValueError(f"{field}: no file {quoted} on the app's machine")

        def postprocess_output_data(self, data: Any, root_url: str) -> list:
            from gradio_client import utils as client_utils

            out = []
            for output in data:
                if isinstance(output, (dict, list)) and not client_utils.is_file_obj_with_meta(output):
                    out.append(self.types.TextContent(type="text", text=json.dumps(output, ensure_ascii=False)))
                    continue
                for content in super().postprocess_output_data([output], root_url):
                    if content.type == "text" and content.text.startswith("Image URL: "):
                        content = self.types.TextContent(
                            type="text", text=json.dumps({"url": content.text[len("Image URL: ") :]})
                        )
                    out.append(content)
            return out

    return JsonToolServer


def _base64_bytes(text: str) -> bytes | None:
    """The bytes `text` encodes as base64 (standard or URL-safe alphabet, whitespace ignored), or None."""
    compact = re.sub(r"\s", "", text)
    if len(compact) < 16 or not _BASE64.fullmatch(compact):
        return None
    try:
        return base64.b64decode(compact.replace("-", "+").replace("_", "/"), validate=True) or None
    except (binascii.Error, ValueError):
        return None


def _answer_structured(low) -> None:
    """Wrap the MCP server's tool-call handler: a result whose text is a JSON object also carries it as
    `structuredContent`; an error's text quotes no input beyond 100 characters."""
    try:
        from mcp import types  # gradio's MCP server runs only where the optional `mcp` package is installed
    except ImportError:
        return
    inner = low.request_handlers[types.CallToolRequest]
    if getattr(inner, "_cir_demo_json", False):
        return

    async def handler(request):
        answer = await inner(request)
        result = getattr(answer, "root", answer)
        if not isinstance(result, types.CallToolResult):
            return answer
        texts = [c for c in result.content if getattr(c, "type", None) == "text"]
        if result.isError:
            arguments = request.params.arguments or {}
            for c in texts:
                c.text = cut_inputs(c.text, arguments)
        elif result.structuredContent is None and texts:
            try:
                data = json.loads(texts[-1].text)
            except ValueError:
                data = None
            if isinstance(data, dict):
                result.structuredContent = data
        return answer

    handler._cir_demo_json = True
    low.request_handlers[types.CallToolRequest] = handler
