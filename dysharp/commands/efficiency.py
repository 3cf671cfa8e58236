"""``dysharp efficiency``: payload efficiency (payload bytes / wire bytes) of the packet format, dynamic
(``dymultimem``: algebraic index + mask, one header flit per packet) against explicit addressing (one
physical address per destination carried in extra header flits), from :func:`hw.packet.payload_efficiency`."""

from tabulate import tabulate

from hw.packet import payload_efficiency, wire_flits


def add_arguments(p) -> None:
    p.add_argument("--sizes", default="16,64,128,256,1024,7168,14336",
                   help="payload sizes in bytes (default: 16,64,128,256,1024,7168,14336; 7168 B is a "
                        "DeepSeek-V3 FP8 token, 14336 B a BF16 one)")
    p.add_argument("--dests", default="1,2,4,8", help="destination counts for explicit addressing")
    p.add_argument("--flit-bytes", type=int, default=16)
    p.add_argument("--max-payload", type=int, default=256, help="largest payload per packet, bytes")


def _ints(text, name):
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--{name} expects comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise ValueError(f"--{name} values must be >= 1")
    return values


def table(sizes, dests, flit_bytes=16, max_payload=256) -> str:
    rows = []
    for size in sizes:
        dyn = payload_efficiency(size, flit_bytes=flit_bytes, max_payload_bytes=max_payload)
        exp = [payload_efficiency(size, scheme="explicit", destinations=d, flit_bytes=flit_bytes,
                                  max_payload_bytes=max_payload) for d in dests]
        rows.append([str(size), f"{dyn:.1%}"] + [f"{e:.1%}" for e in exp])
    return tabulate(rows, headers=["payload B", "dynamic"] + [f"explicit d={d}" for d in dests],
                    tablefmt="github", disable_numparse=True)


def run(args) -> int:
    sizes = _ints(args.sizes, "sizes")
    dests = _ints(args.dests, "dests")
    if args.max_payload % args.flit_bytes:
        raise ValueError("--max-payload must be a multiple of --flit-bytes")
    print(table(sizes, dests, args.flit_bytes, args.max_payload))
    size = 256
    print(f"\nuplink flits to send {size} B to d GPUs: dynamic {wire_flits(size)}, " + ", ".join(
        f"explicit d={d} {wire_flits(size, scheme='explicit', destinations=d)}" for d in dests) + ", " +
        ", ".join(f"unicast d={d} {wire_flits(size, scheme='unicast', destinations=d)}" for d in dests))
    return 0
