"""The `vyre-numba` command: info, run, emit, demo."""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np

from . import ir
from .registry import available_backends, get_backend, unavailable_reason
from .config import DispatchConfig
from .errors import VyreError


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def cmd_info(args: argparse.Namespace) -> int:
    """Backends, GPU and toolchain versions."""
    from . import __version__

    print(f"vyre-numba {__version__} (Python {platform.python_version()}, {platform.machine()})")
    for dist in ("numpy", "numba", "numba-cuda", "llvmlite", "cuda-core", "cuda-bindings", "nvidia-nvjitlink"):
        print(f"  {dist:18s} {_version(dist)}")
    print("backends:")
    for name in ("cuda", "reference"):
        why = unavailable_reason(name)
        print(f"  {name:10s} {'available' if why is None else 'unavailable: ' + why}")
    if unavailable_reason("cuda") is None:
        from .gpu import caps

        c = caps()
        print(f"GPU: {c.name}, sm_{c.sm}, {c.sm_count} SMs, cooperative launch: {c.cooperative_launch}")
    print(f"default backend: {available_backends()[0]}")
    return 0


def _load_program(path: str) -> ir.Program:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise VyreError(f"cannot read program {path!r}: {e.strerror}. Fix: pass the path of a Program.to_json() file.") from e
    return ir.Program.from_json(text)


def cmd_run(args: argparse.Namespace) -> int:
    """Run a program on the best backend with .npy inputs; write outputs as .npy files."""
    program = _load_program(args.program)
    inputs = {}
    for item in args.input or []:
        name, sep, file = item.partition("=")
        if not sep:
            raise VyreError(f"--input {item!r} is not NAME=FILE.npy. Fix: write e.g. --input a=a.npy.")
        try:
            inputs[name] = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise VyreError(f"cannot load {file!r} for input {name!r}: {e}. Fix: pass a .npy file saved with numpy.save.") from e
    backend = get_backend(args.backend)
    config = DispatchConfig(grid=tuple(args.grid) if args.grid else None, fixpoint_iterations=args.iterations)
    t0 = time.perf_counter()
    outputs = backend.dispatch(program, inputs, config)
    dt = time.perf_counter() - t0
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    for decl, arr in zip(program.outputs, outputs):
        np.save(out_dir / f"{decl.name}.npy", arr)
        print(f"{decl.name}: {arr.size} x {decl.dtype} -> {out_dir / (decl.name + '.npy')}")
    print(f"ran {program.name!r} on {backend.name} in {dt * 1e3:.2f} ms")
    return 0


def cmd_emit(args: argparse.Namespace) -> int:
    """Write a program's PTX (or assembled cubin) and a JSON manifest of its kernel ABI."""
    from .ptx import abi, assemble, emit

    program = _load_program(args.program)
    text = emit(program, sm=args.sm)
    out = Path(args.output)
    if args.cubin:
        out.write_bytes(assemble(text, sm=args.sm))
    else:
        out.write_text(text)
    manifest = abi(program).to_dict()
    manifest.update(sm=args.sm, format="cubin" if args.cubin else "ptx", digest=program.digest(),
                    buffers=[{"name": b.name, "binding": b.binding, "dtype": b.dtype.value, "access": b.access.value,
                              "count": b.count, "role": b.role.value} for b in program.bound_buffers])
    man_path = out.with_name(out.name + ".json")
    man_path.write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {out} and {man_path}")
    return 0


def demo_program() -> ir.Program:
    """y[i] = a * x[i] + y[i] over f32, with the bounds check every kernel needs."""
    i = ir.var("i")
    return ir.Program(
        [ir.BufferDecl.uniform("a", 0, "f32", 1), ir.BufferDecl.read("x", 1, "f32"),
         ir.BufferDecl.read_write("y", 2, "f32")],
        256,
        [ir.let("i", ir.gid(0)),
         ir.if_(i < ir.buf_len("y"), [ir.store("y", i, ir.fma(ir.load("a", 0), ir.load("x", i), ir.load("y", i)))])],
        name="saxpy",
    )


def cmd_demo(args: argparse.Namespace) -> int:
    """A short tour: build, validate, inspect and run a program; compare with the reference."""
    backend = get_backend(args.backend)
    print(f"vyre-numba demo on the {backend.name!r} backend (available: {', '.join(available_backends())})\n")
    p = demo_program()
    ir.check(p)
    print("1. A program in the vyre IR, validated:\n")
    print("   " + str(p).replace("\n", "\n   "))
    print(f"\n   digest {p.digest()[:16]}..., {len(p.to_json())} bytes of canonical JSON\n")
    n = args.n
    rng = np.random.default_rng(0)
    a = np.array([2.5], np.float32)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    t0 = time.perf_counter()
    (out,) = backend.dispatch(p, [a, x, y])
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    (out,) = backend.dispatch(p, [a, x, y])
    warm = time.perf_counter() - t0
    print(f"2. Ran saxpy over {n:,} elements on {backend.name}: first call {first * 1e3:.1f} ms "
          f"(includes compiling), next {warm * 1e3:.2f} ms")
    ref = get_backend("reference")
    (expect,) = ref.dispatch(p, [a, x, y])
    same = np.array_equal(out.view(np.uint32), expect.view(np.uint32))
    print(f"   bit-identical to the reference interpreter: {same}")
    if backend.name == "cuda":
        from .ptx import emit

        text = emit(p, sm=backend.caps.sm)
        body = [line for line in text.splitlines() if "fma" in line or "ld.global" in line][:4]
        print("\n3. Its PTX, as emitted (a few lines):\n   " + "\n   ".join(body))
    print("\n4. Mistakes end in a clear error:")
    try:
        backend.dispatch(p, [a, x.astype(np.float64), y])
    except VyreError as e:
        print(f"   {type(e).__name__}: {e}")
    return 0 if same else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vyre-numba", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help=cmd_info.__doc__).set_defaults(fn=cmd_info)
    run = sub.add_parser("run", help=cmd_run.__doc__)
    run.add_argument("program")
    run.add_argument("--input", action="append", metavar="NAME=FILE.npy")
    run.add_argument("--out", required=True, metavar="DIR")
    run.add_argument("--backend", choices=["cuda", "reference"])
    run.add_argument("--grid", type=int, nargs="+", metavar="N")
    run.add_argument("--iterations", type=int, default=1)
    run.set_defaults(fn=cmd_run)
    emit = sub.add_parser("emit", help=cmd_emit.__doc__)
    emit.add_argument("program")
    emit.add_argument("--sm", type=int, default=90)
    emit.add_argument("--cubin", action="store_true")
    emit.add_argument("-o", "--output", required=True)
    emit.set_defaults(fn=cmd_emit)
    demo = sub.add_parser("demo", help=cmd_demo.__doc__)
    demo.add_argument("--backend", choices=["cuda", "reference"])
    demo.add_argument("-n", type=int, default=1 << 20)
    demo.set_defaults(fn=cmd_demo)
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except VyreError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
