"""``labeldp demo``: an advertiser and a publisher train a private conversion model end to end.

``world`` splits a real dataset into what each party holds, ``parties`` starts (or connects to) the
two services, ``flow`` runs the whole exchange through their public APIs and reports, ``plots``
draws it; ``mechanism`` measures the mechanism on its own (``--mechanism-only``, run by ``main``).
"""
