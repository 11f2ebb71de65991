"""`python -m probes.circuit report [RUNS_DIR]`: the user's documented command, kept as a thin entry
into the command layer (`toylens report`). The circuit code itself lives in `probes.circuits`."""

if __name__ == "__main__":
    from common.cli import entry

    def main() -> None:
        from toylens.report import main

        main()

    entry(main)
