"""Run records: the one rules kernel (:mod:`fleet.record.kernel`) and its kinds and phases,
segments, attestations, seals, the wire structs and the object and wire decoders and verifiers,
wait proofs, record files. Imports the root modules only (``tests/test_layering.py``)."""

__all__: list[str] = []
