"""YAML loading that keeps line numbers and rejects duplicate keys.

Mappings load as `LineDict`, sequences as `LineList`; both remember the line of
each key / item so that every manifest error can say `file:LINE: message`.
"""
from __future__ import annotations

import yaml


class ManifestError(Exception):
    """A manifest problem, rendered as `file:line: message`."""

    def __init__(self, message: str, line: int | None = None, path: str | None = None):
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


class _Loader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    result = LineDict()
    result.line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if not isinstance(key, str):
            raise ManifestError(f"keys must be strings, got {key!r}", line)
        if key in result:
            raise ManifestError(
                f"duplicate key '{key}' (first at line {result.key_lines[key]})", line)
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = line
    return result


def _construct_sequence(loader: _Loader, node: yaml.SequenceNode) -> LineList:
    result = LineList(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.item_lines = [child.start_mark.line + 1 for child in node.value]
    return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def load_yaml(text: str, path: str):
    """Parse YAML text; errors become ManifestError naming `path` and the line."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - SafeLoader subclass
    except ManifestError as err:
        err.path = path
        raise
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark is not None else None
        raise ManifestError(f"invalid YAML: {err.problem or err}", line, path) from None
    except yaml.YAMLError as err:
        raise ManifestError(f"invalid YAML: {err}", None, path) from None


def read_source(path, what: str) -> str:
    """A manifest-like file's text; an unreadable file is a ManifestError naming it."""
    from pathlib import Path
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ManifestError(f"cannot read {what}: {err.strerror}", None, str(path)) from None
