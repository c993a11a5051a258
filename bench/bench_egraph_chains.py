"""Deep congruence chains: vyre's e-graph rebuild (the reference backend's on the CPU, or with
`--backend cuda` the GPU's) against egglog and a textbook congruence closure, on the same e-graph
in the same run.

    python bench/bench_egraph_chains.py [--quick] [--backend reference|cuda] [--json PATH]

(`--backend` defaults to cuda where a GPU is present, else reference.)

Two chains f(f(...f(a))) and f(f(...f(b))) of length L over leaves a and b, with M more leaves no
round touches, built and closed first; then union(a, b) and the rebuild, which merges the chains
level by level (L + 1 rounds). Each contender's e-graph is built before its timer starts, so every
time is the union and the rebuild alone:
- vyre: `EGraph.from_arrays`, `rebuild()` (which keeps its signature index), then the timed
  `union` and `rebuild()`; on the GPU also with one host read a round (the rounds launched from
  the host, not in one persistent launch), the column `host rounds`;
- egglog (`egglog.bindings`, one thread): built from facts as `../shared/bench/egglog_rebuild.py`
  does, then the timed firing of the rule that makes the union, which rebuilds; where egglog is
  not installed (the GPU machine) it is reported as not measured;
- a textbook closure in pure Python (union-find, use lists, a signature dict), written here: its
  tables built, then the timed closure of the union.
Each: the best of `--repeats` fresh e-graphs; vyre's classes are checked against the textbook
closure's, and egglog's F rows against the chain length."""
from __future__ import annotations

import json
import os

os.environ["RAYON_NUM_THREADS"] = "1"  # egglog's one thread, set before it can be imported
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

from vyre_numba.egraph import EGraph  # noqa: E402


def chains(L: int, M: int) -> tuple[np.ndarray, ...]:
    """Rows (eclass, op, offsets, children): a = row 0, b = row 1, f^k(a) = row 2k, f^k(b) = row
    2k + 1, then M leaves with operators of their own."""
    n = 2 + 2 * L + M
    op = np.r_[0, 1, np.full(2 * L, 2), 3 + np.arange(M)]
    arity = np.r_[0, 0, np.ones(2 * L, np.int64), np.zeros(M, np.int64)]
    return np.arange(n), op, np.r_[0, np.cumsum(arity)], np.arange(2 * L)


def textbook(eclass, op, offsets, children, unions) -> tuple[list[int], float]:
    """Congruence closure as in the textbooks: union-find, use lists, a signature dict. (The
    classes, the seconds the closure took after its tables were built.)"""
    parent = list(range(len(eclass)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    uses: list[list[int]] = [[] for _ in parent]
    rows = [(int(op[r]), tuple(children[offsets[r]:offsets[r + 1]].tolist())) for r in range(len(op))]
    sig = {}
    for r, (o, ch) in enumerate(rows):
        for c in ch:
            uses[c].append(r)
        sig[(o, ch)] = r
    t = time.perf_counter()
    pending = list(unions)
    while pending:
        a, b = pending.pop()
        a, b = find(a), find(b)
        if a == b:
            continue
        a, b = min(a, b), max(a, b)
        parent[b] = a
        uses[a].extend(uses[b])
        for r in uses[b]:
            o, ch = rows[r]
            key = (o, tuple(find(c) for c in ch))
            s = sig.setdefault(key, r)
            if find(int(eclass[s])) != find(int(eclass[r])):
                pending.append((int(eclass[s]), int(eclass[r])))
    seconds = time.perf_counter() - t
    return [find(int(e)) for e in eclass], seconds


EGGLOG = """(datatype Term (Leaf i64) (F Term))
(function T (i64) Term :no-merge)
(relation ChainR (i64 i64)) (relation LeafR (i64))
(ruleset build) (ruleset unite) (ruleset cleanup)
(rule ((LeafR k)) ((set (T k) (Leaf k))) :ruleset build :name "leaf")
(rule ((ChainR k i) (= x (T i))) ((set (T k) (F x))) :ruleset build :name "f")
(rule () ((union (Leaf 0) (Leaf 1))) :ruleset unite :name "unite")
(rule ((= x (T k))) ((delete (T k))) :ruleset cleanup :name "cleanup")
(input LeafR "LeafR.tsv") (input ChainR "ChainR.tsv")"""


def egglog_seconds(L: int, M: int) -> float | None:
    """The wall time of egglog's union and rebuild, one thread; None without egglog."""
    try:
        import egglog.bindings as eb
    except ImportError:
        return None

    def run(e, text):
        return e.run_program(*e.parse_program(text))
    d = tempfile.mkdtemp(prefix="chains")
    try:
        k = np.arange(2, 2 * L + 2)
        np.savetxt(f"{d}/ChainR.tsv", np.stack([k, k - 2], 1), fmt="%d", delimiter="\t")
        np.savetxt(f"{d}/LeafR.tsv", np.r_[0, 1, 2 * L + 2 + np.arange(M)][:, None], fmt="%d", delimiter="\t")
        e = eb.EGraph(fact_directory=d)
        e.set_report_level(eb.TimeOnly())
        run(e, EGGLOG)
        run(e, "(run-schedule (saturate (run build)))")
        run(e, "(run cleanup 1)")
    finally:
        shutil.rmtree(d)
    t = time.perf_counter()
    run(e, "(run unite 1)")
    seconds = time.perf_counter() - t
    sizes = dict(run(e, "(print-size)")[0].sizes)
    if sizes.get("F") != L:
        raise SystemExit(f"egglog kept {sizes.get('F')} F rows, not {L}: its chains did not merge")
    return seconds


def vyre_seconds(rows, want, backend: str, host_rounds: bool = False) -> tuple[float, int]:
    g = EGraph.from_arrays(*rows, backend=backend)
    g.rebuild(progress=False, persistent=not host_rounds)  # untimed, and compiles the kernels the timed one runs
    t = time.perf_counter()
    g.union([(0, 1)])
    s = g.rebuild(progress=False, persistent=not host_rounds)
    seconds = time.perf_counter() - t
    if not (s.converged and np.array_equal(g.classes(), want)):
        raise SystemExit("vyre's classes differ from the textbook closure's: the benchmark is void")
    g.close()
    return seconds, s.rounds


def main() -> dict:
    def more(ap):
        ap.add_argument("--repeats", type=int, default=3)
        ap.add_argument("--backend", choices=["reference", "cuda"], default=None)
    args = common.arguments(__doc__, more)
    if args.backend is None:
        import vyre_numba as vn

        args.backend = "cuda" if "cuda" in vn.available_backends() else "reference"
    gpu = args.backend == "cuda"
    cases = [(1000, 0), (4000, 0)] if args.quick else [(1000, 0), (4000, 0), (16000, 0), (1000, 400_000)]
    out = {"backend": args.backend, "cases": {}}
    print(f"{'L':>6} {'M':>8} {'rounds':>7} {'vyre ms':>9}" + (f" {'host rounds ms':>15}" if gpu else "")
          + f" {'egglog ms':>10} {'textbook ms':>12} {'egglog/vyre':>12}")
    for L, M in cases:
        rows = chains(L, M)
        books = [textbook(*rows, [(0, 1)]) for _ in range(max(1, args.repeats))]
        want, book = np.asarray(books[0][0]), min(b[1] for b in books)
        vyre = min(vyre_seconds(rows, want, args.backend) for _ in range(max(1, args.repeats)))
        host = min(vyre_seconds(rows, want, args.backend, True) for _ in range(max(1, args.repeats))) if gpu else None
        egg = [egglog_seconds(L, M) for _ in range(max(1, args.repeats))]
        egg_s = None if None in egg else min(egg)
        row = {"L": L, "M": M, "rounds": vyre[1], "vyre_ms": vyre[0] * 1e3, "textbook_ms": book * 1e3,
               "host_rounds_ms": None if host is None else host[0] * 1e3,
               "egglog_ms": None if egg_s is None else egg_s * 1e3,
               "ratio_egglog_over_vyre": None if egg_s is None else egg_s / vyre[0]}
        out["cases"][f"L={L},M={M}"] = row
        egg_text = "not run" if egg_s is None else f"{egg_s * 1e3:.1f}"
        ratio = "-" if egg_s is None else f"{egg_s / vyre[0]:.2f}x"
        print(f"{L:>6} {M:>8} {vyre[1]:>7} {vyre[0] * 1e3:>9.1f}" + (f" {host[0] * 1e3:>15.1f}" if gpu else "")
              + f" {egg_text:>10} {book * 1e3:>12.1f} {ratio:>12}", flush=True)
    if any(r["egglog_ms"] is None for r in out["cases"].values()):
        print("egglog is not installed here: its column is not measured (pip install egglog)")
    print(json.dumps(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
