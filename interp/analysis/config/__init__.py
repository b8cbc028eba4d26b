"""A sweep's settings as frozen dataclasses, checked when made: :mod:`~interp.analysis.config.sweep_config`
(what :func:`interp.sweep` takes and ``run.json`` records, with the verdict rule) and
:mod:`~interp.analysis.config.sweep_job` (every setting of ``interp sweep``, its flags generated from
the fields). Importing them loads no torch. Above :mod:`interp.analysis.engines` (it reads the
engines' choices and removals), below the verdicts that read its rule. Nothing is re-exported here."""
