"""`toylens preflight PATH`: load a local Hugging Face folder offline and run the hook preflight
(models.preflight) alone: every check printed, exit 2 with the one line naming what failed."""

from __future__ import annotations

from pathlib import Path

from models.hf_load import DEFAULT_MEMORY_GIB
from models import Model

PROBE_SHAPE = (2, 12)  # [batch, positions] of the seeded random ids the checks run on


def probe_tokens(model: Model):
    """Seeded random token ids within the model's vocabulary and context."""
    import torch

    batch, positions = PROBE_SHAPE
    generator = torch.Generator(device="cpu").manual_seed(0)
    ids = torch.randint(0, model.cfg.d_vocab, (batch, min(positions, model.cfg.n_ctx)), generator=generator)
    return ids.to(next(model.parameters()).device)


def preflight_command(path: Path, memory_gib: float, device: str) -> None:
    from models.hf_load import load_folder
    from models.preflight import preflight, require

    from probes.circuits.scaled import hooks_used

    loaded = load_folder(path, memory_gib, device)
    result = preflight(loaded.bridge, probe_tokens(loaded.bridge), loaded.hf_model, hooks_used(loaded.bridge))
    for check in result.checks:
        print(f"{'ok  ' if check.passed else 'FAIL'} {check.name}: {check.detail}")
    require(result)
    print(
        f"preflight passed: {len(result.checks)} checks on {loaded.origin.name}, "
        f"{result.forwards} forwards in {result.seconds:.1f} s"
    )


def add_model_flags(parser) -> None:
    """--memory-gib and --device, the flags of every command that loads a Hugging Face folder."""
    from common.cli import Bounded, device_name

    parser.add_argument(
        "--memory-gib",
        type=Bounded(float, 1e-3, 1e6, "GiB of memory the model's weights may take"),
        default=DEFAULT_MEMORY_GIB,
        help=f"memory budget (default {DEFAULT_MEMORY_GIB:g})",
    )
    parser.add_argument("--device", type=device_name, default="cpu", help="cpu (default), cuda, cuda:N or mps")


def main(argv=None) -> None:
    from common.cli import Parser, run_cli

    parser = Parser(prog="toylens preflight", description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="a save_pretrained folder (GPT-2, GPT-NeoX / Pythia or Llama)")
    add_model_flags(parser)
    args = parser.parse_args(argv)
    run_cli(preflight_command, args.path, args.memory_gib, args.device)
