-- Why: with tracing on, an instance is one trace from its start to its end, whichever node runs
-- which attempt and however long it waits between them. The start span's W3C traceparent is kept
-- with the instance, so every later span (queue waits, attempts, timers, decisions,
-- compensations), on any node, is parented to it. NULL when tracing was off at the start: such an
-- instance's spans begin traces of their own.
ALTER TABLE workflows ADD COLUMN trace_parent text;
