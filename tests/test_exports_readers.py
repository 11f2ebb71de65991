"""toylens's exports read by the field's own readers: EAP-IG's Graph.from_json and exact patching,
Neuronpedia's graph schema and circuit-tracer's graph model, through
benchmarks/check_exports_with_readers.py. EAP-IG needs TransformerLens < 4, so the readers live in
an environment of their own (docs/exports.md says how to make it); without one this module skips."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

READERS = ("TOYLENS_READER_PYTHON", "TOYLENS_EAP_IG", "TOYLENS_GRAPH_SCHEMA")
pytestmark = pytest.mark.skipif(
    not all(os.environ.get(name) for name in READERS),
    reason="no reader environment: set TOYLENS_READER_PYTHON, TOYLENS_EAP_IG and "
    "TOYLENS_GRAPH_SCHEMA (docs/exports.md)",
)
SCRIPT = Path(__file__).parents[1] / "benchmarks" / "check_exports_with_readers.py"


def test_eap_igs_reader_and_the_viewers_schemas_accept_the_exports(tiny_runs, tmp_path):
    from probes.settings import ReportSettings
    from toylens.export import export_command, main

    runs = tmp_path / "winograd"
    shutil.copytree(tiny_runs, runs)
    # A 150-step run barely tells its pairs apart: below the report's min_gap it is not exported.
    export_command("mib", runs, None, 2, ReportSettings(min_gap=0.0))
    main(["attribution", str(runs), "--pairs", "1"])
    command = [
        sys.executable,
        str(SCRIPT),
        str(runs),
        "--reader-python",
        os.environ["TOYLENS_READER_PYTHON"],
        "--eap-ig",
        os.environ["TOYLENS_EAP_IG"],
        "--schema",
        os.environ["TOYLENS_GRAPH_SCHEMA"],
    ]
    if os.environ.get("TOYLENS_CIRCUIT_TRACER"):
        command += ["--circuit-tracer", os.environ["TOYLENS_CIRCUIT_TRACER"]]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    lines = result.stdout.splitlines()
    assert result.returncode == 0, "\n".join(lines[-20:]) + result.stderr[-2000:]
    assert re.fullmatch(r"\d+ passed, 0 failed, 0 skipped \(3 MIB files, 1 attribution graphs\)", lines[-1])
    assert sum("loaded by Graph.from_json" in line for line in lines) == 3
    assert sum("EAP-IG's exact patching" in line for line in lines) == 1  # the oracle's file
    assert sum("graph-schema.json: valid" in line for line in lines) == 1
