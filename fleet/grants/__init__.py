"""Grants: the grant value and its partial order, its codec and JSON view, the signed-event
envelope, the grant book and the segment gate. Above :mod:`fleet.record`; below
:mod:`fleet.fold`, whose grant and control event folds decide with them."""

__all__: list[str] = []
