"""The benchmark suite behind `vyre-numba bench`: run every `bench_*.py` here (each measures
vyre-numba and its peers in one run on the same data), collect their JSON, draw the plots and
write a generated section for this device at the top of RESULTS.md.

    python bench/suite.py [--quick]          # the same as `vyre-numba bench [--quick]`
    python bench/suite.py --only bfs,compaction --save DIR   # run some now, keep their outcomes
    python bench/suite.py --report DIR [DIR ...]             # write the section from kept outcomes

Saving and reporting apart lets a suite longer than one session's time limit on a GPU machine run
in parts (each part's outcomes saved there) and its section be written where the repository is,
under the device name the parts were measured on; matplotlib is needed only where it is written.
The parts together must hold every benchmark here, once measured on one device at one size.

The section sits between `<!-- bench: DEVICE -->` and `<!-- /bench: DEVICE -->`: a later run on
the same device replaces it, other devices' sections and the notes written by hand stay. A
benchmark that cannot run here (no GPU) says why in the section; nothing is left out silently."""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUICK_ARGS = {"bench_reference.py": ["--log2n", "18", "--repeats", "5"]}  # the others take --quick
TIMEOUT_S = 600


def scripts(here: Path = HERE) -> list[Path]:
    """The benchmark scripts, in name order."""
    return sorted(here.glob("bench_*.py"))


def run_one(script: Path, quick: bool, out: Path) -> dict:
    """{"json": result} or {"skipped": why} or {"failed": last lines of its output} of one script."""
    script, out = script.resolve(), out.resolve()  # it runs in its own folder: a relative path would be read twice
    args = [sys.executable, str(script), "--json", str(out)]
    if quick:
        args += QUICK_ARGS.get(script.name, ["--quick"])
    try:
        env = {**os.environ, "VYRE_NUMBA_PROGRESS": "0"}  # the suite's own bar is the one to show
        p = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=script.parent, env=env)
    except subprocess.TimeoutExpired:
        return {"failed": f"ran past {TIMEOUT_S} s"}
    text = (p.stdout + p.stderr).strip()
    skipped = [line for line in p.stdout.splitlines() if line.startswith("skipped:")]
    if p.returncode == 0 and skipped and not out.exists():
        return {"skipped": skipped[0][len("skipped:"):].strip(), "output": p.stdout.strip(), "stderr": p.stderr.strip()}
    if p.returncode != 0 or not out.exists():
        return {"failed": "\n".join(text.splitlines()[-12:]) or f"exit status {p.returncode}", "output": text}
    return {"json": json.loads(out.read_text()), "output": p.stdout.strip(), "stderr": p.stderr.strip()}


def chosen(found: list[Path], only: str | None) -> list[Path]:
    """The scripts named in `only` (comma-separated, with or without `bench_` and `.py`), all when
    None; a name that matches no script is refused with the names there are."""
    if only is None:
        return found
    stems = {s.stem: s for s in found}
    names = [n.strip().removesuffix(".py") for n in only.split(",") if n.strip()]
    wanted = [n if n.startswith("bench_") else f"bench_{n}" for n in names]
    unknown = [n for n in wanted if n not in stems]
    if unknown or not wanted:
        raise SystemExit(f"--only {only!r}: no benchmark {', '.join(unknown) or '(none named)'}. Fix: name some of "
                         f"{', '.join(k.removeprefix('bench_') for k in stems)}, separated by commas.")
    return [stems[n] for n in dict.fromkeys(wanted)]


def run(quick: bool = False, progress: bool = True, here: Path = HERE, only: str | None = None,
        save: Path | None = None) -> dict[str, dict]:
    """Every benchmark's outcome by script stem (see `run_one`); with `save`, each outcome is also
    written there as it comes, with the device and the sizes it was measured at."""
    from tqdm.auto import tqdm

    found = chosen(scripts(here), only)
    res = {}
    if save is not None:
        try:
            save.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SystemExit(f"--save {save}: cannot make that folder ({e.strerror}). Fix: name a folder, new or "
                             "existing, where this user may write.") from None
        device = device_name_apart()
    with tempfile.TemporaryDirectory() as tmp, tqdm(found, desc="benchmarks", unit="bench", disable=not progress) as bar:
        for s in bar:
            bar.set_postfix_str(s.stem)
            res[s.stem] = run_one(s, quick, Path(tmp) / f"{s.stem}.json")
            if save is not None:
                record = {"device": device, "quick": quick, "date": time.strftime("%Y-%m-%d"), "at": time.time(),
                          "outcome": res[s.stem]}
                part = save / f"{s.stem}.outcome.json"
                part.with_suffix(".tmp").write_text(json.dumps(record, indent=1))
                os.replace(part.with_suffix(".tmp"), part)  # a run cut short leaves whole outcomes only
    return res


def device_name_apart() -> str:
    """`device_name()` as a child process finds it: the suite then holds no GPU context of its own
    while its benchmarks run (one would take memory from them, and no benchmark could run at all on
    a GPU in exclusive-process mode)."""
    code = ("import sys, importlib.util as u; sys.path.insert(0, sys.argv[1]); "
            "s = u.spec_from_file_location('suite', sys.argv[2]); m = u.module_from_spec(s); s.loader.exec_module(m); "
            "print(m.device_name())")
    p = subprocess.run([sys.executable, "-c", code, str(HERE.parent), str(Path(__file__).resolve())],
                       capture_output=True, text=True, timeout=TIMEOUT_S)
    if p.returncode != 0 or not p.stdout.strip():
        raise SystemExit(f"cannot name this machine's device: {(p.stdout + p.stderr).strip()[-600:]}. Fix: run "
                         "`vyre-numba info` to see why, and mend that first.")
    return p.stdout.strip().splitlines()[-1]


def kept(folders: list[Path], here: Path = HERE) -> tuple[dict[str, dict], str, bool, str]:
    """The outcomes saved by `run(save=...)` in `folders`: (outcomes by script stem, device, quick,
    date of the last part). Parts measured on different devices or at different sizes do not make
    one section and are refused, and so are parts that leave out a benchmark of `here` or hold one
    it does not have; a later part's outcome of the same script replaces an earlier."""
    empty = [str(d) for d in folders if not any(Path(d).glob("bench_*.outcome.json"))]
    if empty or not folders:
        raise SystemExit(f"no saved outcomes (bench_*.outcome.json) in {', '.join(empty) or '(no folder named)'}. "
                         "Fix: run `python bench/suite.py --only NAMES --save DIR` on the GPU machine first and name "
                         "only such folders here.")
    parts = dict.fromkeys(p.resolve() for d in folders for p in sorted(Path(d).glob("bench_*.outcome.json")))
    loaded = sorted(((p, _saved(p)) for p in parts), key=lambda pk: pk[1]["at"])
    for key in ("device", "quick"):
        seen = {str(k[key]) for _, k in loaded}
        if len(seen) > 1:
            raise SystemExit(f"the saved outcomes differ in {key} ({', '.join(sorted(seen))}); one section holds one "
                             "device's runs at one size. Fix: report each device's (or each --quick's) folders apart.")
    res = {p.name.removesuffix(".outcome.json"): k["outcome"] for p, k in loaded}
    stems = {s.stem for s in scripts(here)}
    if set(res) != stems:
        lacking, extra = sorted(stems - set(res)), sorted(set(res) - stems)
        says = ([f"lack {', '.join(lacking)}"] * bool(lacking)
                + [f"hold {', '.join(extra)} (not in {here})"] * bool(extra))
        raise SystemExit(f"the saved outcomes {' and '.join(says)}; a section holds the whole suite. Fix: run the "
                         f"rest with `--only {','.join(n.removeprefix('bench_') for n in lacking) or '...'} --save DIR` "
                         "and name DIR too, "
                         "or remove the outcomes of benchmarks that are gone.")
    return dict(sorted(res.items())), loaded[0][1]["device"], loaded[0][1]["quick"], max(k["date"] for _, k in loaded)


def _saved(path: Path) -> dict:
    """One outcome file written by `run(save=...)`, refused unless it has the shape `run` writes."""
    try:
        k = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        k, why = None, f"{type(e).__name__}: {e}"
    else:
        o = k.get("outcome") if isinstance(k, dict) else None
        kinds = [w for w in ("json", "skipped", "failed") if isinstance(o, dict) and w in o]
        why = ("not a JSON object" if not isinstance(k, dict) else
               "device is not a name" if not (isinstance(k.get("device"), str) and k["device"].strip()) else
               "quick is not true or false" if not isinstance(k.get("quick"), bool) else
               "date is not YYYY-MM-DD" if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(k.get("date"))) else
               "at is not a time" if not (type(k.get("at")) in (int, float) and math.isfinite(k["at"])) else
               "outcome is not one of json, skipped or failed" if len(kinds) != 1 else
               "outcome's text is not text" if not isinstance(o.get("output" if "json" in kinds else kinds[0]), str)
               else None)
    if why:
        raise SystemExit(f"{path} is not an outcome saved by --save ({why}). Fix: run that benchmark again with "
                         "`--only NAME --save DIR`, or remove the file.")
    return k


def device_name() -> str:
    """The GPU's name, or a CPU-only description."""
    import vyre_numba as vn

    if vn.registry.unavailable_reason("cuda") is None:
        from vyre_numba.gpu import caps

        return caps().name
    import platform

    return f"CPU only ({platform.processor() or platform.machine()}, reference backend)"


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


# ---- plots ------------------------------------------------------------------------------------

def _bars(ax, labels, values, title, unit):
    bars = ax.barh(labels[::-1], values[::-1], color=["#4c72b0" if "vyre" in lab else "#999999" for lab in labels[::-1]])
    ax.bar_label(bars, labels=[f"{v:,.0f}" if v >= 100 else f"{v:.3g}" for v in values[::-1]], padding=3, fontsize=8)
    ax.set_xlim(0, max(values) * 1.18)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(unit)


def plot_overhead(res: dict, path: Path) -> bool:
    """Per-call cost by dispatch mode against the peers (bench_dispatch, bench_graphs,
    bench_fixpoint); False when none of them ran."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    d = res.get("bench_dispatch", {}).get("json")
    if d:
        w = d["warm"]
        panels.append(("warm launch, host cost a call", "us", [
            ("vyre resident dispatch", w["vyre_dispatch_resident_us"]), ("raw cuLaunchKernel", w["raw_cuLaunchKernel_us"]),
            ("CuPy RawKernel", w.get("cupy_rawkernel_us")), ("numba @cuda.jit", w["numba_jit_us"])]))
    g = res.get("bench_graphs", {}).get("json")
    if g:
        for size, row in g.get("round_trip", {}).items():
            panels.append((f"host round trip, {size}", "us", [
                ("vyre dispatch", row.get("vyre_dispatch_us")), ("vyre graph replay", row.get("vyre_graph_replay_us")),
                ("PyTorch", row.get("pytorch_us")), ("CuPy", row.get("cupy_us")), ("numba", row.get("numba_us"))]))
    f = res.get("bench_fixpoint", {}).get("json")
    if f:
        for size, row in f["rounds"].items():
            panels.append((f"fixpoint round, {size} items", "us", [
                ("vyre cooperative", row["cooperative_us_per_round"]), ("vyre graph", row["graph_us_per_round"]),
                ("vyre relaunch", row["relaunch_us_per_round"]), ("numba relaunch", row["numba_relaunch_us_per_round"])]))
    if not panels:
        return False
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 1.6 + 1.25 * len(panels)), squeeze=False)
    for ax, (title, unit, rows) in zip(axes[:, 0], panels):
        rows = [(k, v) for k, v in rows if v is not None]
        _bars(ax, [k for k, _ in rows], [v for _, v in rows], title, unit)
    fig.suptitle("Per-call cost by dispatch mode (lower is better)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_throughput(res: dict, path: Path) -> bool:
    """Throughput against size for compaction, connected components, BFS and e-graph closure;
    False when none of them ran."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {}
    c = res.get("bench_compaction", {}).get("json")
    if c:
        sizes = {k: v for k, v in c["cases"].items() if k.startswith("2^")}
        n = [2 ** int(k[2:]) for k in sizes]
        series["select, items/s (50% kept)"] = {
            who: (n, [m / (v[f"select_{who}_us"] * 1e-6) for m, v in zip(n, sizes.values())])
            for who in ("vyre", "torch", "cupy")}
    f = res.get("bench_fixpoint", {}).get("json")
    if f:
        comp = f["components"].values()
        series["connected components, CSR entries/s"] = {
            "vyre": ([r["csr_entries"] for r in comp], [r["vyre_entries_per_s"] for r in comp]),
            "scipy": ([r["csr_entries"] for r in comp], [r["scipy_entries_per_s"] for r in comp])}
    b = res.get("bench_bfs", {}).get("json")
    if b:
        rows = [r for r in b.values() if isinstance(r, dict) and "vyre_s" in r]
        ent = [r["csr_entries"] if "csr_entries" in r else 4 * r["side"] * (r["side"] - 1) for r in rows]
        series["BFS, CSR entries/s"] = {"vyre": (ent, [e / r["vyre_s"] for e, r in zip(ent, rows)]),
                                        "scipy": (ent, [e / r["scipy_s"] for e, r in zip(ent, rows)])}
    e = res.get("bench_egraph", {}).get("json")
    if e:
        rows = list(e["sizes"].values())
        n = [r["N"] for r in rows]
        s = {"vyre resident": (n, [r["enodes_per_s"] for r in rows]),
             "vyre with upload": (n, [r["N"] / (r["with_upload_ms"] * 1e-3) for r in rows])}
        eg = [(r["N"], r["N"] / (r["egglog_1t_ms_devmachine"] * 1e-3)) for r in rows if "egglog_1t_ms_devmachine" in r]
        if eg:
            s["egglog, 1 thread (dev machine)"] = ([x for x, _ in eg], [y for _, y in eg])
        npy = [(r["N"], r["N"] / (r["numpy_ms"] * 1e-3)) for r in rows if "numpy_ms" in r]
        if npy:
            s["NumPy twin"] = ([x for x, _ in npy], [y for _, y in npy])
        series["e-graph closure, e-nodes/s"] = s
    if not series:
        return False
    fig, axes = plt.subplots(2, 2, figsize=(10, 7.5))
    for ax, (title, lines) in zip(axes.ravel(), series.items()):
        for who, (x, y) in lines.items():
            ax.plot(x, y, "o-" if "vyre" in who else "s--", label=who)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("size")
        ax.legend(fontsize=8)
    for ax in axes.ravel()[len(series):]:
        ax.axis("off")
    fig.suptitle("Throughput against size (higher is better)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ---- RESULTS.md ------------------------------------------------------------------------------

def summary_lines(res: dict) -> list[str]:
    """One bullet a benchmark that ran (its printed summary), one for those that failed, and one
    a reason for those that could not run here."""
    out, skipped = [], {}
    for name, r in res.items():
        if "json" in r:
            lines = [ln for ln in _without_warnings(r["output"].splitlines()) if ln.strip()
                     and not ln.lstrip().startswith(("{", "/"))]
            out.append(f"- `{name}.py`:" + "".join(f"\n  - {ln.strip()}" for ln in lines))
        elif "skipped" in r:
            why = r["skipped"].split(" Fix: ")[0].rstrip(".")  # the reason; a Fix names calls the section's reader has not
            skipped.setdefault(why, []).append(f"`{name}.py`")
        else:
            out.append(f"- `{name}.py`: FAILED:\n\n  ```\n  " + r["failed"].replace("\n", "\n  ") + "\n  ```")
    out += [f"- not run here ({why}): {', '.join(names)}" for why, names in skipped.items()]
    return out


_WARNING = re.compile(r":\d+: \w*Warning: ")  # Python's `FILE:LINE: CATEGORY: message` header


def _without_warnings(lines: list[str]) -> list[str]:
    """`lines` less Python's warnings (of outputs kept with their stderr): each from its
    `FILE:LINE: ...Warning: ...` line through the source line that raised it (`warn(...`), where that
    comes within a few lines and before the next warning, else the warning's own line."""
    out, k = [], 0
    while k < len(lines):
        if _WARNING.search(lines[k]):
            end = k
            for j in range(k + 1, min(k + 12, len(lines))):
                if _WARNING.search(lines[j]):
                    break
                if lines[j].lstrip().startswith(("warn(", "warnings.warn(")):
                    end = j
                    break
            k = end + 1
            continue
        out.append(lines[k])
        k += 1
    return out


def section_text(results_md: Path, device: str, body: str) -> str:
    """RESULTS.md's text with `body` between this device's markers at the top (after its first
    paragraph), replacing an earlier generated section of the same device."""
    start, end = f"<!-- bench: {device} -->", f"<!-- /bench: {device} -->"
    text = results_md.read_text() if results_md.exists() else "# Benchmark results\n\n"
    block = f"{start}\n{body.rstrip()}\n{end}\n"
    if start in text and end in text:
        return text[:text.index(start)] + block + text[text.index(end) + len(end) + 1:]
    at = min([i for i in (text.find("\n<!-- bench: "), text.find("\n## ")) if i >= 0], default=len(text))
    return text[:at].rstrip() + "\n\n" + block + ("\n" + text[at + 1:] if at < len(text) else "")  # above the first


def write_section(results_md: Path, device: str, body: str) -> None:
    """Put `body` in RESULTS.md as `section_text` says, the file written whole or left as it was."""
    write_all({results_md: section_text(results_md, device, body).encode()})


def write_all(files: dict) -> None:
    """Each path holds its bytes, or, where writing any of them fails, each is left as it was
    (`vyre_numba.files.write_all`)."""
    from vyre_numba.files import write_all as write_set

    write_set([(path, lambda f, data=data: f.write(data)) for path, data in files.items()])


def report(res: dict, quick: bool, here: Path = HERE, device: str | None = None,
           date: str | None = None) -> tuple[Path, list[Path]]:
    """Write the plots, the benchmarks' JSON and RESULTS.md's section for `device` (this machine's
    when None), all of them or none; (RESULTS.md, plot paths)."""
    device = device or device_name()
    plot_dir = here / "plots" / slug(device)
    plot_dir.mkdir(parents=True, exist_ok=True)
    files, plots = {}, []
    with tempfile.TemporaryDirectory() as tmp:  # drawn apart first: a plot is replaced with the rest or not at all
        for p, draw in ((plot_dir / "overhead.png", plot_overhead), (plot_dir / "throughput.png", plot_throughput)):
            drawn = Path(tmp) / p.name
            if draw(res, drawn):
                files[p] = drawn.read_bytes()
                plots.append(p)
    date = date or time.strftime("%Y-%m-%d")
    body = [f"## {date} — {device} (`vyre-numba bench{' --quick' if quick else ''}`, generated)", ""]
    body += summary_lines(res)
    if plots:
        body += [""] + [f"![{p.stem}]({p.relative_to(here).as_posix()})" for p in plots]
    md = here / "RESULTS.md"
    files[md] = section_text(md, device, "\n".join(body) + "\n").encode()
    files.update({plot_dir / f"{name}.json": json.dumps(r["json"], indent=1).encode() for name, r in res.items()
                  if "json" in r})
    write_all(files)
    return md, plots


def _folder(text: str) -> Path:
    import argparse

    if not text.strip():
        raise argparse.ArgumentTypeError("an empty folder name. Fix: name the folder, e.g. /tmp/bench-parts.")
    return Path(text)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, for a first look")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--only", metavar="NAMES", help="only these benchmarks, e.g. bfs,compaction")
    ap.add_argument("--save", metavar="DIR", type=_folder, help="keep each outcome in DIR; write no section")
    ap.add_argument("--report", metavar="DIR", type=_folder, nargs="+", help="write the section from outcomes kept "
                    "by --save in these folders; run nothing")
    a = ap.parse_args(argv)
    clash = [f"--{n}" for n in ("only", "save", "quick") if a.report is not None and getattr(a, n) not in (None, False)]
    if clash:
        raise SystemExit(f"--report writes the section from outcomes already saved, at the sizes they were measured "
                         f"at; it runs nothing, so {', '.join(clash)} would do nothing. Fix: run with --save first, "
                         "then --report DIR ... alone.")
    if a.only is not None and a.save is None:
        raise SystemExit(f"--only {a.only!r} without --save would replace this device's section of the whole suite "
                         "with a part of it. Fix: add --save DIR and write the section later with --report DIR ..., "
                         "or run that bench_NAME.py by itself.")
    if a.report is not None:
        res, device, quick, date = kept(a.report)
        md, plots = report(res, quick, device=device, date=date)
    else:
        res = run(a.quick, progress=not a.no_progress, only=a.only, save=a.save)
        if a.save is not None:
            print(f"saved {len(res)} outcomes in {a.save}")
            return 1 if any("failed" in r for r in res.values()) else 0
        md, plots = report(res, a.quick)
    failed = [k for k, r in res.items() if "failed" in r]
    print(f"wrote {md} and {', '.join(str(p) for p in plots) or 'no plots (no GPU benchmark ran)'}")
    for k in failed:
        print(f"{k}: FAILED\n{res[k]['failed']}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    sys.exit(main())
