"""What the service does on request, shared by every way of asking: the API routes, the web pages, the
``greentwin`` commands and the retraining pipeline all call these modules, so a greenhouse is registered,
a report signed or a demonstration exported the same way whoever asks.

Each module is one concern (:mod:`.greenhouses`, :mod:`.reports`, :mod:`.report_signing`,
:mod:`.demonstrations`); none parses arguments, prints or answers HTTP: that is the caller's, which
turns the values and exceptions returned here into output, exit codes or status codes. Nothing here
imports ``app.api``, ``app.web`` or ``app.cli`` (tests/test_architecture.py holds it to that).
Heavy imports (reportlab, pyHanko, the learner) stay inside the functions that need them, so
``greentwin --help`` stays fast.
"""
