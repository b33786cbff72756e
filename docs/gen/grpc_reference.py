"""The gRPC reference: ``proto/labeldp/v1/*.proto`` compiled with their source comments (protoc's
``--include_source_info``) and rendered in place of ``<!-- proto-reference -->`` in
``reference/grpc.md``, so every service, message, field and enum value is documented from the
comment beside it in the contract itself."""

from __future__ import annotations

import tempfile
from importlib.resources import files
from pathlib import Path

import mkdocs_gen_files
from google.protobuf import descriptor_pb2
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[2]
PAGE = "reference/grpc.md"
MARKER = "<!-- proto-reference -->"

# descriptor.proto field numbers, the path elements of SourceCodeInfo.Location
MESSAGE_TYPE, ENUM_TYPE, SERVICE = 4, 5, 6
FIELD, NESTED_TYPE, NESTED_ENUM, ONEOF = 2, 3, 4, 8
ENUM_VALUE, METHOD = 2, 2

TYPE_NAMES = {
    number: name.removeprefix("TYPE_").lower()
    for name, number in descriptor_pb2.FieldDescriptorProto.Type.items()
}


def escape_pipes(text: str) -> str:
    """Escape ``|`` for a table cell, except inside code spans (where Markdown tables keep it as is)."""
    parts = text.split("`")
    return "`".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts))


def compile_protos() -> descriptor_pb2.FileDescriptorSet:
    sources = sorted(str(p.relative_to(ROOT / "proto")) for p in (ROOT / "proto").rglob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        args = ["protoc", f"-I{ROOT / 'proto'}", f"-I{files('grpc_tools') / '_proto'}"]
        rc = protoc.main([*args, "--include_source_info", f"--descriptor_set_out={out}", *sources])
        if rc != 0:
            raise RuntimeError(f"protoc failed ({rc}) on {sources}")
        return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def _comment(text: str) -> str:
    return " ".join(line.strip() for line in text.strip().splitlines())


class Comments:
    def __init__(self, file: descriptor_pb2.FileDescriptorProto) -> None:
        self.by_path = {tuple(loc.path): loc for loc in file.source_code_info.location}

    def of(self, *path: int) -> str:
        loc = self.by_path.get(path)
        if loc is None:
            return ""
        return " ".join(_comment(c) for c in (loc.leading_comments, loc.trailing_comments) if c.strip())

    def file_header(self) -> str:
        """The comment block at the top of the file (protoc attaches it to ``syntax``, path 12)."""
        loc = self.by_path.get((12,))
        if loc is None:
            return ""
        return "\n".join(line.strip() for line in loc.leading_comments.strip().splitlines())


def cell(text: str) -> str:
    return escape_pipes(text)


def field_type(field: descriptor_pb2.FieldDescriptorProto) -> str:
    if field.type_name:
        name = field.type_name.rsplit(".", 1)[-1]
        kind = f"[{name}](#{name.lower()})"
    else:
        kind = TYPE_NAMES[field.type]
    if field.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED:
        return f"repeated {kind}"
    return kind


def render_file(file: descriptor_pb2.FileDescriptorProto) -> list[str]:
    c = Comments(file)
    lines = [f"### `{file.name}` (package `{file.package}`)", ""]
    if header := c.file_header():
        lines += [header.replace("\n", " "), ""]
    for si, service in enumerate(file.service):
        lines += [f"#### service {service.name} {{#{service.name.lower()}}}", ""]
        if doc := c.of(SERVICE, si):
            lines += [doc, ""]
        lines += ["| method | request | answer | what |", "|---|---|---|---|"]
        for mi, method in enumerate(service.method):
            request = method.input_type.rsplit(".", 1)[-1]
            answer = method.output_type.rsplit(".", 1)[-1]
            stream = "stream " if method.client_streaming else ""
            back = "stream " if method.server_streaming else ""
            what = cell(c.of(SERVICE, si, METHOD, mi)) or "—"
            lines.append(
                f"| `{method.name}` | {stream}[{request}](#{request.lower()}) "
                f"| {back}[{answer}](#{answer.lower()}) | {what} |"
            )
        lines.append("")
    for ei, enum in enumerate(file.enum_type):
        lines += [f"#### enum {enum.name} {{#{enum.name.lower()}}}", ""]
        if doc := c.of(ENUM_TYPE, ei):
            lines += [doc, ""]
        lines += ["| value | number | meaning |", "|---|---|---|"]
        for vi, value in enumerate(enum.value):
            lines.append(
                f"| `{value.name}` | {value.number} | {cell(c.of(ENUM_TYPE, ei, ENUM_VALUE, vi)) or '—'} |"
            )
        lines.append("")
    for mi, message in enumerate(file.message_type):
        lines += [f"#### message {message.name} {{#{message.name.lower()}}}", ""]
        if doc := c.of(MESSAGE_TYPE, mi):
            lines += [doc, ""]
        lines += ["| field | number | type | meaning |", "|---|---|---|---|"]
        for fi, field in enumerate(message.field):
            oneof = (
                f" (one of `{message.oneof_decl[field.oneof_index].name}`)"
                if field.HasField("oneof_index")
                else ""
            )
            lines.append(
                f"| `{field.name}` | {field.number} | {field_type(field)} | "
                f"{cell(c.of(MESSAGE_TYPE, mi, FIELD, fi)) or '—'}{oneof} |"
            )
        lines.append("")
    return lines


def main() -> None:
    protos = compile_protos()
    generated = [
        "<!-- generated by docs/gen/grpc_reference.py from proto/labeldp/v1/*.proto: edit their comments -->",
        "",
    ]
    for file in protos.file:
        if file.name.startswith("labeldp/"):
            generated += render_file(file)
    page = (ROOT / "docs" / PAGE).read_text()
    if MARKER not in page:
        raise RuntimeError(f"docs/{PAGE} lost its {MARKER} line")
    with mkdocs_gen_files.open(PAGE, "w") as f:
        f.write(page.replace(MARKER, "\n".join(generated)))


main()
