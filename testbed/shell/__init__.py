"""The root shell: what brings a fabric up and touches the machine (Mininet, Open vSwitch,
tc, namespaces, processes). Needs root. The pure part of the testbed (topologies, plans,
shuffles, drawings, the flow and cost models) is one folder up and runs anywhere.
"""
