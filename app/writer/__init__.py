"""Everything about a published decision that may wait: explanations, database rows, audit records.

The control loop journals each decision before publishing its command; the writer process
(:mod:`~app.writer.process`) tails the journal and stores each round (:mod:`~app.writer.store`):
one batched explanation pass, one transaction (the spool while the database is down), the audit
events in the same order. :mod:`~app.writer.jobs` is the journaled record both sides share.
"""

from app.writer.jobs import Job, Key, ack_key
from app.writer.process import WriterConfig, WriterProcess
from app.writer.store import DecisionStore

__all__ = ["DecisionStore", "Job", "Key", "WriterConfig", "WriterProcess", "ack_key"]
