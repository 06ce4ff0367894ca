"""YAML loading that keeps line numbers and rejects duplicate keys.

Mappings load as `LineDict`, sequences as `LineList`; both remember the line of
each key / item so that every manifest error can say `file:LINE: message`.

Hostile input is bounded: nesting deeper than MAX_DEPTH levels (counting aliases and
merge keys) is an error naming its line, not a RecursionError; a merge key (`<<: *base`)
is resolved as YAML says (explicit keys win over merged ones, and among several merged
mappings the first wins), while a key written twice in one mapping stays an error.
"""
from __future__ import annotations

import reprlib

import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

MAX_DEPTH = 64  # nesting levels of a YAML document (real manifests use about 5)

MERGE_TAG = "tag:yaml.org,2002:merge"
VALUE_TAG = "tag:yaml.org,2002:value"
STR_TAG = "tag:yaml.org,2002:str"

_repr = reprlib.Repr()
_repr.maxlevel, _repr.maxlist, _repr.maxtuple, _repr.maxdict = 3, 6, 6, 4
_repr.maxstring, _repr.maxother, _repr.maxlong = 60, 60, 40


def show(value) -> str:
    """A bounded repr for messages (a value of a hostile document can be huge or deep)."""
    if isinstance(value, (list, dict)):
        value = list(value) if isinstance(value, list) else dict(value)
    return _repr.repr(value)


class ManifestError(Exception):
    """A manifest problem, rendered as `file:line: message`."""

    MAX_MESSAGE = 1000  # a hostile value quoted in a message (a 100 KB dtype, say) is cut

    def __init__(self, message: str, line: int | None = None, path: str | None = None):
        if len(message) > self.MAX_MESSAGE:
            message = f"{message[:600]} ... [{len(message) - 900:,} characters cut] ... {message[-300:]}"
        super().__init__(message)
        self.message = message
        self.line = line
        self.path = path

    def __str__(self) -> str:
        where = self.path or "<manifest>"
        if self.line is not None:
            where = f"{where}:{self.line}"
        return f"{where}: {self.message}"


class LineDict(dict):
    """A dict that knows its own line and the line of each key."""

    line: int = 0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.key_lines: dict = {}

    def line_of(self, key) -> int:
        return self.key_lines.get(key, self.line)


class LineList(list):
    """A list that knows its own line and the line of each item."""

    line: int = 0

    def __init__(self, *args):
        super().__init__(*args)
        self.item_lines: list[int] = []

    def line_of(self, index: int) -> int:
        if 0 <= index < len(self.item_lines):
            return self.item_lines[index]
        return self.line


def _too_deep(line: int) -> ManifestError:
    return ManifestError(f"the YAML nests deeper than {MAX_DEPTH} levels (counting aliases and merge keys)", line)


class _Loader(yaml.SafeLoader):
    def __init__(self, stream):
        super().__init__(stream)
        self.depth = 0        # composing: nodes open
        self.build_depth = 0  # constructing: objects open (aliases can nest past the composer's depth)
        self.last_line = 1    # the line of the node being constructed, for errors without a mark
        self.merged = {}      # id(mapping node) -> its entries with merge keys resolved

    def compose_node(self, parent, index):
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise _too_deep(self.peek_event().start_mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_object(self, node, deep=False):
        self.build_depth += 1
        try:
            self.last_line = node.start_mark.line + 1
            if self.build_depth > MAX_DEPTH:
                raise _too_deep(self.last_line)
            return super().construct_object(node, deep)
        finally:
            self.build_depth -= 1


def _key(loader: _Loader, key_node) -> str:
    line = key_node.start_mark.line + 1
    if isinstance(key_node, ScalarNode) and key_node.tag == VALUE_TAG:
        return key_node.value  # '=', a plain string here (PyYAML's flatten_mapping does the same)
    key = loader.construct_object(key_node, deep=True)
    if not isinstance(key, str):
        raise ManifestError(f"keys must be strings, got {show(key)}", line)
    return key


def _entries(loader: _Loader, node: MappingNode, stack=()):
    """[(key, line, value node)] of a mapping, its merge keys resolved: the explicit keys
    (in document order, each at most once) win over merged ones; a merged key takes the
    first mapping (of `<<: [*a, *b]`, and of the mappings those merge) that has it."""
    cached = loader.merged.get(id(node))
    if cached is not None:
        return cached
    line = node.start_mark.line + 1
    if len(stack) >= MAX_DEPTH:
        raise _too_deep(line)
    if any(node is s for s in stack):
        raise ManifestError("a merge key (<<) merges a mapping into itself", line)
    explicit, merges = {}, []
    for key_node, value_node in node.value:
        if key_node.tag == MERGE_TAG:
            sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
            for source in sources:
                if not isinstance(source, MappingNode):
                    raise ManifestError("a merge key (<<) takes a mapping or a list of mappings",
                                        source.start_mark.line + 1)
            merges.append((len(explicit), sources))
            continue
        key = _key(loader, key_node)
        key_line = key_node.start_mark.line + 1
        if key in explicit:
            raise ManifestError(f"duplicate key '{key}' (first at line {explicit[key][0]})", key_line)
        explicit[key] = (key_line, value_node)
    # document order: each merge's keys where its `<<` stands
    out, taken = [], set(explicit)
    items = list(explicit.items())
    position = 0
    for at, sources in merges + [(len(items), [])]:
        for key, (key_line, value_node) in items[position:at]:
            out.append((key, key_line, value_node))
        position = at
        for source in sources:
            for key, key_line, value_node in _entries(loader, source, stack + (node,)):
                if key not in taken:
                    taken.add(key)
                    out.append((key, key_line, value_node))
    loader.merged[id(node)] = out
    return out


def _construct_mapping(loader: _Loader, node: MappingNode) -> LineDict:
    result = LineDict()
    result.line = node.start_mark.line + 1
    for key, line, value_node in _entries(loader, node):
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = line
    return result


def _construct_sequence(loader: _Loader, node: SequenceNode) -> LineList:
    result = LineList(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.item_lines = [child.start_mark.line + 1 for child in node.value]
    return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def _last_line(loader) -> int:
    return loader.last_line if loader is not None else 1


def load_yaml(text: str, path: str):
    """Parse YAML text; every error becomes a ManifestError naming `path` and a line."""
    loader = None
    try:
        loader = _Loader(text)
        return loader.get_single_data()
    except ManifestError as err:
        err.path = path
        if err.line is None:
            err.line = _last_line(loader)
        raise
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark is not None else _last_line(loader)
        raise ManifestError(f"invalid YAML: {err.problem or err.context or err}", line, path) from None
    except yaml.reader.ReaderError as err:
        line = text.count("\n", 0, err.position) + 1 if isinstance(text, str) else 1
        what = (f"character #x{err.character:04x}" if isinstance(err.character, int)
                else f"byte #x{err.character[0]:02x}" if isinstance(err.character, bytes) and err.character else "input")
        raise ManifestError(f"invalid YAML: unacceptable {what}: {err.reason}", line, path) from None
    except yaml.YAMLError as err:
        raise ManifestError(f"invalid YAML: {err}", _last_line(loader), path) from None
    except RecursionError:
        raise ManifestError("invalid YAML: nested too deeply", _last_line(loader), path) from None
    except (ValueError, TypeError, ArithmeticError, AttributeError, LookupError) as err:
        # a tagged scalar PyYAML cannot build (`!!int 0x`, a 5000-digit integer, ...)
        raise ManifestError(f"invalid YAML value: {show(str(err))}", _last_line(loader), path) from None
    finally:
        if loader is not None:
            loader.dispose()


def read_source(path, what: str) -> str:
    """A manifest-like file's text; an unreadable file is a ManifestError naming it."""
    from pathlib import Path
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ManifestError(f"cannot read {what}: {err.strerror}", None, str(path)) from None
    except UnicodeDecodeError as err:
        raise ManifestError(f"cannot read {what}: not UTF-8 ({err.reason} at byte {err.start})", None,
                            str(path)) from None
