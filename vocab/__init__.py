"""The vocabulary every layer shares: the wiring plan, flow records, plug-in discovery and
the input validation rules. It sits below every other package and imports none of them, so
the controller, the traffic models, the testbed, ops and the CLI can all speak it without
importing each other.
"""
