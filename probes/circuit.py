"""`python -m probes.circuit report [RUNS_DIR]`: the user's documented command, kept as a thin entry
into the command layer (`toylens report`); `report --model PATH --task NAME` traces a local Hugging
Face checkpoint instead (toylens.byom). The circuit code itself lives in `probes.circuits`."""

if __name__ == "__main__":
    import sys

    from common.cli import entry

    def main() -> None:
        if "--model" in sys.argv[2:] or any(a.startswith("--model=") for a in sys.argv[2:]):
            from toylens.byom import main as outside

            outside(sys.argv[2:])
            return
        from toylens.report import main

        main()

    entry(main, program=True)
