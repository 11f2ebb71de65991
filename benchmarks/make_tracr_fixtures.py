"""Compile the Tracr programs of probes.circuits.tracr.PROGRAMS and store each as a fixture
(safetensors weights + JSON config and encodings) that the tests and benchmarks/tracr_table.py run
without jax.

    pip install -e .[tracr] && .venv/bin/python benchmarks/make_tracr_fixtures.py [--out tests/fixtures/tracr]
"""

from __future__ import annotations

import time
from pathlib import Path

from probes.circuits.truth.tracr import FIXTURES, PROGRAMS, compile_program, save, with_truth


def main() -> None:
    from common.cli import Parser, out_path, run_cli

    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=out_path, default=FIXTURES)
    parser.add_argument("--programs", default=None, help="comma-separated program names (default: every one)")
    args = parser.parse_args()
    run_cli(make_fixtures, args.out, args.programs)  # a UsageError (no tracr or jax) is one line, exit 2


def make_fixtures(out: Path, names: str | None = None) -> None:
    from common.cli import UsageError

    picked = list(PROGRAMS) if names is None else names.split(",")
    unknown = [name for name in picked if name not in PROGRAMS]
    if unknown:
        raise UsageError(f"unknown program {', '.join(unknown)}; choose from: {', '.join(PROGRAMS)}")
    for name in picked:
        program = PROGRAMS[name]
        began = time.perf_counter()
        compiled = with_truth(compile_program(program), program)
        save(compiled, out)
        c = compiled.config
        print(
            f"{program.name}: {c['n_layers']} layers x {c['n_heads']} heads, d_model {c['d_model']}, "
            f"{len(compiled.truth['used'])} used edges, compiled in {time.perf_counter() - began:.1f} s -> {out / program.name}.safetensors"
        )


if __name__ == "__main__":
    main()
