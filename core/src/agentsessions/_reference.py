"""Render the backend author's reference (`agentsessions.backend`) as one Markdown file.

``python -m agentsessions._reference docs/backend-reference.md`` writes it; with
``--check`` it only compares and exits 1 if the file differs. Everything comes from
the source: the hooks and helpers `_hooks` declares (`HOOKS`, `HELPERS`), then every
name `agentsessions.backend` exports, each with its signature or declaration as
written and its whole docstring (or ``#:`` comment), so the reference reads on GitHub
without a docs build and a test keeps the committed file equal to the code.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import re
import sys
from collections.abc import Iterator, Sequence
from functools import cache
from pathlib import Path

from . import _hooks, backend

__all__ = ["CONSTRUCTION", "GROUPS", "main", "markdown", "render", "slug"]

#: The sections of everything else `agentsessions.backend` exports, in reading order;
#: `render` refuses an export that no section lists, so a new one gets a place.
GROUPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "Construction",
        "How `connect()` builds a manager: `from_url` splits the URL, `parse_options` "
        "validates the options, then the class is called with the URL and the options "
        "(see the guide's [constructor contract](backend-authors.md#the-constructor)).",
        ("SessionManager",),
    ),
    (
        "Records a hook receives and returns",
        "Plain frozen records: the manager builds them from validated, encoded input.",
        (
            "SessionRecord",
            "EventRecord",
            "LoadedSession",
            "SaveRequest",
            "CompactRequest",
            "ForkRequest",
            "RewindRequest",
        ),
    ),
    (
        "Capabilities, options and limits",
        "What a backend declares, the options model it extends, and the bounds every "
        "backend shares.",
        (
            "Capabilities",
            "ManagerOptions",
            "OptionConflict",
            "Timeout",
            "PoolSize",
            "MAX_TIMEOUT",
            "MAX_POOL_SIZE",
            "MAX_TTL",
            "MAX_LAST_EVENTS",
            "TOKENS_KEPT",
            "SchemaTooNewError",
        ),
    ),
    (
        "Moving records in and out of an engine",
        "Encoding and decoding rows, timestamps, cursors and lineage; the error of a "
        "refused write.",
        (
            "decode_events",
            "decode_record",
            "decode_summary",
            "encode_record",
            "to_micros",
            "from_micros",
            "expiry_millis",
            "encode_cursor",
            "decode_cursor",
            "stamp_lineage",
            "unstamp_lineage",
            "fork_fields",
            "fork_origin",
            "fork_by_copy",
            "refused",
            "validate_id",
        ),
    ),
    (
        "URLs and secrets",
        "Parsing a server URL (the backend's job, in `__init__`) and keeping the "
        "password out of every message.",
        (
            "parse_server_url",
            "ServerURL",
            "split_url",
            "mask_url",
            "scrub_secret",
            "PERCENT_ENCODING_HINT",
        ),
    ),
    (
        "Driver errors, connections and locks",
        "",
        ("ErrorRule", "PerLoop", "LoopLock", "in_driven_loop"),
    ),
    (
        "Reporting on the server",
        "For `_diagnose` (`agentsessions doctor`).",
        ("Finding", "Severity", "finding", "clock_skew", "schema_version", "encryption_at_rest"),
    ),
    (
        "Registering the backend",
        "",
        ("BackendSpec", "hookimpl", "hookspec"),
    ),
)
#: What `SessionManager` shows under "Construction": the rest is the public API or hooks.
CONSTRUCTION = ("__init__", "from_url", "parse_options", "with_options")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SECTION = re.compile(r"^(Args|Returns|Yields|Raises|Attributes):\s*$")
_ITEM = re.compile(r"^(\S[^:]*?):\s*(.*)$")
# What `render` found without a docstring or comment: it refuses to render without one.
_undocumented: list[str] = []
_REGENERATE = "uv run python -m agentsessions._reference docs/backend-reference.md"


def slug(heading: str) -> str:
    """The anchor both GitHub and MkDocs give a heading (word characters, ``-``, ``_``)."""
    text = re.sub(r"[^\w\s-]", "", heading).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


@cache
def _source(module: str) -> tuple[str, ast.Module]:
    text = Path(inspect.getfile(importlib.import_module(module))).read_text(encoding="utf-8")
    return text, ast.parse(text)


def _top_level(tree: ast.Module) -> Iterator[ast.stmt]:
    """The module's statements, including those inside ``with``/``if``/``try`` blocks."""
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, (ast.With, ast.If, ast.Try)):
            pending[:0] = [*node.body, *getattr(node, "orelse", [])]
        else:
            yield node


def _assigned(node: ast.stmt) -> str | None:
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    return None


def _definition(module: str, name: str) -> tuple[str, str, ast.stmt]:
    """The module that defines *name* (following ``from . import``), its text and node."""
    text, tree = _source(module)
    for node in _top_level(tree):
        defined = node.name if isinstance(node, (ast.ClassDef, *_FUNCTIONS)) else None
        if name in (defined, _assigned(node)):
            return module, text, node
    for node in _top_level(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == name for a in node.names):
            package = module.rsplit(".", node.level)[0]
            relative = f"{package}.{node.module}" if node.module else package
            return _definition(relative if node.level else str(node.module), name)
    raise LookupError(f"{name} is neither defined nor imported in {module}")


def _comment(text: str, node: ast.stmt) -> list[str]:
    """The ``#:`` comment lines right above *node*, without the ``#:``."""
    lines = text.splitlines()[: node.lineno - 1]
    found: list[str] = []
    while lines and lines[-1].strip().startswith("#:"):
        found.insert(0, lines.pop().strip()[2:].strip())
    return found


def _segment(text: str, node: ast.AST) -> str:
    segment = ast.get_source_segment(text, node, padded=True) or ""
    return inspect.cleandoc(segment) if "\n" in segment else segment.strip()


def _header(text: str, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> str:
    """The ``def``/``class`` line(s) as written, without decorators, body or final colon."""
    lines = text.splitlines(keepends=True)
    start = sum(len(line) for line in lines[: node.lineno - 1]) + node.col_offset
    body = node.body[0]
    end = sum(len(line) for line in lines[: body.lineno - 1]) + body.col_offset
    header = text[start:end].rstrip().removesuffix(":")
    indent = " " * node.col_offset
    return "\n".join(line.removeprefix(indent) for line in header.splitlines())


def _decorators(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    names = [ast.unparse(decorator).rpartition(".")[2] for decorator in node.decorator_list]
    labels = {
        "abstractmethod": "abstract: every backend implements it",
        "property": "property",
        "classmethod": "classmethod",
        "staticmethod": "staticmethod",
    }
    return [labels[name] for name in names if name in labels]


def markdown(doc: str) -> str:
    """A Google-style docstring as Markdown: its ``Args:``-like sections become lists."""
    out: list[str] = []
    section = ""
    for line in doc.splitlines():
        match = _SECTION.match(line)
        if match:
            section = match.group(1)
            out += ["", f"**{section}:**", ""]
            continue
        if section and line and not line.startswith(" "):
            section = ""
            out.append("")
        if not section:
            out.append(line)
        elif section in ("Args", "Raises", "Attributes") and re.match(r"^ {4}\S", line):
            item = _ITEM.match(line.strip())
            out.append(f"- `{item.group(1)}`: {item.group(2)}" if item else f"- {line.strip()}")
        elif line.strip():
            text = line.strip()
            # A continuation: of a list item, or of a Returns: paragraph.
            if out and out[-1] and not out[-1].startswith("**"):
                out[-1] += f" {text}"
            else:
                out.append(text)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


def _code(text: str) -> list[str]:
    # "python3", not "python": highlighted the same, but these declarations are not
    # programs, and tests/docs/test_examples.py runs every ```python block.
    return ["```python3", text, "```", ""]


def _function(
    title: str,
    module: str,
    text: str,
    node: ast.FunctionDef | ast.AsyncFunctionDef,
    level: str,
) -> list[str]:
    labels = _decorators(node)
    out = [f"{level} `{title}`", ""]
    if labels:
        out += [f"*{', '.join(labels)}*", ""]
    out += _code(_header(text, node))
    doc = ast.get_docstring(node)
    if not doc:
        _undocumented.append(f"{module}.{title}")
    return [*out, markdown(doc or ""), ""]


def _attribute(title: str, text: str, node: ast.stmt, level: str) -> list[str]:
    out = [f"{level} `{title}`", "", *_code(_segment(text, node))]
    comment = _comment(text, node)
    if not comment:
        _undocumented.append(f"{title} (a #: comment above it)")
    return [*out, " ".join(comment), ""]


def _members(cls: ast.ClassDef) -> Iterator[ast.stmt]:
    for node in cls.body:
        if isinstance(node, _FUNCTIONS):
            if not node.name.startswith("_"):
                yield node
        elif (name := _assigned(node)) and not name.startswith("_") and name != "model_config":
            yield node


def _class(name: str, module: str, text: str, node: ast.ClassDef) -> list[str]:
    if name == "SessionManager":
        return _construction(module, text, node)
    fields = [m for m in _members(node) if not isinstance(m, _FUNCTIONS)]
    declaration = [f"@{_segment(text, decorator)}" for decorator in node.decorator_list]
    declaration += [_header(text, node) + ":"]
    for field in fields:
        declaration += [f"    #: {line}" for line in _comment(text, field)]
        declaration += ["    " + line for line in _segment(text, field).splitlines()]
    for init in node.body:
        if isinstance(init, ast.FunctionDef) and init.name == "__init__":
            declaration += ["    " + line for line in f"{_header(text, init)}: ...".splitlines()]
    doc = ast.get_docstring(node)
    if not doc:
        _undocumented.append(f"{module}.{name}")
    out = [f"### `{name}`", "", *_code("\n".join(declaration)), markdown(doc or ""), ""]
    for member in _members(node):
        if isinstance(member, _FUNCTIONS):
            out += _function(f"{name}.{member.name}", module, text, member, "####")
    return out


def _construction(module: str, text: str, node: ast.ClassDef) -> list[str]:
    out: list[str] = []
    methods = {m.name: m for m in node.body if isinstance(m, _FUNCTIONS)}
    for name in CONSTRUCTION:
        out += _function(f"SessionManager.{name}", module, text, methods[name], "###")
    return out


def _entry(name: str) -> list[str]:
    module, text, node = _definition(backend.__name__, name)
    if isinstance(node, ast.ClassDef):
        return _class(name, module, text, node)
    if isinstance(node, _FUNCTIONS):
        return _function(name, module, text, node, "###")
    return _attribute(name, text, node, "###")


def _surface() -> list[str]:
    """HELPERS, then HOOKS, as `BackendHooks` declares them."""
    module = _hooks.__name__
    text, tree = _source(module)
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "BackendHooks"]
    found: dict[str, ast.stmt] = {}
    for node in cls.body:
        name = node.name if isinstance(node, _FUNCTIONS) else _assigned(node)
        if name and name not in found:
            found[name] = node
    out = [
        "## What a backend sets, reads and calls",
        "",
        "Declared once, in `agentsessions._hooks.HELPERS`: class attributes first, then "
        "what a backend calls from its hooks. Everything else a subclass inherits from "
        "`SessionManager` is the public API or private to the core.",
        "",
    ]
    for name in _hooks.HELPERS:
        node = found[name]
        if isinstance(node, _FUNCTIONS):
            out += _function(f"SessionManager.{name}", module, text, node, "###")
        else:
            out += _attribute(f"SessionManager.{name}", text, node, "###")
    out += [
        "## The hooks",
        "",
        "Declared once, in `agentsessions._hooks.HOOKS`: the abstract ones, which every "
        "backend implements, then those with a default.",
        "",
    ]
    for name in _hooks.HOOKS:
        node = found[name]
        assert isinstance(node, _FUNCTIONS)
        out += _function(f"SessionManager.{name}", module, text, node, "###")
    return out


def render() -> str:
    """The whole reference, as committed in docs/backend-reference.md."""
    grouped = [name for _, _, names in GROUPS for name in names]
    missing = sorted(set(backend.__all__) - set(grouped))
    unknown = sorted(set(grouped) - set(backend.__all__))
    if missing or unknown:
        raise LookupError(
            f"agentsessions._reference.GROUPS lacks {missing} and lists {unknown}, "
            "which agentsessions.backend does not export"
        )
    _undocumented.clear()
    body = _surface()
    for title, intro, names in GROUPS:
        body += [f"## {title}", ""] + ([intro, ""] if intro else [])
        for name in names:
            body += _entry(name)
    if _undocumented:
        raise LookupError(f"document these before rendering: {', '.join(_undocumented)}")
    doc = inspect.getdoc(backend) or ""
    body = ["## The module `agentsessions.backend`", "", markdown(doc), "", *body]
    headings = [line[3:] for line in body if line.startswith("## ")]
    contents = [f"- [{heading}](#{slug(heading)})" for heading in headings]
    text = [
        "# Backend reference",
        "",
        "<!-- Generated from the code by `python -m agentsessions._reference`: do not edit.",
        f"     Regenerate with: {_REGENERATE} -->",
        "",
        "Everything `agentsessions.backend` offers a backend author, with each signature "
        "as written and each docstring whole; the [backend author's guide]"
        "(backend-authors.md) says how to put it together.",
        "",
        *contents,
        "",
        *body,
    ]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(text)).rstrip() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentsessions._reference")
    parser.add_argument("path", type=Path, help="the Markdown file to write or check")
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs")
    args = parser.parse_args(argv)
    text = render()
    path: Path = args.path
    if args.check:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != text:
            print(f"{path} is out of date; regenerate it with: {_REGENERATE}", file=sys.stderr)
            return 1
        return 0
    path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
