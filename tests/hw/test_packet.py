"""The packet format: one layout, Python encode/decode derived from it, and the efficiency function."""

import random

import pytest
from amaranth.lib import data

from hw.packet import (DEFAULT_FLIT_WIDTH, HEADER_BITS, OPCODES, EType, ErrorCode, Flit, Header, HeaderLayout,
                       Opcode, Packet, RedOp, check_header, flit_layout, header_fields, pack_flit,
                       payload_efficiency, payload_flits, unpack_flit, wire_flits)


def random_header(rng, opcode):
    h = Header(opcode=opcode)
    for name in header_fields(opcode):
        if name == "opcode":
            continue
        width = {"src": 6, "tag": 8, "length": 5, "etype": 3, "redop": 2, "dst": 6, "code": 8, "addr": 48,
                 "group": 8, "mask": 64, "index": 18, "offset": 10, "xtag": 8}[name]
        setattr(h, name, rng.getrandbits(width))
    if "code" in header_fields(opcode):
        h.code = rng.choice(list(ErrorCode)).value   # an enum field: only defined codes have a view
    return h


@pytest.mark.parametrize("opcode", list(Opcode))
def test_roundtrip_matches_amaranth_layout(opcode, seed):
    """Python encoding equals the Amaranth layout's own view of the bits, field by field."""
    rng = random.Random(seed)
    layout = data.Layout.cast(HeaderLayout)
    for _ in range(50):
        h = random_header(rng, opcode)
        bits = h.encode()
        assert bits < (1 << HEADER_BITS)
        assert Header.decode(bits) == h
        view = layout.from_bits(bits)
        assert view.opcode == opcode
        for name in ("src", "tag", "length"):
            assert int(getattr(view, name)) == getattr(h, name)
        variant = getattr(view.route, OPCODES[opcode].variant)
        for name in header_fields(opcode)[6:]:
            value = getattr(variant, name)
            assert int(value.value if hasattr(value, "value") else value) == getattr(h, name), name


def test_fields_not_carried_are_rejected():
    with pytest.raises(ValueError, match="'mask' is not carried by opcode WRITE"):
        Header(opcode=Opcode.WRITE, mask=3).encode()
    with pytest.raises(ValueError, match="does not fit"):
        Header(opcode=Opcode.WRITE, dst=64).encode()


def test_unknown_opcode_encodes_and_decodes():
    h = Header(opcode=12, src=3, tag=9, dst=1)
    assert Header.decode(h.encode()) == h
    assert payload_flits(12, 5) == 0


def test_payload_flits_per_opcode():
    assert payload_flits(Opcode.WRITE, 7) == 7
    assert payload_flits(Opcode.READ, 7) == 0
    assert payload_flits(Opcode.DYN_LD_REDUCE, 4) == 0
    assert payload_flits(Opcode.DYN_ST, 4) == 4


def test_flit_packing_follows_layout():
    layout = flit_layout(DEFAULT_FLIT_WIDTH)
    f = Flit(0xABCDEF, last=True, poison=False)
    bits = pack_flit(f)
    view = layout.from_bits(bits)
    assert int(view.data) == 0xABCDEF and int(view.last) == 1 and int(view.poison) == 0
    assert unpack_flit(bits) == f
    with pytest.raises(ValueError, match="flit_width"):
        flit_layout(64)


def test_packet_framing():
    p = Packet(Header(opcode=Opcode.WRITE, length=2, dst=1), [1, 2])
    flits = p.flits()
    assert [f.last for f in flits] == [False, False, True]
    assert Packet.from_flits(flits) == p


def test_check_header_rules():
    ok = Header(opcode=Opcode.DYN_ST, mask=0b11, length=2)
    assert check_header(ok, ports=4, max_payload=16) == ErrorCode.NONE
    assert check_header(Header(opcode=13), ports=4, max_payload=16) == ErrorCode.UNKNOWN_OPCODE
    assert check_header(Header(opcode=Opcode.DYN_ST, mask=0), ports=4, max_payload=16) == ErrorCode.BAD_MASK
    assert check_header(Header(opcode=Opcode.DYN_ST, mask=1 << 4), ports=4, max_payload=16) == ErrorCode.BAD_MASK
    assert check_header(Header(opcode=Opcode.WRITE, length=17), ports=4, max_payload=16) == ErrorCode.BAD_LENGTH
    assert check_header(Header(opcode=Opcode.WRITE, dst=4), ports=4, max_payload=16) == ErrorCode.BAD_DST
    assert check_header(Header(opcode=Opcode.MM_ST, group=3), ports=4, max_payload=16,
                        groups={3: 0b1}) == ErrorCode.NONE
    assert check_header(Header(opcode=Opcode.MM_ST, group=2), ports=4, max_payload=16,
                        groups={3: 0b1}) == ErrorCode.BAD_GROUP
    red = Header(opcode=Opcode.DYN_LD_REDUCE, mask=1, etype=7)
    assert check_header(red, ports=4, max_payload=16) == ErrorCode.BAD_TYPE
    red = Header(opcode=Opcode.DYN_LD_REDUCE, mask=1, etype=EType.BF16, redop=3)
    assert check_header(red, ports=4, max_payload=16) == ErrorCode.BAD_TYPE
    red.redop = RedOp.MAX
    assert check_header(red, ports=4, max_payload=16) == ErrorCode.NONE


def test_efficiency_values():
    # 256 B in 16-B flits: 16 data flits + 1 header.
    assert wire_flits(256) == 17
    assert payload_efficiency(256) == pytest.approx(256 / (17 * 16))
    # Explicit addressing with 8 destinations: 8 x 8 B of addresses = 4 more flits per packet.
    assert wire_flits(256, scheme="explicit", destinations=8) == 21
    # Unicast sends a copy per destination.
    assert wire_flits(256, scheme="unicast", destinations=4) == 68
    # A 7168-B FP8 token: 28 packets.
    assert wire_flits(7168) == 28 + 448
    assert payload_efficiency(64, scheme="explicit", destinations=1) < payload_efficiency(64)
    with pytest.raises(ValueError, match="unknown scheme"):
        wire_flits(64, scheme="multicast")
    with pytest.raises(ValueError, match="positive"):
        wire_flits(0)


def test_wide_tag_roundtrip():
    from hw.packet import wide_tag, wide_tag_fields
    h = Header(opcode=Opcode.RED_READ, dst=3, length=2, **wide_tag_fields(0x1A5))
    assert (h.tag, h.xtag) == (0xA5, 0x01)
    assert wide_tag(Header.decode(h.encode())) == 0x1A5
    with pytest.raises(ValueError, match="16 bits"):
        wide_tag_fields(1 << 16)
