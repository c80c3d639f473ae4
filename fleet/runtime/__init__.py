"""The durable runtime's journal codec, its verifier and a run's identity. Above
:mod:`fleet.record` and :mod:`fleet.env`."""

__all__: list[str] = []
