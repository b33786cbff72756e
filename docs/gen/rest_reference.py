"""The REST reference: each party's OpenAPI document, built from its app at build time and rendered as
Markdown (no Swagger UI or ReDoc assets, so the site needs no network to build or to read).

Writes ``reference/rest/labels.md``, ``reference/rest/features.md`` and, beside them, the two
documents themselves (``labels-openapi.json``, ``features-openapi.json``) for generators.
"""

from __future__ import annotations

import html
import json
import logging
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import mkdocs_gen_files

Schema = dict[str, Any]
METHODS = ("get", "put", "post", "patch", "delete")


def escape_pipes(text: str) -> str:
    """Escape ``|`` for a table cell, except inside code spans (where Markdown tables keep it as is)."""
    parts = text.split("`")
    return "`".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts))


def _labels_openapi(root: Path) -> Schema:
    from labels_party.api.app import create_app
    from labels_party.config import LabelsSettings

    return create_app(LabelsSettings(data_dir=root / "labels")).openapi()


def _features_openapi(root: Path) -> Schema:
    from features_party.api.app import create_app
    from features_party.config import FeaturesSettings

    return create_app(FeaturesSettings(data_dir=root / "features")).openapi()


def route_cell(method: str, path: str) -> str:
    """``GET /v1/datasets/{dataset_id}`` as code that may break only after a slash (``<wbr>``), never
    inside a word: the summary table keeps its summaries readable on a narrow page."""
    return f"<code>{method.upper()} {html.escape(path).replace('/', '/<wbr>')}</code>"


def cell(text: object) -> str:
    """Text for one table cell: one line, pipes escaped, RST double backticks as Markdown code."""
    s = re.sub(r"``([^`]+)``", r"`\1`", str(text))
    return escape_pipes(" ".join(s.split()))


def prose(text: str) -> str:
    return re.sub(r"``([^`]+)``", r"`\1`", text).strip()


def ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def schema_anchor(name: str) -> str:
    return "schema-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def type_of(schema: Schema) -> str:
    """A short type expression with links to named schemas."""
    if "$ref" in schema:
        name = ref_name(schema["$ref"])
        return f"[{name}](#{schema_anchor(name)})"
    alternatives = schema.get("anyOf", schema.get("oneOf"))
    if alternatives is not None:
        return " or ".join(dict.fromkeys(type_of(s) for s in alternatives))
    if "allOf" in schema:
        return " and ".join(type_of(s) for s in schema["allOf"])
    if "enum" in schema or "const" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema.get("enum", [schema.get("const")]))
    return _plain_type(schema)


def _plain_type(schema: Schema) -> str:
    kind = schema.get("type")
    if kind == "array":
        return f"array of {type_of(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {type_of(schema['additionalProperties'])}"
    if kind == "string" and schema.get("format") == "binary":
        return "file"
    if isinstance(kind, list):
        return " or ".join(kind)
    return str(kind or "any")


def constraints(schema: Schema) -> str:
    """Bounds, lengths and patterns of a schema (and of each alternative of an ``anyOf``)."""
    found: list[str] = []
    for s in [schema, *schema.get("anyOf", [])]:
        for key, word in (
            ("minimum", "≥"),
            ("exclusiveMinimum", ">"),
            ("maximum", "≤"),
            ("exclusiveMaximum", "<"),
        ):
            if key in s:
                found.append(f"{word} {s[key]:g}")
        for key, word in (("minLength", "length ≥"), ("maxLength", "length ≤"), ("maxItems", "items ≤")):
            if key in s:
                found.append(f"{word} {s[key]}")
        if "pattern" in s:
            found.append(f"pattern `{s['pattern']}`")
    return ", ".join(dict.fromkeys(found))


def _operations(doc: Schema) -> Iterator[tuple[str, str, Schema]]:
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method in item:
                yield method, path, item[method]


def operation_anchor(op: Schema) -> str:
    return "op-" + op["operationId"].replace("_", "-")


def render_operation(method: str, path: str, op: Schema) -> list[str]:
    lines = [f"### `{method.upper()} {path}` {{#{operation_anchor(op)}}}", ""]
    lines += [f"**{op.get('summary', op['operationId'])}** · operation `{op['operationId']}`", ""]
    if op.get("description"):
        lines += [prose(op["description"]), ""]
    auth = "bearer key" if op.get("security") else "none"
    lines += [f"Authentication: {auth}.", ""]
    params = op.get("parameters", [])
    if params:
        lines += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
        for p in params:
            schema = p.get("schema", {})
            desc = p.get("description") or schema.get("description", "")
            extra = constraints(schema)
            if "default" in schema:
                extra = ", ".join(x for x in (extra, f"default `{json.dumps(schema['default'])}`") if x)
            lines.append(
                f"| `{p['name']}` | {p['in']} | {type_of(schema)} | {'yes' if p.get('required') else 'no'} "
                f"| {cell(desc)}{' (' + cell(extra) + ')' if extra else ''} |"
            )
        lines.append("")
    body = op.get("requestBody")
    if body:
        lines.append(
            "Request body" + (f": {cell(body['description'])}" if body.get("description") else "") + "."
        )
        lines.append("")
        for media, content in body.get("content", {}).items():
            lines.append(f"- `{media}`: {type_of(content.get('schema', {}))}")
        lines.append("")
    lines += ["| status | meaning | body |", "|---|---|---|"]
    for status, answer in sorted(op.get("responses", {}).items()):
        contents = answer.get("content", {})
        bodies = ", ".join(
            f"`{media}` {type_of(c['schema'])}" if c.get("schema") else f"`{media}`"
            for media, c in contents.items()
        )
        lines.append(f"| {status} | {cell(answer.get('description', ''))} | {bodies or '—'} |")
    lines.append("")
    return lines


def render_schema(name: str, schema: Schema) -> list[str]:
    lines = [f"### {name} {{#{schema_anchor(name)}}}", ""]
    if schema.get("description"):
        lines += [prose(schema["description"]), ""]
    props: dict[str, Schema] = schema.get("properties", {})
    if not props:
        lines += [f"Type: {type_of(schema)}.", ""]
        return lines
    required = set(schema.get("required", []))
    lines += ["| field | type | required | description |", "|---|---|---|---|"]
    for field, prop in props.items():
        notes = [cell(prop.get("description", ""))]
        if extra := constraints(prop):
            notes.append(f"({cell(extra)})")
        if "default" in prop:
            notes.append(f"default `{cell(json.dumps(prop['default'], ensure_ascii=False))}`")
        lines.append(
            f"| `{field}` | {type_of(prop)} | {'yes' if field in required else 'no'} | "
            f"{' '.join(n for n in notes if n)} |"
        )
    if schema.get("additionalProperties") is True:
        lines += ["", "Further members may be present."]
    lines.append("")
    return lines


def render(doc: Schema, party: str, json_name: str) -> str:
    info = doc["info"]
    lines = [
        f"# {info['title']}: REST reference",
        "",
        "<!-- generated by docs/gen/rest_reference.py from the app's OpenAPI document: do not edit -->",
        "",
        f"{prose(info.get('description', ''))} OpenAPI {doc['openapi']}, API version {info['version']}.",
        f"This page is built from the live application's OpenAPI document ([{json_name}]({json_name})),",
        "the same document the service answers at `/openapi.json` and shows at `/docs` and `/redoc`.",
        "Conventions shared by both parties (authentication, pages, errors, limits) are in",
        "[REST conventions](../rest.md).",
        "",
    ]
    schemes = doc.get("components", {}).get("securitySchemes", {})
    for scheme_name, scheme in schemes.items():
        kind = scheme.get("scheme", scheme["type"])
        lines += [f"Authentication `{scheme_name}` ({kind}): {prose(scheme.get('description', ''))}", ""]
    by_tag: dict[str, list[tuple[str, str, Schema]]] = {}
    for method, path, op in _operations(doc):
        by_tag.setdefault((op.get("tags") or ["other"])[0], []).append((method, path, op))
    # in a .rest-summary block: the site's CSS keeps operation names whole (docs/assets/stylesheets)
    lines += ["## Summary", "", '<div class="rest-summary" markdown>', ""]
    lines += ["| operation | route | summary |", "|---|---|---|"]
    for method, path, op in _operations(doc):
        lines.append(
            f"| [`{op['operationId']}`](#{operation_anchor(op)}) | {route_cell(method, path)} | "
            f"{cell(op.get('summary', ''))} |"
        )
    lines += ["", "</div>", ""]
    for tag, ops in by_tag.items():
        lines += [f"## {tag.capitalize()}", ""]
        for method, path, op in ops:
            lines += render_operation(method, path, op)
    lines += ["## Schemas", ""]
    for name, schema in sorted(doc.get("components", {}).get("schemas", {}).items()):
        lines += render_schema(name, schema)
    return "\n".join(lines) + "\n"


def main() -> None:
    logging.getLogger("labeldp").setLevel(logging.WARNING)
    parties: dict[str, Callable[[Path], Schema]] = {"labels": _labels_openapi, "features": _features_openapi}
    with tempfile.TemporaryDirectory() as tmp:
        for party, build in parties.items():
            doc = build(Path(tmp))
            json_name = f"{party}-openapi.json"
            with mkdocs_gen_files.open(f"reference/rest/{json_name}", "w") as f:
                json.dump(doc, f, indent=1, ensure_ascii=False)
            with mkdocs_gen_files.open(f"reference/rest/{party}.md", "w") as f:
                f.write(render(doc, party, json_name))


main()
