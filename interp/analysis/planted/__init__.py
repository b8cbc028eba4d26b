"""A planting judged against its known answer: which layers *become* harmful beside the unplanted
model's own verdicts (:mod:`~interp.analysis.planted.judge`), the pieces of the IOI planting at real
depth (:mod:`~interp.analysis.planted.ioi`) and the scores of a world-model planted-harm run
(:mod:`~interp.analysis.planted.world`). The top sub-room of :mod:`interp.analysis`. Nothing is
re-exported here."""
