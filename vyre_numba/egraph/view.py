"""How an `EGraph` shows in Jupyter: its e-classes as boxes holding their e-nodes, edges from each
e-node to its children's classes (as egglog draws one), through Graphviz where the `graphviz`
package and its `dot` program are installed, else as a table."""
from __future__ import annotations

import numpy as np

from .. import display
from ..errors import VyreError
from .egraph import _class_count, _count

MAX_DRAWN = 300  # e-nodes drawn (or listed) at most; a larger e-graph shows a summary


def _limit(limit) -> int | None:
    """`limit` checked: how many e-nodes to show at most, an int from 0, or None for all."""
    if limit is None:
        return None
    return _count(limit, "limit", "pass how many e-nodes to show at most, an int from 0, or None for all.", lo=0)


def rows(egraph, limit: int | None = None, host: dict | None = None) -> list[tuple[int, str, tuple[int, ...]]]:
    """(canonical class, operator name, canonical child classes) of every row (the first `limit`
    rows; None: all), in row order; `host`: the rows already downloaded (under the e-graph's lock)."""
    limit = _limit(limit)
    with egraph._lock:  # the rows and their classes as of one moment
        g = egraph._live()
        r = egraph._host_rows() if host is None else host
        n = r["op"].size if limit is None else min(limit, r["op"].size)
        off = r["offsets"][:n + 1]
        cls = g.find(r["eclass"][:n]) if n else r["eclass"][:0]
        kids = r["children"][:int(off[-1])]
        kids = g.find(kids) if kids.size else kids
    ops = egraph.ops
    return [(int(cls[i]), ops[int(r["op"][i])] if ops is not None else str(int(r["op"][i])),
             tuple(int(k) for k in kids[off[i]:off[i + 1]])) for i in range(n)]


def text(egraph) -> str:
    """The e-graph's repr: its e-nodes, its classes where it has at most MAX_DRAWN e-nodes (counted
    as the HTML counts them), else its class ids (a count of its classes would read every row)."""
    if egraph._g is None:
        return "EGraph(closed)"
    n = egraph.n_nodes
    try:
        classes = display.counted(_classes(egraph), "class", "classes") if n <= MAX_DRAWN else \
            display.counted(egraph.n_classes, "class id")
    except VyreError:  # the device could not be read (a failed context): the repr still shows what it can
        classes = display.counted(egraph.n_classes, "class id")
    return (f"EGraph({display.counted(n, 'e-node')}, {classes}, backend={egraph.backend!r}"
            f"{', rebuild pending' if egraph._pending else ''})")


def _classes(egraph) -> int:
    """How many classes the rows are in now (as `congruence_closure` counts them)."""
    return _class_count(egraph) if egraph.n_nodes else 0


def _operators(egraph, r: dict) -> list[tuple[str, int]]:
    """The ten most used operators of the rows `r` with their counts, counted in NumPy (a Python
    pass over a million rows takes seconds)."""
    if not r["op"].size:
        return []
    ids, counts = np.unique(r["op"], return_counts=True)  # not bincount: its counts go up to the largest id
    top = np.argsort(-counts, kind="stable")[:10]
    ops = egraph.ops
    return [(ops[int(ids[k])] if ops is not None else str(int(ids[k])), int(counts[k])) for k in top]


def to_graphviz(egraph, limit: int | None = MAX_DRAWN):
    """A `graphviz.Digraph` of the e-graph: one cluster per e-class, one box per e-node, an edge
    from each e-node to each child's class (numbered where it has several). At most `limit`
    e-nodes (None: all)."""
    limit = _limit(limit)
    egraph._live()
    import graphviz

    listed = rows(egraph, limit)
    dot = graphviz.Digraph(graph_attr={"compound": "true", "rankdir": "TB", "fontname": "monospace",
                                       "fontsize": "10", "nodesep": "0.2"},
                           node_attr={"shape": "box", "style": "rounded", "fontname": "monospace",
                                      "fontsize": "10", "height": "0.2"},
                           edge_attr={"fontsize": "8", "arrowsize": "0.6"})
    members: dict[int, list[int]] = {}
    for r, (c, _, _) in enumerate(listed):
        members.setdefault(c, []).append(r)
    for c, rs in members.items():
        with dot.subgraph(name=f"cluster_{c}") as sub:
            sub.attr(label=f"class {c}", style="dashed,rounded", color="gray", fontcolor="gray")
            for r in rs:
                sub.node(f"n{r}", graphviz.escape(listed[r][1]))  # an operator named 'x\\l' is text, not an escape
    for r, (c, _, kids) in enumerate(listed):
        for k, child in enumerate(kids):
            if child not in members:  # a class whose e-nodes are past the limit
                continue
            attrs = {"label": str(k)} if len(kids) > 1 else {}
            if child != c:
                attrs["lhead"] = f"cluster_{child}"
            dot.edge(f"n{r}", f"n{members[child][0]}", **attrs)
    return dot


def html(egraph) -> str:
    """The e-graph's `_repr_html_`: a Graphviz SVG, or a table; a summary when it is large."""
    if egraph._g is None:
        return "<div>EGraph (closed)</div>"
    n = egraph.n_nodes
    summary = [("e-nodes", f"{n:,}"), ("classes", f"{_classes(egraph):,}"), ("class ids", f"{egraph.n_classes:,}"),
               ("backend", egraph.backend), ("state", "rebuild pending" if egraph._pending else "rebuilt")]
    if n > MAX_DRAWN:
        with egraph._lock:  # the rows downloaded once, for the counts and the table
            host = egraph._host_rows()
            ops = _operators(egraph, host)
            listed = rows(egraph, MAX_DRAWN, host)
        head = display.fields_table(summary + [("most used operators", ", ".join(f"{o} ({k:,})" for o, k in ops))],
                                    title="EGraph",
                                    note=f"{n:,} e-nodes: more than the {MAX_DRAWN} drawn here; "
                                         "egraph.to_graphviz(limit=None) draws them all.")
        return head + _table(listed, n)
    head = display.fields_table(summary, title="EGraph")
    try:
        svg = to_graphviz(egraph).pipe(format="svg", encoding="utf-8")
    except Exception as e:  # no graphviz package, no `dot` program, or dot failed: a table instead
        why = "the graphviz package is not installed" if isinstance(e, ImportError) else \
            f"Graphviz could not draw it ({type(e).__name__})"
        return head + _table(rows(egraph), n, f"{why}; pip install graphviz and install Graphviz's dot for a drawing.")
    return head + svg[svg.find("<svg"):]


def _table(listed: list, total: int, note: str | None = None) -> str:
    return display.table(((c, op, ", ".join(map(str, kids))) for c, op, kids in listed), ("class", "op", "children"),
                         total=total, note=note)
