"""OutputOwnership's parameters (its behaviour is proven in tests/verif/formal/test_formal_switch_alloc.py)."""

import pytest

from hw.switch.output_ownership import ADMIT_RULES, OutputOwnership


def test_bad_admit_rule_names_the_valid_ones():
    with pytest.raises(ValueError, match="admit must be one of packet, in_flight, any, got 'all'"):
        OutputOwnership(ports=4, lanes=2, egress_depth=34, max_payload=16, admit="all")
    assert ADMIT_RULES == ("packet", "in_flight", "any")
