"""TypeScript type erasure by blanking, with tree-sitter; no type checking.

Type-only syntax is overwritten with spaces (newlines kept), so every line and column of
the emitted JavaScript is the caller's own and QuickJS error positions need no mapping.
Enums are the one construct rewritten rather than blanked: into the usual
``var E; (function (E) {...})(E || (E = {}));`` on the enum's own lines.

Refused with ``UnsupportedTypeScript`` (the caller sees ``link_error``): namespaces and
modules, parameter properties (``constructor(private x: T)``), ``this`` parameters,
decorators, angle-bracket casts (``<T>expr``) and ``import x = require(...)``. Syntax errors
raise ``TypeScriptSyntaxError`` with the first error's 1-based line and column.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import tree_sitter_typescript
from tree_sitter import Language, Node, Parser

_BLANK_WHOLE = frozenset(
    {
        "interface_declaration", "type_alias_declaration", "ambient_declaration",
        "function_signature", "abstract_method_signature", "index_signature",
    }
)  # fmt: skip
_BLANK_NODE = frozenset(
    {
        "type_annotation", "type_arguments", "type_parameters", "implements_clause",
        "asserts_annotation", "type_predicate_annotation", "opting_type_annotation",
        "omitting_type_annotation", "adding_type_annotation",
    }
)  # fmt: skip
_UNSUPPORTED = {
    "internal_module": "namespaces",
    "module": "namespace/module declarations",
    "decorator": "decorators",
    "type_assertion": "angle-bracket casts (<T>expr; use 'expr as T')",
    "import_require_clause": "import = require()",
}


class UnsupportedTypeScript(ValueError):
    """Syntax that cannot be erased (it has runtime meaning); ``line``/``column`` are 1-based."""

    def __init__(self, what: str, line: int, column: int) -> None:
        super().__init__(f"TypeScript {what} are not supported (erasure only) at {line}:{column}")
        self.line = line
        self.column = column


class TypeScriptSyntaxError(ValueError):
    def __init__(self, line: int, column: int, count: int) -> None:
        more = f" ({count - 1} more)" if count > 1 else ""
        super().__init__(f"syntax error at {line}:{column}{more}")
        self.line = line
        self.column = column


@dataclass(frozen=True)
class Erased:
    javascript: str
    top_level_names: frozenset[str]


@cache
def _parser() -> Parser:
    return Parser(Language(tree_sitter_typescript.language_typescript()))


def erase(source: str) -> Erased:
    """JavaScript for TypeScript ``source``, same lines and columns; see the module doc."""
    data = bytearray(source.encode("utf-8"))
    tree = _parser().parse(bytes(data))
    eraser = _Eraser()
    eraser.visit(tree.root_node)
    if eraser.errors:
        line, column = eraser.errors[0]
        raise TypeScriptSyntaxError(line, column, len(eraser.errors))
    for start, end, replacement in sorted(eraser.edits, key=lambda e: e[0], reverse=True):
        segment = data[start:end]
        if replacement is None:
            data[start:end] = bytes(c if c in (10, 13) else 32 for c in segment)
        else:
            text = replacement.encode()
            padding = max(0, segment.count(b"\n") - text.count(b"\n"))
            data[start:end] = text + b"\n" * padding
    return Erased(data.decode("utf-8"), frozenset(top_level_names(tree.root_node)))


def declared_names(source: str) -> frozenset[str]:
    """Names a JavaScript module declares at its top level (a best effort: on a syntax
    error the engine reports the error itself)."""
    tree = _parser().parse(source.encode("utf-8"))
    return frozenset(top_level_names(tree.root_node))


def nesting_at(source: str, line: int, column: int) -> int:
    """How many syntax-tree levels enclose 1-based ``line``:``column`` of ``source``."""
    cursor = _parser().parse(source.encode("utf-8", "surrogatepass")).walk()
    depth = 0
    while cursor.goto_first_child_for_point((line - 1, max(column - 1, 0))) is not None:
        depth += 1
    return depth


def import_site(
    source: str, specifier: str, name: str | None = None, *, typescript: bool = True
) -> tuple[int, int] | None:
    """The 1-based line and column in ``source`` of the first top-level ``import`` or
    ``export ... from`` of ``specifier`` (of its specifier string), or, when ``name`` is
    given, of the first such declaration's imported or re-exported ``name``. None when
    there is none. For ``typescript``, type-only imports are skipped: erasure removes them,
    so they never link. Columns count UTF-8 bytes, as QuickJS's positions do."""
    root = _parser().parse(source.encode("utf-8", "surrogatepass")).root_node
    for statement in root.named_children:
        if statement.type not in ("import_statement", "export_statement"):
            continue
        if typescript and _second_child_is(statement, "type"):
            continue
        literal = statement.child_by_field_name("source")
        if literal is None or _string_value(literal) != specifier:
            continue
        if name is None:
            return _position(literal)
        named = _imported_name(statement, name, typescript)
        if named is not None:
            return _position(named)
    return None


def _imported_name(statement: Node, name: str, typescript: bool) -> Node | None:
    """The node in ``statement`` that imports or re-exports the export ``name``."""
    for child in statement.named_children:
        if child.type == "import_clause":
            for part in child.named_children:
                if part.type == "identifier" and name == "default":
                    return part
                if part.type == "named_imports":
                    found = _specifier_named(part, name, typescript)
                    if found is not None:
                        return found
        elif child.type == "export_clause":
            found = _specifier_named(child, name, typescript)
            if found is not None:
                return found
    return None


def _specifier_named(clause: Node, name: str, typescript: bool) -> Node | None:
    for specifier in clause.named_children:
        if typescript and specifier.children and specifier.children[0].type == "type":
            continue
        imported = specifier.child_by_field_name("name")
        if imported is None:
            continue
        text = _string_value(imported) if imported.type == "string" else _source_text(imported)
        if text == name:
            return imported
    return None


_SIMPLE_ESCAPES = {
    "n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "0": "\0",
}  # fmt: skip


def _string_value(node: Node) -> str:
    """The value of a string literal node (its escape sequences decoded)."""
    parts: list[str] = []
    for child in node.named_children:
        text = _source_text(child)
        if child.type != "escape_sequence":
            parts.append(text)
        elif text[1] in "\r\n\u2028\u2029":
            continue  # a line continuation adds nothing
        elif text[1] == "x":
            parts.append(chr(int(text[2:], 16)))
        elif text[1] == "u":
            parts.append(chr(int(text[2:].strip("{}"), 16)))
        else:
            parts.append(_SIMPLE_ESCAPES.get(text[1], text[1]))
    return "".join(parts)


def _source_text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "surrogatepass")


def top_level_names(root: Node) -> set[str]:
    names: set[str] = set()
    for child in root.named_children:
        node = child
        if node.type == "export_statement":
            declaration = node.child_by_field_name("declaration")
            if declaration is None:
                continue
            node = declaration
        if node.type in ("lexical_declaration", "variable_declaration"):
            for declarator in node.named_children:
                if declarator.type == "variable_declarator":
                    _pattern_names(declarator.child_by_field_name("name"), names)
        elif node.type in (
            "function_declaration", "generator_function_declaration", "class_declaration",
            "abstract_class_declaration", "enum_declaration",
        ):  # fmt: skip
            name = node.child_by_field_name("name")
            if name is not None and name.text is not None:
                names.add(name.text.decode())
        elif node.type == "import_statement":
            clause = next((c for c in node.named_children if c.type == "import_clause"), None)
            if clause is not None:
                _import_names(clause, names)
    return names


def _pattern_names(node: Node | None, names: set[str]) -> None:
    # A loop, not recursion: destructuring patterns may nest arbitrarily deep.
    pending = [node]
    while pending:
        current = pending.pop()
        if current is None:
            continue
        if current.type in ("identifier", "shorthand_property_identifier_pattern"):
            if current.text is not None:
                names.add(current.text.decode())
        elif current.type == "pair_pattern":
            pending.append(current.child_by_field_name("value"))
        elif current.type == "assignment_pattern":
            pending.append(current.child_by_field_name("left"))
        else:
            pending.extend(current.named_children)


def _import_names(clause: Node, names: set[str]) -> None:
    for node in clause.named_children:
        if node.type == "identifier" and node.text is not None:
            names.add(node.text.decode())
        elif node.type == "namespace_import":
            _pattern_names(node, names)
        elif node.type == "named_imports":
            for specifier in node.named_children:
                alias = specifier.child_by_field_name("alias")
                local = alias or specifier.child_by_field_name("name")
                if local is not None and local.text is not None:
                    names.add(local.text.decode())


class _Eraser:
    """Collects the edits for one tree.

    The walk keeps its own stack instead of recursing: a source may nest far deeper than
    Python's recursion limit (2,000 parentheses, say); how deep code may nest is for
    QuickJS's compiler to decide, whose refusal the engine reports as ``link_error``.
    Each node travels with its parent because ``Node.parent`` searches from the root,
    which would make a deep tree quadratic.
    """

    def __init__(self) -> None:
        self.edits: list[tuple[int, int, str | None]] = []
        self.errors: list[tuple[int, int]] = []

    def blank(self, start: int, end: int) -> None:
        self.edits.append((start, end, None))

    def visit(self, root: Node) -> None:
        pending: list[tuple[Node, Node | None]] = [(root, None)]
        while pending:
            node, parent = pending.pop()
            # Children go on the stack in reverse, so nodes are met in source order and
            # the first error recorded is the first in the text.
            pending.extend((child, node) for child in reversed(self._step(node, parent)))

    def _step(self, node: Node, parent: Node | None) -> list[Node]:
        """Edit for ``node``; returns the children still to visit."""
        kind = node.type
        if node.is_error or node.is_missing:
            self.errors.append((node.start_point[0] + 1, node.start_point[1] + 1))
            return []
        if kind in _UNSUPPORTED:
            raise UnsupportedTypeScript(_UNSUPPORTED[kind], *_position(node))
        if kind in _BLANK_WHOLE or kind == "method_signature":
            if parent is not None and parent.type == "export_statement":
                self.blank(parent.start_byte, parent.end_byte)
            else:
                self.blank(node.start_byte, node.end_byte)
            return []
        if kind in _BLANK_NODE:
            self.blank(node.start_byte, node.end_byte)
            return []
        if kind in ("as_expression", "satisfies_expression"):
            expression = node.children[0]
            self.blank(expression.end_byte, node.end_byte)
            return [expression]
        if kind == "non_null_expression":
            self.blank(node.end_byte - 1, node.end_byte)
            return [node.children[0]]
        if kind in ("accessibility_modifier", "override_modifier"):
            if parent is not None and parent.type in ("required_parameter", "optional_parameter"):
                raise UnsupportedTypeScript("parameter properties", *_position(node))
            self.blank(node.start_byte, node.end_byte)
            return []
        if kind in ("readonly", "abstract", "declare"):
            self.blank(node.start_byte, node.end_byte)
            return []
        if kind == "?" and parent is not None and parent.type in (
            "optional_parameter", "public_field_definition", "method_definition",
        ):  # fmt: skip
            self.blank(node.start_byte, node.end_byte)
            return []
        if kind == "public_field_definition":
            if any(child.type == "declare" for child in node.children):
                self.blank(node.start_byte, node.end_byte)
                return []
            for child in node.children:
                if child.type == "!":
                    self.blank(child.start_byte, child.end_byte)
        if kind == "import_statement" and _second_child_is(node, "type"):
            self.blank(node.start_byte, node.end_byte)
            return []
        if kind == "export_statement" and _second_child_is(node, "type"):
            self.blank(node.start_byte, node.end_byte)
            return []
        if (
            kind in ("import_specifier", "export_specifier")
            and node.children
            and (node.children[0].type == "type")
        ):
            following = node.next_sibling
            end = (
                following.end_byte
                if following is not None and following.type == ","
                else (node.end_byte)
            )
            self.blank(node.start_byte, end)
            return []
        if kind == "required_parameter":
            pattern = node.child_by_field_name("pattern")
            if pattern is not None and pattern.type == "this":
                raise UnsupportedTypeScript("'this' parameters", *_position(node))
        if kind == "enum_declaration":
            self.edits.append((node.start_byte, node.end_byte, _enum_to_js(node)))
            return []
        return node.children


def _second_child_is(node: Node, kind: str) -> bool:
    return len(node.children) > 1 and node.children[1].type == kind


def _position(node: Node) -> tuple[int, int]:
    return node.start_point[0] + 1, node.start_point[1] + 1


def _text(node: Node | None) -> str:
    if node is None or node.text is None:
        raise UnsupportedTypeScript("malformed enums", 0, 0)
    return node.text.decode()


def _enum_to_js(node: Node) -> str:
    name = _text(node.child_by_field_name("name"))
    body = node.child_by_field_name("body")
    parts: list[str] = []
    following: int | float | None = 0
    for member in body.named_children if body is not None else []:
        if member.type == "enum_assignment":
            key = _text(member.child_by_field_name("name")).strip("'\"")
            value = member.child_by_field_name("value")
            text = _text(value)
            if value is not None and value.type == "number":
                number = float(text) if "." in text or "e" in text.lower() else int(text, 0)
                following = number + 1
                parts.append(f'{name}[{name}["{key}"] = {text}] = "{key}";')
            elif value is not None and value.type == "string":
                following = None
                parts.append(f'{name}["{key}"] = {text};')
            else:
                following = None
                parts.append(f'{name}[{name}["{key}"] = ({text})] = "{key}";')
        elif member.type in ("property_identifier", "string"):
            key = _text(member).strip("'\"")
            if following is None:
                raise UnsupportedTypeScript(
                    "enum members without initializers after computed ones", *_position(member)
                )
            parts.append(f'{name}[{name}["{key}"] = {following}] = "{key}";')
            following += 1
    return f"var {name}; (function ({name}) {{ {' '.join(parts)} }})({name} || ({name} = {{}}));"
