"""The preset merge contract (docs/presets.md), with provenance for every leaf.

A spec is plain data in the shape of an operation file. ``apply_patch`` patches it with one
layer (a preset, a DAG child's overrides) under one strategy and returns a new spec and a
new provenance map. Inputs are never mutated; the result shares no object with the layer,
and shares the subtrees the layer leaves untouched with the spec patched (a spec is never
mutated once built: each patch builds new containers down to what it changes).
``apply_layer`` gives the same result for a ``Layer`` (a preset applied to every operation
of a compile): what the layer sets where a spec has nothing, and a typed section a spec
does not have (or has as an earlier layer of its chain built it), is merged once with its
provenance, and those objects are shared by every spec it is applied to.

1. Typed sections (``TYPED_SECTIONS``) recurse field by field.
2. Every other value is a leaf (scalar, list or free-form map), merged by the strategy's
   deepmerge ``Merger``:

   ============  ===========================  ===========================  ==============
   strategy      map                          list                         scalar
   ============  ===========================  ===========================  ==============
   replace       new                          new                          new
   isnull        cur if set, else new         cur if set, else new         cur if set
   post_merge    union, new wins (deep)       cur + (new not in cur)       new
   pre_merge     union, cur wins (deep)       new + (cur not in new)       cur if set
   ============  ===========================  ===========================  ==============

   The list rule is for list *leaves* (``command``, ``args``, ``tolerations``,
   ``connections``). A list inside a free-form map (``affinity...nodeSelectorTerms``,
   ``securityContext.capabilities.add``) is the value of its key, like a scalar: ``new``
   under ``post_merge``, ``cur`` under ``pre_merge``. Kubernetes ORs node selector terms,
   so a union would turn two node pins into none.
3. An explicit ``null`` clears the field under ``replace``/``post_merge`` and is ignored under
   ``isnull``/``pre_merge``; a field the layer does not mention is untouched. Inside a
   free-form map, a ``null`` value deletes that key under ``post_merge``, is ignored under
   ``pre_merge``, and is dropped from a map the layer sets whole (``replace``, an unset
   ``cur``): the result never holds a ``null`` in a map. List items are kept as written.

What must live here: the four strategies, applied leaf by leaf with the provenance of each
leaf, and the dotted paths they use.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from deepmerge import Merger

from reconciler.core.types import MergeStrategy, Provenance

Path = tuple[str | int, ...]
ProvMap = dict[Path, Provenance]
_T = TypeVar("_T")
# (line, col) of the value at a path of the layer being applied
Locate = Callable[[Path], tuple[int, int]]

# An explicit null clears the field under these; the others ignore it.
NULL_CLEARS = frozenset({MergeStrategy.REPLACE, MergeStrategy.POST_MERGE})
TYPED_SECTIONS: frozenset[Path] = frozenset(
    {
        (),
        ("run",),
        ("run", "container"),
        ("run", "container", "resources"),
        ("run", "environment"),
        ("run", "distributed"),
    }
)


# --- deepmerge strategies ----------------------------------------------------------------
# Each returns a fresh object; inputs (plain data) are deep-copied (``_copied``), never
# modified.


def without_nulls(value: Any) -> Any:
    """A deep copy of ``value`` without the ``null`` values of its maps (list items kept)."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_copied(v) for v in value]
    return value  # a scalar: immutable


def _copied(value: Any) -> Any:
    """A deep copy of plain data (maps, lists, immutable scalars), nulls kept."""
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v) for v in value]
    return value


def _new(merger: Merger, path: list[Any], cur: Any, new: Any) -> Any:
    return without_nulls(new)


def _cur(merger: Merger, path: list[Any], cur: Any, new: Any) -> Any:
    return _copied(cur)


def _cur_if_set(merger: Merger, path: list[Any], cur: Any, new: Any) -> Any:
    return without_nulls(new) if cur is None else _copied(cur)


def _post_dict(merger: Merger, path: list[Any], cur: dict[str, Any], new: dict[str, Any]) -> Any:
    out = {k: _copied(v) for k, v in cur.items()}
    for key, value in new.items():
        if value is None:
            out.pop(key, None)
        elif out.get(key) is not None:
            out[key] = merger.value_strategy([*path, key], out[key], value)
        else:
            out[key] = without_nulls(value)
    return out


def _pre_dict(merger: Merger, path: list[Any], cur: dict[str, Any], new: dict[str, Any]) -> Any:
    out = {k: _copied(v) for k, v in cur.items()}
    for key, value in new.items():
        if value is None:
            continue
        if out.get(key) is not None:
            out[key] = merger.value_strategy([*path, key], out[key], value)
        else:
            out[key] = without_nulls(value)
    return out


# ``path`` is empty for a list leaf, and names the key for a list inside a free-form map:
# that list is the key's value, so it is not unioned.


def _post_list(merger: Merger, path: list[Any], cur: list[Any], new: list[Any]) -> Any:
    if path:
        return _copied(new)
    return [_copied(x) for x in cur] + [_copied(x) for x in new if x not in cur]


def _pre_list(merger: Merger, path: list[Any], cur: list[Any], new: list[Any]) -> Any:
    if path:
        return _copied(cur)
    return [_copied(x) for x in new] + [_copied(x) for x in cur if x not in new]


MERGERS: Mapping[MergeStrategy, Merger] = {
    MergeStrategy.REPLACE: Merger([(dict, _new), (list, _new)], [_new], [_new]),
    MergeStrategy.ISNULL: Merger([(dict, _cur), (list, _cur)], [_cur_if_set], [_cur]),
    MergeStrategy.POST_MERGE: Merger([(dict, _post_dict), (list, _post_list)], [_new], [_new]),
    MergeStrategy.PRE_MERGE: Merger([(dict, _pre_dict), (list, _pre_list)], [_cur_if_set], [_cur]),
}


def merge_leaf(strategy: MergeStrategy, cur: Any, new: Any) -> Any:
    """The value of a leaf after a layer under ``strategy`` sets it to ``new``.

    ``cur is None`` means unset. Returns ``None`` when the leaf ends up unset.
    """
    if new is None:
        return None if strategy in NULL_CLEARS else _copied(cur)
    if cur is None:
        return without_nulls(new)
    return MERGERS[strategy].merge(cur, new)


# --- provenance ---------------------------------------------------------------------------


def fine_leaves(value: Any, path: Path = ()) -> list[Path]:
    """Paths that carry provenance: scalars, list items (atomic) and empty containers."""
    if isinstance(value, dict) and value:
        return [p for k, v in value.items() for p in fine_leaves(v, (*path, k))]
    if isinstance(value, list) and value:
        return [(*path, i) for i in range(len(value))]
    return [path]


def _from_layer(value: Any, path: Path, src: Path, locate: Locate, file: str, step: str) -> ProvMap:
    out: ProvMap = {}
    for leaf in fine_leaves(without_nulls(value)):
        line, col = locate((*src, *leaf))
        out[(*path, *leaf)] = Provenance(file, line, step, col)
    return out


def _moved(prov: Mapping[Path, Provenance], src: Path, dst: Path) -> ProvMap:
    n = len(src)
    return {(*dst, *k[n:]): v for k, v in prov.items() if k[:n] == src}


def _attribute(
    strategy: MergeStrategy,
    cur: Any,
    new: Any,
    path: Path,
    prov: Mapping[Path, Provenance],
    locate: Locate,
    file: str,
    step: str,
    nested: bool = False,
) -> ProvMap:
    """Provenance of the merged leaf at ``path`` (both ``cur`` and ``new`` set);
    ``nested`` when ``path`` is inside a free-form map (a list there is one value)."""
    if strategy == MergeStrategy.REPLACE:
        return _from_layer(new, path, path, locate, file, step)
    if strategy == MergeStrategy.ISNULL:
        return _moved(prov, path, path)
    if isinstance(cur, dict) and isinstance(new, dict):
        out: ProvMap = {}
        for key in {**cur, **new}:
            sub = (*path, key)
            c, n = cur.get(key), new.get(key)
            if c is not None and n is not None:
                out.update(_attribute(strategy, c, n, sub, prov, locate, file, step, True))
            elif n is not None:
                out.update(_from_layer(n, sub, sub, locate, file, step))
            elif c is not None and (strategy == MergeStrategy.PRE_MERGE or key not in new):
                out.update(_moved(prov, sub, sub))
        if not out:
            out.update(_from_layer(new, path, path, locate, file, step))
        return out
    if isinstance(cur, list) and isinstance(new, list) and not nested:
        out = {}
        first, first_from_cur = (
            (cur, True) if strategy == MergeStrategy.POST_MERGE else (new, False)
        )
        second, other = (new, cur) if strategy == MergeStrategy.POST_MERGE else (cur, new)
        j = 0
        for i, item in enumerate(first):
            if first_from_cur:
                out.update(_moved(prov, (*path, i), (*path, j)))
            else:
                out.update(_from_layer(item, (*path, j), (*path, i), locate, file, step))
            j += 1
        for i, item in enumerate(second):
            if item in other:
                continue
            if first_from_cur:
                out.update(_from_layer(item, (*path, j), (*path, i), locate, file, step))
            else:
                out.update(_moved(prov, (*path, i), (*path, j)))
            j += 1
        if not first and not second:
            out.update(_from_layer(new, path, path, locate, file, step))
        return out
    if strategy == MergeStrategy.POST_MERGE:
        return _from_layer(new, path, path, locate, file, step)
    return _moved(prov, path, path)


def _drop(prov: ProvMap, path: Path) -> None:
    n = len(path)
    for key in [k for k in prov if k[:n] == path]:
        del prov[key]


# --- patching -----------------------------------------------------------------------------


def start(
    spec: Mapping[str, Any], locate: Locate, file: str, step: str
) -> tuple[dict[str, Any], ProvMap]:
    """The initial spec (nulls dropped: a null in the operation means unset) and its provenance."""
    clean = without_nulls(spec)
    prov: ProvMap = {}
    for leaf in fine_leaves(clean):  # no null left to drop: ``_from_layer`` without the copy
        line, col = locate(leaf)
        prov[leaf] = Provenance(file, line, step, col)
    return clean, prov


def _itself(value: _T) -> _T:
    return value


Items = tuple[tuple[Path, Provenance], ...]


class Sections:
    """The typed sections (``run.environment``...) that layers built by merging once, with
    the provenance of everything under them: shared by the layers of one compile (a
    chain of presets), so a section one layer built is known to the next. An entry keeps
    its section alive, so its id stays its own."""

    __slots__ = ("_ids", "_known")

    def __init__(self) -> None:
        self._known: dict[tuple[Path, int], tuple[dict[str, Any], Items]] = {}
        self._ids: set[int] = set()  # of the sections kept (alive here: their own)

    def built(self, section: Any) -> bool:
        """Whether ``section`` is one a layer built (kept here)."""
        return id(section) in self._ids

    def items(self, path: Path, section: Any) -> Items | None:
        """The provenance under ``path`` of ``section`` when a layer built it there."""
        known = self._known.get((path, id(section)))
        return known[1] if known is not None and known[0] is section else None

    def add(self, path: Path, section: dict[str, Any], items: Items) -> None:
        self._known.setdefault((path, id(section)), (section, items))
        self._ids.add(id(section))


class Layer:
    """One layer (a preset) applied to many specs, each the same way. What it does at a
    path depends only on what the spec has there and its provenance: where a spec has
    nothing at a path the layer sets, what the layer puts there (its value, nulls dropped,
    and each leaf's provenance) depends on the layer alone; a typed section the spec does
    not have, or has as an earlier layer built it (``sections``), merges the same way in
    every spec. Each is computed once and the same objects go into every spec
    (``share_value`` and ``share_provenance`` make them the compile's shared ones). Specs
    are never changed once built, so sharing is safe. The patch must not change while
    the layer is in use."""

    __slots__ = (
        "_fresh",
        "_merged",
        "_share_provenance",
        "_share_value",
        "file",
        "locate",
        "patch",
        "sections",
        "step",
        "strategy",
    )

    def __init__(
        self,
        patch: Mapping[str, Any],
        strategy: MergeStrategy,
        locate: Locate,
        file: str,
        step: str,
        *,
        share_value: Callable[[Any], Any] = _itself,
        share_provenance: Callable[[Provenance], Provenance] = _itself,
        sections: Sections | None = None,
    ) -> None:
        if strategy not in MERGERS:
            raise ValueError(f"unknown patch strategy {strategy!r}")
        self.patch = patch
        self.strategy = strategy
        self.locate = locate
        self.file = file
        self.step = step
        self._share_value = share_value
        self._share_provenance = share_provenance
        self._fresh: dict[Path, tuple[Any, Items]] = {}
        self.sections = sections if sections is not None else Sections()
        # (path, id of the section before, or -1 for none) -> (that section, the merged
        # one or None when the layer leaves none, the provenance under it before, after)
        self._merged: dict[tuple[Path, int], tuple[Any, dict[str, Any] | None, Items, Items]]
        self._merged = {}

    def section(
        self, path: Path, cur: Any, new: Mapping[str, Any], before: Items
    ) -> tuple[dict[str, Any] | None, Items]:
        """The typed section at ``path`` patched with ``new`` (the patch's section there),
        where the spec has none (``cur`` None) or the one a layer built (``before``: the
        provenance under it), and the provenance under the result. None: the layer
        leaves no section there (it set nothing in it)."""
        key = (path, -1 if cur is None else id(cur))
        hit = self._merged.get(key)
        if hit is None or hit[0] is not cur:
            prov: ProvMap = dict(before)
            base = cur if cur is not None else {}
            built = _patch_section(
                base, new, path, self.strategy, prov, self.locate, self.file, self.step, self
            )
            after = tuple(prov.items())
            merged: dict[str, Any] | None = None
            if built or cur is not None:
                # not made the compile's shared one: an equal section another chain of
                # layers built has other provenance, so each keeps its own object (its id
                # says where it came from); its contents are shared already
                merged = built
                self.sections.add(path, built, after)
            hit = self._merged[key] = (cur, merged, before, after)
        return hit[1], hit[3]

    def fresh(self, path: Path, new: Any) -> tuple[Any, Items]:
        """The value the layer sets at ``path`` of a spec that has none there (``new`` is
        the patch's value at ``path``: always the same one), and its leaves' provenance."""
        hit = self._fresh.get(path)
        if hit is None:
            value = self._share_value(without_nulls(new))
            leaves = _from_layer(new, path, path, self.locate, self.file, self.step)
            share = self._share_provenance
            hit = self._fresh[path] = (value, tuple((k, share(v)) for k, v in leaves.items()))
        return hit


def apply_layer(
    spec: Mapping[str, Any], prov: Mapping[Path, Provenance], layer: Layer
) -> tuple[dict[str, Any], ProvMap]:
    """``apply_patch`` with ``layer``'s patch, strategy and source; what the layer sets on
    paths the spec leaves unset is the layer's once-computed value and provenance."""
    out_prov: ProvMap = dict(prov)
    out = _patch_section(
        spec,
        layer.patch,
        (),
        layer.strategy,
        out_prov,
        layer.locate,
        layer.file,
        layer.step,
        layer,
    )
    return out, out_prov


def apply_patch(
    spec: Mapping[str, Any],
    prov: Mapping[Path, Provenance],
    patch: Mapping[str, Any],
    strategy: MergeStrategy,
    locate: Locate,
    file: str,
    step: str,
) -> tuple[dict[str, Any], ProvMap]:
    """Patch ``spec`` with one layer; returns the new spec and provenance (inputs untouched)."""
    if strategy not in MERGERS:
        raise ValueError(f"unknown patch strategy {strategy!r}")
    out_prov: ProvMap = dict(prov)
    out = _patch_section(spec, patch, (), strategy, out_prov, locate, file, step)
    return out, out_prov


def _patch_section(
    section: Mapping[str, Any],
    patch: Mapping[str, Any],
    path: Path,
    strategy: MergeStrategy,
    prov: ProvMap,
    locate: Locate,
    file: str,
    step: str,
    layer: Layer | None = None,
) -> dict[str, Any]:
    out = dict(section)  # what the layer leaves untouched is shared, never copied
    for key, new in patch.items():
        sub = (*path, key)
        cur = out.get(key)
        if new is None:
            if strategy in NULL_CLEARS:
                out.pop(key, None)
                _drop(prov, sub)
            continue
        if sub in TYPED_SECTIONS and isinstance(new, dict):
            if layer is not None:
                before = () if cur is None else layer.sections.items(sub, cur)
                if before is not None:  # merged once for every spec (``Layer.section``)
                    merged_section, after = layer.section(sub, cur, new, before)
                    for leaf, _ in before:
                        del prov[leaf]  # exactly what is under ``sub``
                    prov.update(after)
                    if merged_section is not None:
                        out[key] = merged_section
                    continue
            base = cur if isinstance(cur, dict) else {}
            merged = _patch_section(base, new, sub, strategy, prov, locate, file, step, layer)
            if merged or key in out:
                out[key] = merged
            continue
        if layer is not None:
            # a spec holds no null, and provenance only under paths that have a value
            # (a null clear drops both), so an unset ``cur`` has none to drop
            if cur is None:
                out[key], leaves = layer.fresh(sub, new)
                prov.update(leaves)
                continue
            if strategy == MergeStrategy.ISNULL:
                continue  # set already: the value and its provenance stay as they are
        if cur is None:
            out[key] = without_nulls(new)
            _drop(prov, sub)
            prov.update(_from_layer(new, sub, sub, locate, file, step))
            continue
        merged_leaf = merge_leaf(strategy, cur, new)
        attributed = _attribute(strategy, cur, new, sub, prov, locate, file, step)
        _drop(prov, sub)
        prov.update(attributed)
        out[key] = merged_leaf
    return out


@functools.lru_cache(maxsize=8192)  # one shared string per path across all operations
def dotted(path: Path) -> str:
    """``("run", "environment", "tolerations", 0)`` -> ``run.environment.tolerations[0]``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


def lookup(prov: Mapping[Path, Provenance], path: Path) -> Provenance | None:
    """Provenance of ``path``, or of the first leaf under it, or of its nearest ancestor."""
    if path in prov:
        return prov[path]
    n = len(path)
    under = sorted((k for k in prov if k[:n] == path), key=lambda k: [str(p) for p in k])
    if under:
        return prov[under[0]]
    while path:
        path = path[:-1]
        if path in prov:
            return prov[path]
    return None
