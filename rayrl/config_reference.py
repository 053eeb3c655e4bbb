"""The configuration reference, generated from the config fields' docstrings in the source.

Every config field is a frozen dataclass field documented by an attribute docstring, the
string literal right below it (`rayrl/config.py`, `rayrl/families/`, each algorithm's
module). Two readers print those docstrings: `rayrl show-config --doc` (a resolved config
as YAML, each key's docstring as comment lines above it: `config_to_commented_yaml`) and the
docs site's configuration page (`reference_markdown`, which its mkdocs hook calls). Both
read the source through this module, so the CLI, the docs and the code cannot disagree.

Python keeps no attribute docstring at run time: it is an expression statement that the
compiler drops. They are read here from each class's source with the standard library's
`ast`, not with griffe or mkdocstrings (which read them too): a CLI flag must not need a
documentation toolchain installed, and the rule read is small (in a class body, an
annotated assignment followed by a string). A field a subclass declares again only to
change its default (each algorithm's `name`) keeps the docstring of the nearest class in
its MRO that documents it.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import html
import inspect
import json
import re
import sys
import textwrap
from typing import Any, NamedTuple

import yaml

from rayrl.config import DEFAULT_ALGORITHM, AlgorithmConfig, Config
from rayrl.presets import ALGORITHM_CONFIGS, family_name
from rayrl.strict import to_plain

COMMENT_WIDTH = 92
"""Columns of `show-config --doc`'s comment lines, indentation included."""

TITLE = "Configuration reference"
"""The reference page's `#` heading."""
INTRO = (
    "Every key of a run's config, generated from the docstrings of the fields in the source "
    "(`rayrl/config.py`, `rayrl/families/`, each algorithm's module). "
    "`rayrl show-config --doc` prints the same docstrings as comments above the keys of a "
    "resolved config. Defaults are the fields' own: a preset (`rayrl presets`) overrides "
    "some, and env settings left null take their env suite's defaults when a config is "
    "loaded. The keys under `algorithm` depend on `algorithm.name`: the fields every "
    "algorithm has come first, then each algorithm's own (with its family's)."
)
"""The reference's first paragraph."""


class FieldDoc(NamedTuple):
    """One config field, as the reference and the commented YAML show it."""

    key: str
    """Dotted key, as `--set` takes it (`algorithm.replay.capacity`)."""
    type: str
    """The annotation as written in the source (`int | None`, `NetworkKind`)."""
    value: Any
    """Its value in the config; a dataclass for a nested section (`env.atari`)."""
    doc: str
    """Its docstring as one paragraph; "" for a field without one (which a test refuses)."""


class Declared(NamedTuple):
    """A field as one class body declares it."""

    annotation: str
    doc: str | None


# --------------------------------------------------------------------------------------------
# Reading the source
# --------------------------------------------------------------------------------------------


@functools.cache
def module_source(module: str) -> str:
    """A module's source text, read once per process."""
    return inspect.getsource(sys.modules[module])


@functools.cache
def module_tree(module: str) -> ast.Module:
    """A module's syntax tree, parsed once per process."""
    return ast.parse(module_source(module))


def class_node(cls: type) -> ast.ClassDef | None:
    """The class statement of `cls` in its module's source, found by qualified name; None for
    a class defined in a function (or made at run time), which has no place to look."""
    body: list[ast.stmt] = module_tree(cls.__module__).body
    node: ast.ClassDef | None = None
    for name in cls.__qualname__.split("."):
        node = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == name), None)
        if node is None:
            return None
        body = node.body
    return node


def string_literal(statement: ast.stmt | None) -> str | None:
    """The text of a statement that is a bare string literal (a docstring), else None."""
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        value = statement.value.value
        return value if isinstance(value, str) else None
    return None


@functools.cache
def declared_fields(cls: type) -> dict[str, Declared]:
    """The fields the body of `cls` itself declares (annotated names, inherited ones not
    included), each with its annotation as written (on one line) and the string literal
    right below it."""
    node = class_node(cls)
    if node is None:
        return {}
    source = module_source(cls.__module__)
    found: dict[str, Declared] = {}
    following: list[ast.stmt | None] = [*node.body[1:], None]
    for statement, after in zip(node.body, following, strict=True):
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            written = ast.get_source_segment(source, statement.annotation)
            annotation = paragraph(written or ast.unparse(statement.annotation))
            found[statement.target.id] = Declared(annotation, string_literal(after))
    return found


def declarations(cls: type, name: str) -> list[Declared]:
    """Field `name` as each dataclass in the MRO of `cls` that declares it does, nearest
    first."""
    return [
        declared[name]
        for klass in cls.__mro__
        if dataclasses.is_dataclass(klass) and name in (declared := declared_fields(klass))
    ]


def paragraph(text: str) -> str:
    """A docstring as one paragraph: its lines joined, runs of whitespace made one space."""
    return " ".join(text.split())


# --------------------------------------------------------------------------------------------
# Fields of a config
# --------------------------------------------------------------------------------------------


def is_section(value: Any) -> bool:
    """Whether a field's value is a nested section (a dataclass instance)."""
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def field_docs(section: Any, prefix: str = "") -> list[FieldDoc]:
    """The fields of one section (a dataclass instance) in declaration order, without those
    of its nested sections; `prefix` is the section's dotted key and a dot ("" at the top).
    The annotation is the nearest declaration's, the docstring the nearest that has one."""
    docs: list[FieldDoc] = []
    for f in dataclasses.fields(section):
        declared = declarations(type(section), f.name)
        annotation = declared[0].annotation if declared else str(f.type)
        doc = next((d.doc for d in declared if d.doc), "")
        docs.append(FieldDoc(prefix + f.name, annotation, getattr(section, f.name), paragraph(doc)))
    return docs


def config_fields(config: Any, prefix: str = "") -> list[FieldDoc]:
    """Every field of a resolved `Config` (or of one of its sections, under `prefix`) in
    declaration order, each nested section followed by its own fields; the `algorithm`
    section is the config's algorithm's class, so its family's and its own fields are
    there."""
    docs: list[FieldDoc] = []
    for doc in field_docs(config, prefix):
        docs.append(doc)
        if is_section(doc.value):
            docs.extend(config_fields(doc.value, f"{doc.key}."))
    return docs


# --------------------------------------------------------------------------------------------
# `rayrl show-config --doc`
# --------------------------------------------------------------------------------------------


def config_to_commented_yaml(config: Config, width: int = COMMENT_WIDTH) -> str:
    """`config_to_yaml`'s YAML with each key's docstring as `#` lines above it (wrapped at
    `width` columns): what `rayrl show-config --doc` prints. Comments change no value, so it
    is still a config that `rayrl train --config` reads, and reads as the same one."""
    blocks = ["\n".join(commented_lines(doc, 0, width)) for doc in field_docs(config)]
    return "\n\n".join(blocks) + "\n"


def commented_lines(doc: FieldDoc, indent: int, width: int) -> list[str]:
    """One key (a section with all its keys) as YAML lines, its docstring above it."""
    pad = " " * indent
    name = doc.key.rpartition(".")[2]
    wrapped = textwrap.wrap(
        doc.doc, max(width - indent - 2, 40), break_long_words=False, break_on_hyphens=False
    )
    lines = [f"{pad}# {line}" for line in wrapped]
    if is_section(doc.value) and dataclasses.fields(doc.value):
        lines.append(f"{pad}{yaml_key(name)}:")
        for child in field_docs(doc.value, f"{doc.key}."):
            lines.extend(commented_lines(child, indent + 2, width))
    else:
        dumped = yaml.safe_dump({name: to_plain(doc.value)}, sort_keys=False)
        lines.extend(pad + line for line in dumped.splitlines())
    return lines


def yaml_key(name: str) -> str:
    """A mapping key as YAML writes it: quoted where it would read as something else (`on`,
    `null`)."""
    return yaml.safe_dump(name).splitlines()[0]


# --------------------------------------------------------------------------------------------
# The docs site's reference
# --------------------------------------------------------------------------------------------


def reference_markdown() -> str:
    """The configuration reference for the docs site, as one whole Markdown page (the mkdocs
    hook serves it as is): a title, then a `##` section per config section in schema order
    (its docstring, then a table: key, type as written, default, docstring); under
    `## algorithm` the fields every algorithm has, then a `###` per algorithm of
    `rayrl.algorithms.ALGORITHMS` with its family's fields and its own. Defaults are the
    dataclasses' (a config that names no algorithm gets `dqn`)."""
    default = Config(algorithm=AlgorithmConfig(name=DEFAULT_ALGORITHM))
    parts = [f"# {TITLE}", markdown_text(INTRO)]
    for section in field_docs(default):
        parts.append(f"## {section.key}\n\n{markdown_text(section.doc)}")
        parts.append(markdown_table(config_fields(section.value, f"{section.key}.")))
        if section.key == "algorithm":
            parts.extend(algorithm_markdown(name, cls) for name, cls in ALGORITHM_CONFIGS.items())
    return "\n\n".join(parts) + "\n"


def algorithm_markdown(name: str, cls: type[AlgorithmConfig]) -> str:
    """One algorithm's `###` section: the fields its family and it add, and those of
    `AlgorithmConfig` it declares again (its `name`, a default of its own)."""
    own = {f.name for f in dataclasses.fields(cls)} - inherited_common_fields(cls)
    docs = [doc for doc in config_fields(cls(), "algorithm.") if doc.key.split(".")[1] in own]
    summary = f"`algorithm.name: {name}`, an {family_name(name)} algorithm. "
    summary += markdown_text(paragraph(inspect.getdoc(cls) or ""))
    return f"### {name}\n\n{summary}\n\n{markdown_table(docs)}"


def inherited_common_fields(cls: type[AlgorithmConfig]) -> set[str]:
    """The fields of `AlgorithmConfig` that no class between it and `cls` declares again:
    they are the same for every algorithm, documented once."""
    below: list[type] = [
        klass
        for klass in cls.__mro__
        if issubclass(klass, AlgorithmConfig) and klass is not AlgorithmConfig
    ]
    redeclared = {name for klass in below for name in declared_fields(klass)}
    return {f.name for f in dataclasses.fields(AlgorithmConfig)} - redeclared


def markdown_table(docs: list[FieldDoc]) -> str:
    """Fields as a Markdown table; a nested section's row has no default (its keys follow)."""
    lines = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    for doc in docs:
        default = "" if is_section(doc.value) else markdown_code(json.dumps(to_plain(doc.value)))
        cells = (markdown_code(doc.key), markdown_code(doc.type), default, markdown_text(doc.doc))
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines)


CODE_SPAN = re.compile(r"(`+)(.+?)\1")
"""A Markdown code span of a docstring (`algorithm.replay.capacity`)."""
MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]|])")
"""Characters that Markdown outside code spans (and a table cell) would read as syntax."""


def markdown_code(text: str) -> str:
    """`text` as inline code that is safe in a table cell. A `|` would end the cell in
    GitHub's Markdown even inside backticks, and `\\|` shows its backslash in Python-Markdown's
    (mkdocs) code spans: an HTML `<code>` with the pipe as an entity reads right in both."""
    if "|" in text or "`" in text:
        return f"<code>{html.escape(text).replace('|', '&#124;')}</code>"
    return f"`{text}`"


def markdown_text(text: str) -> str:
    """A docstring as Markdown that shows it as written, safe in a table cell: its code spans
    kept, Markdown's syntax characters elsewhere escaped (`|TD error|`, `eps**(1 + ...)`)."""
    parts: list[str] = []
    start = 0
    for span in CODE_SPAN.finditer(text):
        parts.append(markdown_escape(text[start : span.start()]))
        parts.append(markdown_code(span.group(2)))
        start = span.end()
    parts.append(markdown_escape(text[start:]))
    return "".join(parts)


def markdown_escape(text: str) -> str:
    """Plain text as Markdown: syntax characters backslash-escaped, `<` and `>` as entities
    (an HTML tag otherwise; Python-Markdown has no `\\<` escape)."""
    escaped = MARKDOWN_SPECIAL.sub(r"\\\1", text)
    return escaped.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
