"""The statistics that turn a sweep's per-example effects into verdicts — useful, harmful,
negligible or inconclusive — with intervals: the paired cluster bootstrap band
(:mod:`~interp.analysis.verdicts.bands`), the layer rule (:mod:`~interp.analysis.verdicts.layers`),
and the checks beside it: confirmation on held-out groups, agreement across removal kinds, prior
shift on yes/no tasks, half precision against float32, probe-based verdicts, direct beside total
effect and attribution estimates against exact runs. Above :mod:`interp.analysis.engines` and
:mod:`interp.analysis.config`. Nothing is re-exported here."""
