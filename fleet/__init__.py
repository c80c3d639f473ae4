"""Fleet ledger's pure protocol core: records, chain rules, refusals, call accounts, Merkle
trees and proofs, checkpoints and notes, wait proofs, codecs. It does no I/O and imports
nothing of the project but itself (tests/test_core_purity.py, tests/test_layering.py)."""
