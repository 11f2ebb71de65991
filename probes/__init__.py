"""Pure functions from (model, task data) to typed results; rendering lives in probes.report.render."""
