"""Compile the Tracr programs of probes.circuits.tracr.PROGRAMS and store each as a fixture
(safetensors weights + JSON config and encodings) that the tests and benchmarks/tracr_table.py run
without jax.

    pip install -e .[tracr] && .venv/bin/python benchmarks/make_tracr_fixtures.py [--out tests/fixtures/tracr]
"""

from __future__ import annotations

import time
from pathlib import Path

from probes.circuits.truth.tracr import FIXTURES, PROGRAMS, compile_program, save


def main() -> None:
    from common.cli import Parser, out_path, run_cli

    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=out_path, default=FIXTURES)
    args = parser.parse_args()
    run_cli(make_fixtures, args.out)  # a UsageError (no tracr or jax) is one line, exit 2


def make_fixtures(out: Path) -> None:
    for program in PROGRAMS.values():
        began = time.perf_counter()
        compiled = compile_program(program)
        save(compiled, out)
        c = compiled.config
        print(
            f"{program.name}: {c['n_layers']} layers x {c['n_heads']} heads, d_model {c['d_model']}, "
            f"compiled in {time.perf_counter() - began:.1f} s -> {out / program.name}.safetensors"
        )


if __name__ == "__main__":
    main()
