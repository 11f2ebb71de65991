"""Compile the Tracr programs of probes.circuits.tracr.PROGRAMS and store each as a fixture
(safetensors weights + JSON config and encodings) that the tests and benchmarks/tracr_table.py run
without jax.

    pip install -e .[tracr] && .venv/bin/python benchmarks/make_tracr_fixtures.py [--out tests/fixtures/tracr]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from probes.circuits.truth.tracr import FIXTURES, PROGRAMS, compile_program, save


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=FIXTURES)
    args = parser.parse_args()
    for program in PROGRAMS.values():
        began = time.perf_counter()
        compiled = compile_program(program)
        save(compiled, args.out)
        c = compiled.config
        print(f"{program.name}: {c['n_layers']} layers x {c['n_heads']} heads, d_model {c['d_model']}, "
              f"compiled in {time.perf_counter() - began:.1f} s -> {args.out / program.name}.safetensors")


if __name__ == "__main__":
    main()
