"""YAML in for matrix files: PyYAML's safe loader with two rules of its own.

- A key given twice in one mapping is refused (plain YAML keeps the last one: a second ``ar:``
  under methods would silently replace the first), ``<<`` included: merge several maps with one
  ``<<: [*a, *b]``.
- Merge keys as the YAML merge-key spec (yaml.org/type/merge.html) says, on every PyYAML: keys
  written in the mapping override merged ones, and in ``<<: [*a, *b]`` a key of an earlier map
  takes precedence over the same key of a later one. PyYAML 6.0.4 (the merge-key DoS fix,
  yaml/pyyaml#937) drops repeated keys by the identity of the key's string object, so whether
  ``*a`` or ``*b`` wins depends on whether Python interned the key (``x`` follows the spec,
  ``mem fraction`` or ``speculative-num-steps`` does not: yaml/pyyaml#953); earlier releases
  follow the spec. This loader does on each.

No pytest, no I/O.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(yaml.YAMLError):
    pass


class MatrixLoader(yaml.SafeLoader):
    """safe_load with unique keys and merge keys by the spec (module docstring)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: dict[Any, int] = {}
        merges = 0
        for key_node, _ in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == MERGE_TAG:
                merges += 1
                if merges > 1:
                    raise DuplicateKeyError(
                        f"line {line}: the merge key '<<' is given twice in one mapping; merge several "
                        "maps with one: '<<: [*a, *b]' (a key of an earlier map wins)"
                    )
                continue
            key = self.construct_object(key_node, deep=deep)
            if _hashable(key) and key in seen:
                raise DuplicateKeyError(
                    f"line {line}: key {key!r} is given twice in one mapping "
                    f"(first on line {seen[key]}); each key may appear once"
                )
            if _hashable(key):
                seen[key] = line
        return super().construct_mapping(node, deep=deep)

    def flatten_mapping(self, node: MappingNode) -> None:
        """Replace the ``<<`` entries of ``node`` by the pairs they merge, ahead of its own pairs
        (a later pair wins when the mapping is built, so the mapping's own keys override merged
        ones). The merged maps' nodes are left as they are (an anchored map is built on its own
        too, and its keys are checked for repeats as written)."""
        node.value = self._flat(node)

    def _flat(self, node: MappingNode) -> list[tuple[Any, Any]]:
        """``node``'s pairs with its merges resolved: the merged pairs first (for a key in several
        merged maps, the earlier map's), then its own. Pure: no node is changed."""
        own: list[tuple[Any, Any]] = []
        merged: list[tuple[Any, Any]] = []
        taken: set[Any] = set()
        for key_node, value_node in node.value:
            if key_node.tag != MERGE_TAG:
                if key_node.tag == "tag:yaml.org,2002:value":  # PyYAML's '=' key, as it does
                    key_node.tag = "tag:yaml.org,2002:str"
                own.append((key_node, value_node))
                continue
            if isinstance(value_node, MappingNode):
                maps = [value_node]
            elif isinstance(value_node, SequenceNode):
                maps = value_node.value
            else:
                maps = [None]
            for sub in maps:
                if not isinstance(sub, MappingNode):
                    got = value_node if sub is None else sub
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"expected a mapping or list of mappings for merging, but found {got.id}",
                        got.start_mark,
                    )
                last: dict[Any, tuple[Any, Any]] = {}  # within one map its own later pair wins
                for pair in self._flat(sub):
                    last[self._identity(pair[0])] = pair
                for ident, pair in last.items():
                    if ident not in taken:
                        taken.add(ident)
                        merged.append(pair)
        return merged + own

    def _identity(self, key_node: Any) -> Any:
        """What makes two keys the same key: their constructed value (a scalar's), else the node."""
        if isinstance(key_node, ScalarNode):
            key = self.construct_object(key_node)
            if _hashable(key):
                return ("value", type(key) is bool, key)
        return ("node", id(key_node))


def _hashable(key: Any) -> bool:
    try:
        hash(key)
    except TypeError:
        return False
    return True


def load_matrix_yaml(text: str) -> Any:
    """The document of a matrix file (yaml.YAMLError, DuplicateKeyError on bad input)."""
    return yaml.load(text, Loader=MatrixLoader)  # noqa: S506 - a SafeLoader subclass
