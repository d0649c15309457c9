"""Every operation of the API, once: a function from the caller's arguments to a
:class:`~standard_agents_client._call.Call` (or, for an event stream, a
:class:`~standard_agents_client._streams.Follow`). The resources of both clients bind
these (``client.threads.create`` is :func:`threads.thread_create`, sent by ``httpx.Client``
or ``httpx.AsyncClient``); their docstrings are the methods' documentation.
"""
