"""Experiments a user runs: each writes results, plots and a report (see scenarios/base.py)."""
