"""Shared fixtures: a real nats-server and a 3-node cluster, from the shipped helpers."""

from fleet_ledger.plumbing.testing import nats_cluster as nats_cluster
from fleet_ledger.plumbing.testing import nats_server as nats_server
