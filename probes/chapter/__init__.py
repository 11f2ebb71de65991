"""The source chapter's experiments (the ablation ladder, positions, scaling, parameter counts,
cost): experiments built on the probes, not API."""
