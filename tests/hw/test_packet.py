"""The packet format: one layout, Python encode/decode derived from it, and the efficiency function."""

import random

import pytest
from amaranth.lib import data

from hw.packet import (DEFAULT_FLIT_WIDTH, HEADER_BITS, NARROW, OPCODES, WIDE, EType, ErrorCode, Flit, Header,
                       HeaderLayout, Opcode, Packet, RedOp, check_header, flit_layout, header_fields, header_format,
                       pack_deferred_addr, pack_flit, payload_efficiency, payload_flits, unpack_deferred_addr,
                       unpack_flit, wire_flits)

# The documented widths of each format (an independent statement of the module docstring's tables).
WIDTHS = {
    "narrow": {"src": 6, "tag": 8, "length": 5, "etype": 3, "redop": 2, "dst": 6, "code": 8, "addr": 48,
               "group": 8, "mask": 64, "index": 18, "offset": 10, "xtag": 8},
    "wide": {"src": 7, "tag": 8, "length": 5, "etype": 3, "redop": 2, "dst": 7, "code": 8, "addr": 48,
             "group": 8, "mask": 128, "index": 20, "offset": 10, "xtag": 8},
}


def random_header(rng, opcode, fmt=NARROW):
    h = Header(opcode=opcode)
    for name in header_fields(opcode):
        if name == "opcode":
            continue
        setattr(h, name, rng.getrandbits(WIDTHS[fmt.name][name]))
    if "code" in header_fields(opcode):
        h.code = rng.choice(list(ErrorCode)).value   # an enum field: only defined codes have a view
    return h


@pytest.mark.parametrize("fmt", [NARROW, WIDE], ids=lambda f: f.name)
@pytest.mark.parametrize("opcode", list(Opcode))
def test_roundtrip_matches_amaranth_layout(opcode, fmt, seed):
    """Python encoding equals the Amaranth layout's own view of the bits, field by field, in both formats."""
    rng = random.Random(seed)
    layout = data.Layout.cast(fmt.layout)
    for _ in range(50):
        h = random_header(rng, opcode, fmt)
        bits = h.encode(fmt)
        assert bits < (1 << fmt.bits)
        assert Header.decode(bits, fmt) == h
        view = layout.from_bits(bits)
        assert view.opcode == opcode
        for name in ("src", "tag", "length"):
            assert int(getattr(view, name)) == getattr(h, name)
        variant = getattr(view.route, OPCODES[opcode].variant)
        for name in header_fields(opcode)[6:]:
            value = getattr(variant, name)
            assert int(value.value if hasattr(value, "value") else value) == getattr(h, name), name


def test_narrow_format_is_the_documented_128_bits():
    """The narrow format (up to 64 ports) keeps its documented offsets, bit for bit."""
    assert NARROW.layout is HeaderLayout and NARROW.bits == HEADER_BITS == 128
    assert (NARROW.port_bits, NARROW.max_ports, NARROW.index_bits, NARROW.min_flit_width) == (6, 64, 18, 128)
    assert NARROW.common == {"opcode": (0, 4), "src": (4, 6), "tag": (10, 8), "length": (18, 5), "etype": (23, 3),
                             "redop": (26, 2)}
    assert NARROW.variants["dyn"] == {"group": (28, 8), "mask": (36, 64), "index": (100, 18), "offset": (118, 10)}
    assert NARROW.variants["uni"] == {"dst": (28, 6), "code": (34, 8), "addr": (42, 48), "xtag": (90, 8)}
    h = Header(opcode=Opcode.DYN_ST, src=5, tag=7, length=16, group=3, mask=0b1011, index=1000, offset=32)
    assert h.encode() == h.encode(NARROW) == (5 | 5 << 4 | 7 << 10 | 16 << 18 | 3 << 28 | 0b1011 << 36 |
                                              1000 << 100 | 32 << 118)


def test_wide_format_fills_a_256_bit_head_flit():
    assert (WIDE.bits, WIDE.port_bits, WIDE.max_ports, WIDE.index_bits, WIDE.min_flit_width) == (256, 7, 128, 20, 256)
    assert WIDE.variants["dyn"] == {"group": (29, 8), "mask": (37, 128), "index": (165, 20), "offset": (185, 10)}
    h = Header(opcode=Opcode.DYN_ST, src=71, length=16, mask=(1 << 72) - 1, index=72 * 4096 - 1, offset=3)
    bits = h.encode(WIDE)
    assert bits >> 195 == 0, "the reserved bits are zero"
    assert Header.decode(bits | (1 << 255), WIDE) == h, "decoding ignores the reserved bits"
    with pytest.raises(ValueError, match="'mask'=.* does not fit in 64 bits"):
        Header(opcode=Opcode.DYN_ST, mask=1 << 71).encode()   # a 72-port mask does not fit the narrow format
    p = Packet(h, list(range(16)))
    flits = p.flits(256, WIDE)
    assert len(flits) == 17 and flits[0].data == bits and Packet.from_flits(flits, WIDE) == p
    with pytest.raises(ValueError, match="wide header .* needs flit_width >= 256"):
        p.flits(128, WIDE)
    assert unpack_deferred_addr(pack_deferred_addr(9, 72 * 4096 - 1, 4000, WIDE), WIDE) == (9, 72 * 4096 - 1, 4000)
    with pytest.raises(ValueError, match="index=294911 does not fit in 18 bits"):
        pack_deferred_addr(9, 72 * 4096 - 1, 4000)


@pytest.mark.parametrize("ports", [1, 4, 8, 64])
@pytest.mark.parametrize("flit_width", [None, 128, 256, 512])
def test_header_format_up_to_64_ports_is_narrow(ports, flit_width):
    assert header_format(ports, flit_width) is NARROW


def test_header_format_past_64_ports():
    assert header_format() is NARROW
    for ports in (65, 72, 128):
        assert header_format(ports) is WIDE
        assert header_format(ports, 256) is header_format(ports, 512) is WIDE
        with pytest.raises(ValueError, match=f"{ports} ports need the wide header .* use flit_width 256, 512"):
            header_format(ports, 128)
    for bad in (0, 129, 7.0, "72"):
        with pytest.raises(ValueError, match="ports must be an integer in 1..128"):
            header_format(bad)


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


def test_efficiency_at_72_ports():
    """Past 64 ports the header is one 256-bit head flit: the efficiency of 256-bit flits, P/(P+1)."""
    assert payload_efficiency(512, flit_bytes=32, max_payload_bytes=512) == pytest.approx(16 / 17)
    assert payload_efficiency(256, flit_bytes=32, max_payload_bytes=256) == pytest.approx(8 / 9)
    # The alternative, a second 128-bit header flit per packet, at 256-B packets:
    assert 256 / ((16 + 2) * 16) == pytest.approx(8 / 9)
    assert 8 / 9 < payload_efficiency(256) == pytest.approx(16 / 17)
    # A DeepSeek-V3 FP8 row (7,392 B) in 512-B packets of 256-bit flits, against 256-B ones of 128-bit flits.
    assert payload_efficiency(7392, flit_bytes=32, max_payload_bytes=512) == pytest.approx(7392 / (246 * 32))
    assert payload_efficiency(7392) == pytest.approx(7392 / (491 * 16))


def test_wide_tag_roundtrip():
    from hw.packet import wide_tag, wide_tag_fields
    h = Header(opcode=Opcode.RED_READ, dst=3, length=2, **wide_tag_fields(0x1A5))
    assert (h.tag, h.xtag) == (0xA5, 0x01)
    assert wide_tag(Header.decode(h.encode())) == 0x1A5
    with pytest.raises(ValueError, match="16 bits"):
        wide_tag_fields(1 << 16)
