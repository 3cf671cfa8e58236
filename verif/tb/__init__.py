"""cocotb testbenches, one per block (launched from tests/ through verif.harness.runner)."""
