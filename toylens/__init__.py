"""toylens's command layer: training families, sweeps and their executors."""
