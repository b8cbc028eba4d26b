"""How well a model does a task, with group-bootstrap intervals: contrast accuracy and logit
difference per template, the natural-dialogue tables, linear probes and the Myhill–Nerode boundary
on dialogue items, and the evaluation suite of a checkpoint before and after fine-tuning. Above
:mod:`interp.analysis.verdicts`. Nothing is re-exported here."""
