"""Sweeps: planning a grid of runs over seeds (plan), running them locally or on Ray (executors)
and writing what the workers return, then the census (driver)."""
