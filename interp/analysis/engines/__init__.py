"""How a layer sweep or a patching run is executed: the MLP zero-out and removal sweeps and their
strategies (loop, reuse, prefix-shared packs, resumed forwards, attribution), direct-effect,
activation, stacked and pair patching, path-restricted removals, the per-example metrics and the
one forward they share, the batch chosen from a memory budget, work shared by processes and long
runs kept as resumable units. The lowest sub-room of :mod:`interp.analysis`: it imports none of the
others. Nothing is re-exported here; import from the module (``interp.analysis`` re-exports the
most used names)."""
