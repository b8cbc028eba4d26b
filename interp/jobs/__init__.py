"""The jobs: each one end to end — load, run, write the run folder, draw — called by the CLI.

- :mod:`interp.jobs.experiment` — train a GPT-2 on a world and run the next-token test (``interp train``).
- :mod:`interp.jobs.sweep` — a layer sweep on a checkpoint, its verdicts, files and figures (``interp sweep``).
- :mod:`interp.jobs.pipeline` — the main job, world to fixed model (``interp run [CONFIG]``).
- :mod:`interp.jobs.pragworld` — PragWorld on a pretrained model (``interp run CONFIG`` with
  ``job = "pragworld"``).

The jobs sit above every room whose work they put together (analysis, viz, train, …) and below
the CLI. Import a job from its module; importing this package loads none of them (nor torch).
"""
