"""The bottom layer: infrastructure every package may use and that imports none of them.

* :mod:`infra.engine`: the task engine (independent tasks on a local process pool or a Dask cluster) and
  the on-disk result cache keyed by content hash.
* :mod:`infra.scope`: the study's scope (quick, default, full) as the steps read it from their arguments.

The layers above, highest first: ``dysharp`` (the CLI), ``synth``, ``verif``, ``sim_models``, ``hw``;
``.importlinter`` states them and ``tests/test_layers.py`` checks them.
"""
