"""The site's outlook: its weather and prices, fetched beside the decisions, never on their path.

:mod:`feed` publishes one :class:`~control.outlook.Outlook` for every greenhouse of the site from
two providers, :mod:`weather_provider` and :mod:`price_provider`, which share the bounded GET and
its retries of :mod:`http_source`. What the data is, how a body parses and what a fallback holds
are the twin's (:mod:`twin.weather_data`, :mod:`twin.price_data`): this package owns only the I/O.
"""
