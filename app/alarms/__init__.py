"""Operators' alarms: what each kind means (catalogue), the process conditions the service watches
(conditions, watch) and who is told about them (notify, senders).

The grouping, acknowledging and shelving of alarms for the API lives in :mod:`app.api.alarm_book`;
this package knows nothing of the API and nothing of the database but its own tables' shape.
"""
