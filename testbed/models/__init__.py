"""The lab's models, pure (no root, no Mininet).

``maxmin``: the flow model's event loop, compiled by Numba.

Nothing is imported here, so a user of one model does not load the others.
"""
