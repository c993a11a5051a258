"""E-graphs to and from other forms: Python terms, and egraph-serialize JSON (the format egglog
exports: `nodes` maps node ids to {op, children: [node ids], eclass: class name, ...},
`class_data` maps class names to their data, `root_eclasses` lists class names)."""
from __future__ import annotations

import json
import sys
from typing import Any, Sequence

import numpy as np

from ..errors import INTEGERS, DispatchError, a_type, shown


_FORMAT_KEYS = ("nodes", "class_data", "root_eclasses")  # egraph-serialize's own; any other top-level key is kept


def _op_id(ops: dict, name) -> int:
    return ops.setdefault(name, len(ops))


def _leaf_key(t):
    """A leaf's operator key: a str is its text (an operator without children); a number is a
    typed literal, ("int", value) or ("float", value), as egglog's i64 and f64 are: 1, np.int64(1)
    one leaf, 1.0 another, "1" a third. Floats compare by value (0.0 and -0.0 are one leaf, as they
    are equal); every NaN is one leaf, so that hash-consing finds a NaN again."""
    if isinstance(t, str):
        return t
    if isinstance(t, bool) or not isinstance(t, (*INTEGERS, float, np.floating)):
        raise DispatchError(f"a term is {a_type(t)} ({shown(t, 60)}). Fix: a term is a tuple (op, child, "
                            "...) with a str op, or a leaf str, int or float.")
    if isinstance(t, INTEGERS):
        return ("int", int(t))
    if isinstance(t, np.floating) and np.dtype(type(t)).itemsize > 8:
        raise DispatchError(f"a leaf is {a_type(t)} ({shown(t, 60)}), wider than a float: two leaves of it "
                            "could read as one float. Fix: pass float(x), or a str naming it exactly.")
    v = float(t)
    return ("float", "nan" if v != v else v)


def _leaf_names(keys: list) -> list[str]:
    """The operator names of keys in id order: a str's own text, a number's text (str of an int,
    repr of a float); a number whose text is also a str leaf's or an operator's gets its type
    appended (`1:int` beside "1"), so names stay distinct."""
    taken = {k for k in keys if isinstance(k, str)}
    names = []
    for k in keys:
        if isinstance(k, str):
            names.append(k)
            continue
        kind, v = k
        try:
            name = str(v) if kind == "int" else repr(float(v))
        except ValueError:  # an int past Python's limit on digits written (sys.get_int_max_str_digits)
            raise DispatchError(f"an int leaf has too many digits to name ({v.bit_length()} bits). Fix: pass it as "
                                "a str (e.g. hex(x)), which names the leaf exactly.") from None
        while name in taken:
            name += f":{kind}"
        taken.add(name)
        names.append(name)
    return names


def _csr(rows_children: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    arity = np.array([len(c) for c in rows_children], np.int64)
    offsets = np.concatenate([[0], np.cumsum(arity)]).astype(np.int64)
    flat = [c for cs in rows_children for c in cs]
    return offsets, np.array(flat, np.int64)


def rows_of_terms(terms: Sequence[Any]):
    """(eclass, op, offsets, children, op names, class of each term) of hash-consed terms. Walked
    with an explicit stack, so a term of any depth is fine."""
    if isinstance(terms, (str, bytes)) or not isinstance(terms, Sequence):
        raise DispatchError(f"terms is {a_type(terms)}; from_terms takes a list of terms. Fix: pass "
                            "[term, ...] where a term is (op, child, ...) or a leaf (str, int, float).")
    if isinstance(terms, tuple) and terms and isinstance(terms[0], str):
        raise DispatchError(f"terms is one term, ({shown(terms[0])}, ...): a tuple starting with a str is a term; "
                            "from_terms takes a list of terms. Fix: pass [term] (or a list of several terms).")
    ops: dict = {}
    memo: dict = {}  # (op id, children classes) -> class
    op_of: list[int] = []
    kids: list[list[int]] = []
    done: dict = {}  # id(term tuple) -> (the tuple, kept alive so that no other term reuses its id; class)

    def node(name, children: list[int]) -> int:
        key = (_op_id(ops, name), tuple(children))
        c = memo.get(key)
        if c is None:
            c = memo[key] = len(op_of)
            op_of.append(key[0])
            kids.append(children)
        return c

    roots = []
    for top in terms:
        stack = [(top, False)]
        out: list[int] = []
        while stack:
            t, expanded = stack.pop()
            if isinstance(t, tuple):
                if not t or not isinstance(t[0], str):
                    raise DispatchError(f"a term tuple starts with {shown(t[0]) if t else 'nothing'}, not an operator "
                                        "name. Fix: write terms as ('Add', x, y).")
                if id(t) in done and not expanded:
                    out.append(done[id(t)][1])
                elif expanded:
                    k = len(t) - 1
                    children = out[len(out) - k:] if k else []
                    del out[len(out) - k:]
                    c = node(t[0], children)
                    done[id(t)] = (t, c)
                    out.append(c)
                else:
                    stack.append((t, True))
                    stack.extend((child, False) for child in reversed(t[1:]))
            else:
                out.append(node(_leaf_key(t), []))
        roots.append(out[0])
    done.clear()
    offsets, children = _csr(kids)
    names = _leaf_names(sorted(ops, key=ops.get))
    return (np.arange(len(op_of), dtype=np.int64), np.array(op_of, np.int64), offsets, children, names,
            np.array(roots, np.int64))


def _a_file(text: "str | bytes") -> str | None:
    """`text` where it is the path of an existing file (short, one line), else None."""
    import os

    try:
        path = os.fsdecode(text)
        return path if len(path) < 4096 and "\n" not in path and os.path.isfile(path) else None
    except (TypeError, ValueError, OSError):
        return None


def _bad(what: str) -> DispatchError:
    return DispatchError(f"the serialized e-graph's {what}. Fix: pass egraph-serialize JSON: "
                         "{'nodes': {id: {'op': str, 'children': [node id, ...], 'eclass': str}}, "
                         "'root_eclasses': [class, ...], 'class_data': {class: {...}}}.")


def _node_id(c) -> bool:
    return isinstance(c, str) or (isinstance(c, int) and not isinstance(c, bool))


_DEEP = ("the serialized e-graph nests too deep to read. Fix: pass egraph-serialize JSON, whose nodes, children "
         "and classes are at most a few levels deep.")


def _copy(v: Any) -> Any:
    """A JSON value of the caller's as writing it and reading it back give: its own copy (an atom
    is immutable, kept as it is; a container goes through JSON text, whatever its depth)."""
    if v is None or isinstance(v, (str, int, float)):
        return v
    try:
        return json.loads(json.dumps(v))
    except RecursionError:
        raise DispatchError(_DEEP) from None


class _Repeated(Exception):
    """A key repeated in one JSON object (not a ValueError: json.loads's own errors are those)."""


def _no_repeats(pairs: list) -> dict:
    """json.loads's object of `pairs`, refusing a repeated key (which a dict would keep the last of)."""
    d = {}
    for k, v in pairs:
        if k in d:
            raise _Repeated(k)
        d[k] = v
    return d


def _refuse_long_int(e: ValueError) -> None:
    if "integer string conversion" in str(e):  # Python's limit on the digits of an int read or written
        raise DispatchError(f"the serialized e-graph holds an integer of more digits than Python converts by "
                            f"default ({sys.get_int_max_str_digits()}). Fix: call sys.set_int_max_str_digits(0) "
                            "first (reading and writing back both need it), or hold the number as a string.") from None


def _refuse_nan(e: Exception) -> None:
    """The refusal of a NaN or an infinity where `e` is json.dumps' (allow_nan=False) of one."""
    if isinstance(e, ValueError) and str(e).startswith("Out of range float values"):
        raise DispatchError("the serialized e-graph holds a NaN or an infinity (a number such as 1e999 reads as "
                            "inf), which JSON cannot hold, so to_serialized() could not write it back. Fix: "
                            "replace it with a finite number (or a string) before reading.") from None


def rows_of_serialized(data: "str | bytes | bytearray | dict"):
    """(eclass, op, offsets, children, op names, what writing back needs) of egraph-serialize JSON."""
    import os

    if isinstance(data, os.PathLike):
        raise DispatchError(f"the serialized e-graph is the path {shown(os.fspath(data))}, not its JSON. Fix: pass its "
                            "text, open(path).read() (or Path.read_text()).")
    if isinstance(data, memoryview):
        raise DispatchError("the serialized e-graph is a memoryview, not its JSON text. Fix: pass bytes(view).")
    if callable(getattr(data, "read", None)) and not isinstance(data, dict):
        raise DispatchError(f"the serialized e-graph is {a_type(data)} (an open file or stream), not its JSON text. "
                            "Fix: pass its text, f.read().")
    given = None  # a dict of the caller's: its JSON text, once checked
    try:
        if isinstance(data, (str, bytes, bytearray)):  # the text, as json.loads reads it
            if isinstance(data, str) and data.startswith("\ufeff"):  # (json.loads reads bytes past one)
                raise DispatchError("the serialized e-graph text begins with a byte-order mark (U+FEFF), which JSON "
                                    "text does not hold. Fix: read the file with encoding='utf-8-sig' (or pass its "
                                    "bytes, Path.read_bytes()).")
            try:
                data = json.loads(data, object_pairs_hook=_no_repeats)
            except _Repeated as e:
                raise DispatchError(f"the serialized e-graph repeats the key {shown(e.args[0], 60)} in one JSON "
                                    "object; a JSON reader keeps only the last, so what the first held would be lost "
                                    "silently. Fix: give every node (and every field of one) its own key, as "
                                    "egglog's serialize does.") from None
            except ValueError as e:
                _refuse_long_int(e)
                path = _a_file(data)
                raise DispatchError(f"the serialized e-graph is not JSON ({e}). Fix: " + (
                    f"it names the file {shown(path)}: pass its text, open(path).read()." if path else
                    "pass egglog's serialize(...).to_json() text or the dict it decodes to.")) from e
        else:  # what to_serialized will write must be JSON: no sets, objects or tuple keys anywhere
            try:
                given = json.dumps(data, allow_nan=False)  # (its values are copied below: the caller's are not shared)
            except (TypeError, ValueError) as e:
                _refuse_nan(e)
                _refuse_long_int(e)
                raise DispatchError(f"the serialized e-graph holds a value JSON cannot write ({e}). Fix: pass "
                                    "the dict json.loads gives for egraph-serialize JSON.") from None
        if given is None:  # read from text: NaN and infinities (1e999 reads as inf) would not be written back
            try:
                json.dumps(data, allow_nan=False)
            except ValueError as e:
                _refuse_nan(e)
                raise
    except RecursionError:
        raise DispatchError(_DEEP) from None
    nodes = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(nodes, dict):
        raise DispatchError("the serialized e-graph has no 'nodes' object. Fix: pass egraph-serialize JSON: "
                            "{'nodes': {id: {'op': ..., 'children': [...], 'eclass': ...}}, ...}.")
    class_data = data.get("class_data", {})
    if not isinstance(class_data, dict):
        raise _bad(f"'class_data' is {a_type(class_data)}, not an object")
    if not all(isinstance(k, str) for k in class_data):  # JSON text would hold an int key as its string
        odd = [k for k in class_data if not _node_id(k)]
        if odd:
            raise _bad(f"'class_data' has the key {shown(odd[0], 40)} ({a_type(odd[0])}); its keys are class names")
        if len({str(k) for k in class_data}) < len(class_data):
            raise _bad("'class_data' has an int key and a string key of the same text (such as 1 and '1')")
        class_data = {str(k): v for k, v in class_data.items()}  # its values copied below, as the caller's
    roots = data.get("root_eclasses", [])
    if not isinstance(roots, list) or not all(isinstance(c, str) for c in roots):
        raise _bad("'root_eclasses' is not a list of class names")
    classes: dict = {}
    ops: dict = {}
    ids = list(nodes)
    odd = [i for i in ids if not _node_id(i)]
    if odd:  # 1.0 or True would match a child 1 as a key, but JSON writes them "1.0" and "true"
        raise _bad(f"node id {shown(odd[0], 40)} is {a_type(odd[0])}; node ids are strings (or ints)")
    if len({str(i) for i in ids}) < len(ids):  # JSON writes every id as a string: 1 and "1" would be one node
        raise _bad("node ids include an int and a string of the same text (such as 1 and '1')")
    if given is not None:  # keys JSON writes alike (1 and "1", True and "true") would be one key read back
        try:
            json.loads(given, object_pairs_hook=_no_repeats)
        except _Repeated as e:
            raise DispatchError(f"the serialized e-graph has two keys in one object that JSON writes alike, as "
                                f"{shown(e.args[0], 60)} (such as 1 and '1', or True and 'true'): written back, one "
                                "would be lost. Fix: give each key its own text (or pass the dict json.loads "
                                "gives).") from None
        except RecursionError:
            raise DispatchError(_DEEP) from None
    where = {str(nid): k for k, nid in enumerate(ids)}  # as JSON text would match them: 1 and "1" alike
    op_of, cls_of, kid_nodes, extra = [], [], [], []
    for nid in ids:
        nd = nodes[nid]
        if not isinstance(nd, dict) or "op" not in nd or "eclass" not in nd:
            raise DispatchError(f"node {shown(nid)} lacks 'op' or 'eclass'. Fix: every node needs op, children and "
                                "eclass.")
        ch = nd.get("children", [])
        if not isinstance(nd["op"], str) or not isinstance(nd["eclass"], str):
            raise _bad(f"node {shown(nid)} has op {shown(nd['op'], 40)} and eclass {shown(nd['eclass'], 40)}; both "
                       "are strings")
        if not isinstance(ch, list) or not all(_node_id(c) for c in ch):
            raise _bad(f"node {shown(nid)} has children {shown(ch, 60)}, not a list of node ids")
        op_of.append(_op_id(ops, nd["op"]))
        cls_of.append(classes.setdefault(nd["eclass"], len(classes)))
        missing = [c for c in ch if str(c) not in where]
        if missing:
            raise DispatchError(f"node {shown(nid)} has child {shown(missing[0])}, which is no node of the graph. Fix: "
                                "children are node ids present in 'nodes'.")
        kid_nodes.append(list(ch))
        extra.append({k: _copy(v) if given is not None else v for k, v in nd.items()
                      if k not in ("op", "children", "eclass")})
    unknown = [c for c in roots if c not in classes]
    if unknown:
        raise _bad(f"root class {shown(unknown[0])} is the class of no node")
    kids = [[cls_of[where[str(c)]] for c in ch] for ch in kid_nodes]
    offsets, children = _csr(kids)
    top = {k: _copy(v) if given is not None else v for k, v in data.items() if k not in _FORMAT_KEYS}
    meta = dict(node_ids=ids, class_names=sorted(classes, key=classes.get), child_nodes=kid_nodes, extra=extra,
                class_data=_copy(class_data) if given is not None else class_data, root_eclasses=list(roots), top=top)
    return (np.array(cls_of, np.int64), np.array(op_of, np.int64), offsets, children,
            sorted(ops, key=ops.get), meta)


def serialized_of_rows(rows: dict, ops: Sequence[str] | None, meta: dict | None) -> str:
    """egraph-serialize JSON of the rows; each class is named by its canonical id's name. Class
    data read in is written back as read, under the names it was read with (a class merged into
    another keeps its own, so nothing is lost and writing what was read back gives the same);
    the roots are their classes' canonical names, in the order read, each once."""
    parent, eclass, op = rows["parent"], rows["eclass"], rows["op"]
    offsets, children = rows["offsets"], rows["children"]
    n = op.size
    meta = meta or {}
    names = meta.get("class_names", [])
    node_ids = meta.get("node_ids", [])

    taken = {"class": set(names) | set(meta.get("class_data", {})), "node": {str(i) for i in node_ids}}
    made: dict = {}

    def fresh(kind: str, base: str) -> str:
        """`base`, or `base_k` for the first k that no name read in (or made before) has."""
        name = made.get((kind, base))
        if name is None:
            name, k = base, 1
            while name in taken[kind]:
                name, k = f"{base}_{k}", k + 1
            taken[kind].add(name)
            made[(kind, base)] = name
        return name

    def class_name(c: int) -> str:
        return names[c] if c < len(names) else fresh("class", f"c{c}")

    def node_id(r: int) -> str:
        return str(node_ids[r]) if r < len(node_ids) else fresh("node", f"n{r}")

    canon = parent[eclass]
    first_row = {}
    for r in range(n):
        first_row.setdefault(int(canon[r]), r)
    out_nodes = {}
    for r in range(n):
        if r < len(meta.get("child_nodes", [])):
            kids = [str(c) for c in meta["child_nodes"][r]]
        else:
            kids = [node_id(first_row[int(parent[c])]) for c in children[offsets[r]:offsets[r + 1]]]
        nd = {"op": ops[op[r]] if ops is not None else str(int(op[r])), "children": kids,
              "eclass": class_name(int(canon[r]))}
        if r < len(meta.get("extra", [])):
            nd.update(meta["extra"][r])
        out_nodes[node_id(r)] = nd
    where = {nm: k for k, nm in enumerate(names)}
    class_data = dict(meta.get("class_data", {}))  # all of it, as read: fresh names never take a key of it
    roots = list(dict.fromkeys(class_name(int(parent[where[c]])) for c in meta.get("root_eclasses", []) if c in where))
    return json.dumps({"nodes": out_nodes, "root_eclasses": roots, "class_data": class_data, **meta.get("top", {})})
