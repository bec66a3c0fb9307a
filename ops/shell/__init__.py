"""The operations agent's shell: the collector that polls a live fabric, the active probe,
and the ops-eval experiment that injects faults and runs traffic. The detectors, the
diagnosis planner, the telemetry store and the scoring are pure, one folder up.
"""
