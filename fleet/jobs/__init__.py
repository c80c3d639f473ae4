"""Jobs (C10): a job's terms and id, the binding of an item run to its job and index at
genesis, the Merkle-sum tree over a job's items, the aggregate receipt and its fleet-log leaf,
item proofs and the offline checks of both (``docs/spec/jobs.md``). Above :mod:`fleet.record`,
:mod:`fleet.log` and :mod:`fleet.grants`; below :mod:`fleet.fold`."""

__all__: list[str] = []
