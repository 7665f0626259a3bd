"""The twin stepped by W worker processes that share their result buffers with the learner.

* :mod:`policy.parallel.vector`: :class:`~policy.parallel.vector.ShmVectorTwin`, the learner's
  side (torch views, supervision, restarts);
* :mod:`policy.parallel.worker`: the worker loop (numpy and the twin only);
* :mod:`policy.parallel.layout`: the shared-memory segment, per-row seqlock and checksums;
* :mod:`policy.parallel.errors`: worker errors counted per stack-trace fingerprint.

This file imports nothing, so that worker processes, which import the package, stay free of torch.
"""
